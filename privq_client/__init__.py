"""privq_client: the Python client of a privq service, for notebooks and scripts.

- `Client(base_url, api_key)` — a tenant: budget, measurements and mechanisms (a
  `Job` to `.wait()` for), and the free answers as pandas DataFrames.
- `AdminClient(base_url, admin_key)` — the curator: tenants, keys, datasets, grants,
  the ledger, jobs.
- `draft_schema(df)` — a first public schema for a DataFrame, to review before
  `AdminClient.upload(df, schema, name, privacy_unit=…)`.
- `ApiError` — every refusal of the service, with its `code`, `message`, `status`
  and `details`; `TransportError` when no answer came; `JobFailed`, `JobTimeout` from
  `Job.wait()`. All derive from `PrivqClientError`.
- `UnmeasuredAttributesWarning` — warned when an answer or synthetic table involves
  attributes no measurement touched (the service's `Privq-Unmeasured` header).

Install with `pip install 'privq[client]'` (httpx, pandas, tqdm); the service itself
needs none of pandas.
"""

from privq_client.admin import AdminClient
from privq_client.base import BaseClient
from privq_client.client import Client
from privq_client.drafting import DraftedSchema, SchemaDraftWarning, draft_schema
from privq_client.errors import ApiError, JobFailed, JobTimeout, PrivqClientError, TransportError
from privq_client.jobs import Job
from privq_client.unmeasured import UnmeasuredAttributesWarning

__all__ = [
    "AdminClient",
    "ApiError",
    "BaseClient",
    "Client",
    "DraftedSchema",
    "Job",
    "JobFailed",
    "JobTimeout",
    "PrivqClientError",
    "SchemaDraftWarning",
    "TransportError",
    "UnmeasuredAttributesWarning",
    "draft_schema",
]
