"""What a tenant's and the admin's clients share: the connection, lists, reading
datasets, jobs and measurements, and the free answers as DataFrames.

Every list follows the service's `Link: <…>; rel="next"` pages: the methods return
every item (`page_size` sets how many each request fetches), and `paginate()` walks a
list lazily.
"""

from __future__ import annotations

import ssl
from collections.abc import Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Literal, Self

import httpx
import pandas as pd

from privq_client import frames
from privq_client.errors import TransportError
from privq_client.jobs import Job
from privq_client.queries import Filters, count_filters, count_params, factored_query
from privq_client.transport import (
    DEFAULT_TIMEOUT_SECONDS,
    Json,
    Params,
    Transport,
    decode_json,
    segment,
)
from privq_client.unmeasured import warn_unmeasured

JobStatus = Literal["queued", "running", "succeeded", "failed", "cancelled"]
SyntheticMethod = Literal["round", "sample"]


class BaseClient:
    """A connection to one privq service with one API key.

    `base_url` is the service's root (`http://127.0.0.1:8000`, or under a path prefix
    behind a proxy). `timeout` is in seconds per request (None: none). Pass
    `http_client` to send through your own `httpx.Client` (proxies, certificates,
    event hooks); it stays yours to close. Use it as a context manager, or `close()`.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float | None = DEFAULT_TIMEOUT_SECONDS,
        verify: bool | ssl.SSLContext = True,
        http_client: httpx.Client | None = None,
    ) -> None:
        self._transport = Transport(
            base_url, api_key, timeout=timeout, verify=verify, http_client=http_client
        )

    @property
    def base_url(self) -> str:
        return self._transport.base_url

    def close(self) -> None:
        """Close the connections (not those of an `http_client` you passed)."""
        self._transport.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"

    def paginate(
        self, path: str, params: Params | None = None, *, page_size: int | None = None
    ) -> Iterator[Json]:
        """Lazily, every item of a list route (`/v1/...`), fetching page after page."""
        return self._transport.paginate(path, params, page_size=page_size)

    def _all(self, path: str, params: Params | None, page_size: int | None) -> list[Json]:
        return list(self.paginate(path, params, page_size=page_size))

    def health(self) -> Json:
        """`GET /healthz`: `{"status": "ok", …}` while the service answers."""
        body: Json = self._transport.json("GET", "/healthz")
        return body

    def ready(self) -> Json:
        """`GET /readyz`: `{"status": "ready", …}` once the database answers with a current
        schema; `ApiError` 503 with the reason before."""
        body: Json = self._transport.json("GET", "/readyz")
        return body

    # ---- datasets and what was measured ------------------------------------------------

    def datasets(self, *, page_size: int | None = None) -> list[Json]:
        """The datasets this key may use (the admin: all, with row counts)."""
        return self._all("/v1/datasets", None, page_size)

    def dataset(self, dataset_id: str) -> Json:
        """One dataset's public schema (`attributes`); the row count only for the admin."""
        body: Json = self._transport.json("GET", f"/v1/datasets/{segment(dataset_id)}")
        return body

    def measurements(self, dataset_id: str, *, page_size: int | None = None) -> list[Json]:
        """Every noisy measurement of the dataset (they are DP releases), oldest first."""
        return self._all(f"/v1/datasets/{segment(dataset_id)}/measurements", None, page_size)

    def model(self, dataset_id: str) -> Json:
        """The latest model: version, cliques, fit figures, the measurements it covers
        (`ApiError` 404 `no_model` before the first fit)."""
        body: Json = self._transport.json("GET", f"/v1/datasets/{segment(dataset_id)}/model")
        return body

    # ---- jobs -----------------------------------------------------------------------------

    def jobs(
        self,
        *,
        dataset_id: str | None = None,
        status: JobStatus | None = None,
        kind: str | None = None,
        page_size: int | None = None,
    ) -> list[Json]:
        """Jobs newest first (a tenant's key: only its own), filtered if asked."""
        params = {"dataset_id": dataset_id, "status": status, "kind": kind}
        return self._all("/v1/jobs", params, page_size)

    def job(self, job_id: str) -> Job:
        """A job by its id, with its current state."""
        return Job(self._transport, job_id).refresh()

    def cancel_job(self, job_id: str) -> Job:
        """Cancel a job (see `Job.cancel`)."""
        return Job(self._transport, job_id).cancel()

    # ---- free answers -------------------------------------------------------------------

    def marginal(self, dataset_id: str, attributes: Sequence[str] | str) -> pd.DataFrame:
        """The model's marginal over `attributes`: a row per cell, a column per attribute
        (labels), `count`, and `standard_error` when measurements cover it. `attrs`
        keeps `model_version`, `measured`, `error_bound`, `note`, …. Free."""
        names = [attributes] if isinstance(attributes, str) else list(attributes)
        if not names:
            raise ValueError("name at least one attribute")
        response = self._transport.request(
            "GET",
            f"/v1/datasets/{segment(dataset_id)}/marginals",
            params={"attrs": ",".join(names)},
        )
        warn_unmeasured(response, "marginal")
        return frames.marginal_frame(decode_json(response, "GET"))

    def count(self, dataset_id: str, where: Filters | None = None) -> pd.DataFrame:
        """The model's count of records matching every filter, as one row: each filtered
        attribute's condition and `count` (`where={"sex": "F", "age": {"ge": 30,
        "lt": 45}}`). Free."""
        filters = count_filters(where)
        response = self._transport.request(
            "GET",
            f"/v1/datasets/{segment(dataset_id)}/count",
            params={"where": count_params(where)},
        )
        unmeasured = warn_unmeasured(response, "count")
        frame = frames.count_frame(decode_json(response, "GET"), filters)
        frame.attrs["unmeasured_attributes"] = unmeasured
        return frame

    def quantiles(
        self, dataset_id: str, attribute: str, p: Sequence[float] | None = None
    ) -> pd.DataFrame:
        """Quantiles of a numeric or integer attribute from the model: a row per fraction
        p with its `value` and the `low`, `high` ends of the bin it lies in (the
        quartiles when `p` is None). `attrs` keeps `min`, `max`, `count`,
        `model_version`, `note`. Free."""
        params: dict[str, Any] = {"attr": attribute}
        if p is not None:
            params["p"] = ",".join(repr(float(x)) for x in p)
        response = self._transport.request(
            "GET", f"/v1/datasets/{segment(dataset_id)}/quantiles", params=params
        )
        warn_unmeasured(response, "quantiles")
        return frames.quantiles_frame(decode_json(response, "GET"))

    def query(
        self,
        dataset_id: str,
        *,
        where: Filters | None = None,
        by: Mapping[str, Any] | None = None,
        weights: Mapping[str, Sequence[float]] | None = None,
        moments: Mapping[str, int] | None = None,
    ) -> pd.DataFrame:
        """One factored query: `by` axes ("value", "cdf" or named groups), `where`
        filters, `weights` (a row vector per attribute), `moments` (Σ value^k, k ≤ K).
        A column per axis, and `count` — or `value` with weights or moments. Free."""
        query = factored_query(where=where, by=by, weights=weights, moments=moments)
        (frame,) = self._queries(dataset_id, [query])
        return frame

    def queries(self, dataset_id: str, queries: Sequence[Mapping[str, Any]]) -> list[pd.DataFrame]:
        """Several factored queries, in the API's JSON form, in one request: a DataFrame
        each, as `query` makes them. Free."""
        return self._queries(dataset_id, queries)

    def _queries(self, dataset_id: str, queries: Sequence[Mapping[str, Any]]) -> list[pd.DataFrame]:
        listed = [dict(query) for query in queries]
        response = self._transport.request(
            "POST", f"/v1/datasets/{segment(dataset_id)}/queries", json={"queries": listed}
        )
        # From here the warning points at the caller of `query` or `queries`.
        unmeasured = warn_unmeasured(response, "queries", stacklevel=4)
        body = decode_json(response, "POST")
        version = body.get("model_version")
        answered = [
            frames.answer_frame(
                answer, value_column=frames.query_value_column(query), model_version=version
            )
            for query, answer in zip(listed, body["answers"], strict=True)
        ]
        for frame in answered:
            frame.attrs["unmeasured_attributes"] = unmeasured
        return answered

    def synthetic(
        self,
        dataset_id: str,
        *,
        rows: int | None = None,
        method: SyntheticMethod | None = None,
        seed: int | None = None,
    ) -> pd.DataFrame:
        """Synthetic records from the model, read as the CSV streams in: `rows` (default
        the model's estimated total), `method` (`round` or `sample`; the service's default
        if None), `seed` for a repeatable table. `attrs` has `model_version`, `rows` and the
        `method` the service used (if it says). Free."""
        attributes = self.dataset(dataset_id).get("attributes", [])
        params = {"rows": rows, "method": method, "seed": seed}
        with self._transport.stream(
            "GET", f"/v1/datasets/{segment(dataset_id)}/synthetic", params=params
        ) as response:
            unmeasured = warn_unmeasured(response, "synthetic data")
            frame = frames.synthetic_frame(response.iter_bytes(), attributes)
            announced = response.headers.get("X-Rows")
            version = response.headers.get("X-Model-Version")
            used_method = response.headers.get("X-Synthetic-Method")
        if announced is not None and int(announced) != len(frame):
            raise TransportError(
                f"the synthetic table ended after {len(frame)} of {announced} rows",
                method="GET",
                url=str(response.url),
            )
        frame.attrs["model_version"] = int(version) if version else None
        frame.attrs["rows"] = len(frame)
        frame.attrs["method"] = used_method
        frame.attrs["unmeasured_attributes"] = unmeasured
        return frame
