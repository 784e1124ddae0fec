"""`AdminClient`: the curator — tenants and their keys, datasets, grants, the ledger, jobs.

It reads every dataset's answers like a tenant (`BaseClient`), but holds no budget:
measuring is a tenant's (the service answers the admin key 403 there).
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Literal

import pandas as pd

from privq_client import ensure
from privq_client.base import BaseClient
from privq_client.client import privacy_amount
from privq_client.drafting import text_objects
from privq_client.transport import Json, segment

Estimator = Literal["mle", "cgm-em", "stein"]
CsvSource = str | os.PathLike[str] | pd.DataFrame | IO[bytes] | IO[str]
SchemaSource = Mapping[str, Any] | str | os.PathLike[str]
# Uploads are validated row by row before the service answers: allow them time.
UPLOAD_TIMEOUT_SECONDS = 600.0


def schema_text(schema: SchemaSource) -> str:
    """The schema as JSON text: a mapping, JSON text, or the path of a JSON file."""
    if isinstance(schema, Mapping):
        return json.dumps(schema)
    if isinstance(schema, os.PathLike) or not schema.lstrip().startswith("{"):
        return Path(schema).read_text(encoding="utf-8")
    return schema


def _write_text(target: IO[bytes], write: Any) -> None:
    """Write text through a UTF-8 wrapper that leaves `target` open."""
    text = io.TextIOWrapper(target, encoding="utf-8", newline="")
    write(text)
    text.flush()
    text.detach()


@contextmanager
def csv_file(data: CsvSource) -> Iterator[IO[bytes]]:
    """The CSV as a binary file to stream: a path opened, a DataFrame written to a
    temporary file (header, no index), a text file encoded as UTF-8."""
    if isinstance(data, str | os.PathLike):
        with open(data, "rb") as opened:
            yield opened
    elif isinstance(data, pd.DataFrame | io.TextIOBase):
        with tempfile.TemporaryFile() as spooled:
            if isinstance(data, pd.DataFrame):
                _write_text(spooled, lambda text: data.to_csv(text, index=False))
            else:
                _write_text(spooled, lambda text: shutil.copyfileobj(data, text))
            spooled.seek(0)
            yield spooled
    else:
        yield data  # type: ignore[misc]  # a binary file object, as it is


PARQUET_CONTENT_TYPE = "application/vnd.apache.parquet"
TableSource = str | os.PathLike[str] | pd.DataFrame


@contextmanager
def table_file(data: TableSource) -> Iterator[tuple[IO[bytes], str, str]]:
    """(binary file, file name, content type) to stream: a DataFrame written as Parquet
    to a temporary file, a path opened as it is (Parquet by its magic bytes, else CSV)."""
    if isinstance(data, pd.DataFrame):
        import pyarrow as pa
        import pyarrow.parquet as pq

        with tempfile.TemporaryFile() as spooled:
            table = pa.Table.from_pandas(text_objects(data), preserve_index=False)
            pq.write_table(table, spooled)
            spooled.seek(0)
            yield spooled, "data.parquet", PARQUET_CONTENT_TYPE
        return
    if not isinstance(data, str | os.PathLike):
        raise TypeError("data must be a DataFrame or the path of a CSV or Parquet file")
    with open(data, "rb") as opened:
        parquet = opened.read(4) == b"PAR1"
        opened.seek(0)
        name = Path(data).name
        yield opened, name, PARQUET_CONTENT_TYPE if parquet else "text/csv"


class AdminClient(BaseClient):
    """The curator's client (the admin key): every admin route of the service."""

    # ---- tenants and keys -----------------------------------------------------------

    def create_tenant(self, name: str) -> Json:
        """A new tenant with its first key: `id`, `name`, `api_key` (shown only now)."""
        body: Json = self._transport.json("POST", "/v1/tenants", json={"name": name})
        return body

    def tenants(self, *, page_size: int | None = None) -> list[Json]:
        """Every tenant, oldest first (keys are not shown)."""
        return self._all("/v1/tenants", None, page_size)

    def tenant(self, tenant_id: str) -> Json:
        """A tenant with its keys (prefix, created, last used — never the key) and grants."""
        body: Json = self._transport.json("GET", f"/v1/tenants/{segment(tenant_id)}")
        return body

    def _set_disabled(self, tenant_id: str, disabled: bool) -> Json:
        body: Json = self._transport.json(
            "PATCH", f"/v1/tenants/{segment(tenant_id)}", json={"disabled": disabled}
        )
        return body

    def disable_tenant(self, tenant_id: str) -> Json:
        """Refuse every key of the tenant (401 `tenant_disabled`) until it is enabled."""
        return self._set_disabled(tenant_id, True)

    def enable_tenant(self, tenant_id: str) -> Json:
        """Accept the tenant's keys again."""
        return self._set_disabled(tenant_id, False)

    def add_key(self, tenant_id: str) -> Json:
        """One more key for the tenant: `id`, `key_prefix`, `api_key` (shown only now)."""
        body: Json = self._transport.json("POST", f"/v1/tenants/{segment(tenant_id)}/keys")
        return body

    def revoke_key(self, tenant_id: str, key_id: str) -> None:
        """Revoke one key: 401 `key_revoked` from its next request on."""
        self._transport.request(
            "DELETE", f"/v1/tenants/{segment(tenant_id)}/keys/{segment(key_id)}"
        )

    def ensure_tenant(self, name: str, *, new_key: bool = False) -> Json:
        """The tenant called `name`, created (with its first key) if there is none.

        A key is shown only once, when it is issued, so an existing tenant's keys cannot
        be returned: its `api_key` is None — unless `new_key=True`, which issues it one
        more key (`api_key`, `key_id`; revoke old ones with `revoke_key`). `created` says
        whether the tenant is new (then `api_key` is its first key). Rerunnable:
        `tenant = admin.ensure_tenant("analyst", new_key=True)` gives a working key every
        time, at the cost of one key per run.
        """
        return ensure.ensure_tenant(self, name, new_key=new_key)

    # ---- datasets -------------------------------------------------------------------

    def dataset_named(self, name: str) -> Json | None:
        """The dataset called `name`, or None; `ValueError` (`AmbiguousName`) naming the
        ids if several are."""
        return ensure.dataset_named(self, name)

    def ensure_dataset(
        self,
        name: str,
        data: TableSource,
        schema: SchemaSource,
        *,
        privacy_unit: Mapping[str, Any] | None = None,
        rho_total: float | None = None,
        timeout: float | None = UPLOAD_TIMEOUT_SECONDS,
    ) -> Json:
        """The dataset called `name`; uploaded (as `upload` does) only if none is.

        An existing dataset is returned as it is: its records, schema and `rho_total` are
        not compared with `data` and `schema` (delete it to upload anew). `created` says
        whether it was uploaded now. Several datasets of that name: `ValueError` naming
        their ids.
        """
        return ensure.ensure_dataset(
            self,
            name,
            lambda: self.upload(
                data,
                schema,
                name,
                privacy_unit=privacy_unit,
                rho_total=rho_total,
                timeout=timeout,
            ),
        )

    def upload_dataset(
        self,
        name: str,
        data: CsvSource,
        schema: SchemaSource,
        *,
        rho_total: float | None = None,
        timeout: float | None = UPLOAD_TIMEOUT_SECONDS,
    ) -> Json:
        """Upload a table: `data` is a CSV path, a DataFrame or a file object (with a header
        row); `schema` a mapping, JSON text or a JSON file's path (`{"attributes": [...]}`
        or a size map). `rho_total` caps all grants together. Returns the dataset (with
        its row count); a value outside the schema is `ApiError` 422 and stores nothing."""
        form = {"name": name}
        if rho_total is not None:
            form["rho_total"] = str(rho_total)
        # The schema goes as a file part: a form field may not hold a pretty-printed
        # file's line breaks (text fields refuse control characters).
        schema_part = ("schema.json", schema_text(schema).encode("utf-8"), "application/json")
        with csv_file(data) as handle:
            body: Json = self._transport.json(
                "POST",
                "/v1/datasets",
                data=form,
                files={"schema": schema_part, "file": (f"{name}.csv", handle, "text/csv")},
                timeout=timeout,
            )
        return body

    def upload(
        self,
        data: TableSource,
        schema: SchemaSource,
        name: str,
        *,
        privacy_unit: Mapping[str, Any] | None = None,
        rho_total: float | None = None,
        timeout: float | None = UPLOAD_TIMEOUT_SECONDS,
    ) -> Json:
        """Upload a table: `data` a DataFrame (sent as Parquet, its index dropped) or the
        path of a CSV or Parquet file; `schema` as for `upload_dataset` (or
        `draft_schema(df)` reviewed). `privacy_unit={"column": "person_id", "max_rows":
        k}` makes the rows sharing an id one unit: at most k of them are kept (at random)
        and the id column is never stored. Returns the dataset."""
        form = {"name": name}
        if rho_total is not None:
            form["rho_total"] = str(rho_total)
        if privacy_unit is not None:
            form["privacy_unit"] = json.dumps(dict(privacy_unit))
        schema_part = ("schema.json", schema_text(schema).encode("utf-8"), "application/json")
        with table_file(data) as (handle, filename, content_type):
            body: Json = self._transport.json(
                "POST",
                "/v1/datasets",
                data=form,
                files={"schema": schema_part, "file": (filename, handle, content_type)},
                timeout=timeout,
            )
        return body

    def register(
        self,
        name: str,
        schema: SchemaSource,
        uri: str,
        *,
        privacy_unit: Mapping[str, Any] | None = None,
        rho_total: float | None = None,
        wait: bool = True,
        timeout: float | None = None,
    ) -> Json:
        """Register a Parquet source by reference: `uri` a file or a folder of them
        (`file:///srv/lake/visits/`, `s3://bucket/prefix/`) within the service's
        PRIVQ_SOURCE_ROOTS; `schema` as for `upload`. privq copies no row: a job scans the
        source against the schema and the dataset becomes `ready` (or `rejected`).

        `wait=True` waits for that job (`timeout` seconds, None: no limit) and returns the
        dataset as `dataset()` gives it, `status` "ready"; a rejected source raises
        `JobFailed`, whose message says why (the column, how many rows, a few examples).
        `wait=False` returns at once: `id`, `name`, `status` "registering", `job_id`."""
        body: dict[str, Any] = {
            "name": name,
            "schema": json.loads(schema_text(schema)),
            "source": {"format": "parquet", "uri": uri},
        }
        if privacy_unit is not None:
            body["privacy_unit"] = dict(privacy_unit)
        if rho_total is not None:
            body["rho_total"] = rho_total
        registration: Json = self._transport.json("POST", "/v1/datasets", json=body)
        if not wait:
            return registration
        self.job(registration["job_id"]).wait(timeout, progress=False)
        return self.dataset(registration["id"])

    def delete_dataset(self, dataset_id: str) -> None:
        """Delete records, measurements and models; the ledger keeps its lines."""
        self._transport.request("DELETE", f"/v1/datasets/{segment(dataset_id)}")

    def purge_records(self, dataset_id: str) -> None:
        """Destroy the raw records; the model keeps answering, measuring gets 409
        `records_purged`."""
        self._transport.request("DELETE", f"/v1/datasets/{segment(dataset_id)}/records")

    def set_estimator(self, dataset_id: str, estimator: Estimator) -> Json:
        """Choose how the dataset's model is fitted (`mle`, `cgm-em` or `stein`). Returns the
        dataset; if the estimator changed and something is measured, `refit_job_id` names the job
        refitting the model from the same measurements (it spends nothing):
        `admin.job(answer["refit_job_id"]).wait()`."""
        body: Json = self._transport.json(
            "PATCH", f"/v1/datasets/{segment(dataset_id)}", json={"estimator": estimator}
        )
        return body

    # ---- grants ---------------------------------------------------------------------

    def grant(
        self,
        dataset_id: str,
        tenant_id: str,
        rho: float | None = None,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
    ) -> Json:
        """Give a tenant a limit on a dataset: `rho`, or `epsilon` at `delta` (converted to
        ρ by the service). 409 past the dataset's `rho_total`."""
        body: Json = self._transport.json(
            "POST",
            f"/v1/datasets/{segment(dataset_id)}/grants",
            json={"tenant_id": tenant_id, **privacy_amount(rho, epsilon, delta)},
        )
        return body

    def ensure_grant(
        self,
        dataset_id: str,
        tenant_id: str,
        rho: float | None = None,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
    ) -> Json:
        """The tenant's grant on the dataset with this limit: created if it has none, its
        limit set if it differs (409 `rho_below_spent` under what it spent), returned as
        it is otherwise. `created` says whether it is new."""
        amount = privacy_amount(rho, epsilon, delta)
        return ensure.ensure_grant(self, dataset_id, tenant_id, amount)

    def grants(self, dataset_id: str, *, page_size: int | None = None) -> list[Json]:
        """Every grant on the dataset with `rho_limit`, `rho_spent`, `rho_remaining`."""
        return self._all(f"/v1/datasets/{segment(dataset_id)}/grants", None, page_size)

    def set_grant(
        self,
        dataset_id: str,
        grant_id: str,
        rho: float | None = None,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
    ) -> Json:
        """Raise or lower a grant's limit, as `rho` or `epsilon` at `delta` (409
        `rho_below_spent` under what it spent, `rho_total_exceeded` past the cap)."""
        body: Json = self._transport.json(
            "PATCH",
            f"/v1/datasets/{segment(dataset_id)}/grants/{segment(grant_id)}",
            json=privacy_amount(rho, epsilon, delta),
        )
        return body

    def revoke_grant(self, dataset_id: str, grant_id: str) -> None:
        """The tenant loses the dataset (404 from then on); the ledger keeps its charges."""
        self._transport.request(
            "DELETE", f"/v1/datasets/{segment(dataset_id)}/grants/{segment(grant_id)}"
        )

    # ---- budget and the ledger ------------------------------------------------------

    def budget(self, dataset_id: str, tenant_id: str, *, delta: float | None = None) -> Json:
        """A tenant's grant on a dataset: limit, spent, remaining, ε at `delta`."""
        body: Json = self._transport.json(
            "GET",
            f"/v1/datasets/{segment(dataset_id)}/budget",
            params={"tenant_id": tenant_id, "delta": delta},
        )
        return body

    def ledger(
        self,
        *,
        dataset_id: str | None = None,
        tenant_id: str | None = None,
        page_size: int | None = None,
    ) -> list[Json]:
        """Every charge and refund (refunds are lines of their own), oldest first."""
        params = {"dataset_id": dataset_id, "tenant_id": tenant_id}
        return self._all("/v1/ledger", params, page_size)

    def metrics(self) -> str:
        """The Prometheus text of `GET /metrics`."""
        return self._transport.request("GET", "/metrics").text
