"""`Client`: a tenant (analyst) — budget, measurements and mechanisms that spend ρ,
and every free answer (from `BaseClient`).

```python
from privq_client import Client
client = Client("http://127.0.0.1:8000", "pq_…")
job = client.measure(dataset_id, [["age"], ["age", "sex"]], rho=0.1).wait()
client.marginal(dataset_id, ["age", "sex"])      # a DataFrame, free
```
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, overload

import pandas as pd

from privq_client import frames
from privq_client.base import BaseClient
from privq_client.jobs import Job
from privq_client.transport import Json, segment
from privq_client.unmeasured import warn_names

Noise = Literal["gaussian", "laplace"]
Marginals = Sequence[Sequence[str] | str]


def privacy_amount(rho: float | None, epsilon: float | None, delta: float | None) -> Json:
    """The body's amount: `rho`, or `epsilon` with `delta` (the service converts it)."""
    body: Json = {}
    if rho is not None:
        body["rho"] = rho
    if epsilon is not None:
        body["epsilon"] = epsilon
        if delta is not None:
            body["delta"] = delta
    return body


def marginal_lists(marginals: Marginals, *, field: str) -> list[list[str]]:
    """`[["age", "sex"], "race"]` → `[["age", "sex"], ["race"]]` (a name alone is one-way)."""
    if isinstance(marginals, str):
        raise TypeError(
            f"{field} is a list of attribute lists, e.g. [['age'], ['age', 'sex']]; "
            f"got the string {marginals!r}"
        )
    lists: list[list[str]] = []
    for marginal in marginals:
        names = [marginal] if isinstance(marginal, str) else list(marginal)
        if not all(isinstance(name, str) for name in names):
            raise TypeError(f"{field}: attribute names are strings, got {marginal!r}")
        lists.append(names)
    return lists


class Client(BaseClient):
    """A tenant's client: spend ρ on measurements and mechanisms, read everything free."""

    def budget(self, dataset_id: str, *, delta: float | None = None) -> Json:
        """This key's grant on the dataset: `rho_limit`, `rho_spent`, `rho_remaining`, and
        `epsilon` at `delta` (the service's default 1e-6 if None)."""
        body: Json = self._transport.json(
            "GET", f"/v1/datasets/{segment(dataset_id)}/budget", params={"delta": delta}
        )
        return body

    def ledger(self, dataset_id: str, *, page_size: int | None = None) -> list[Json]:
        """This tenant's charges and refunds on the dataset, oldest first."""
        return self._all(f"/v1/datasets/{segment(dataset_id)}/ledger", None, page_size)

    def _submit(
        self,
        path: str,
        body: Json,
        *,
        idempotency_key: str | None,
        dry_run: bool,
        delta: float | None,
    ) -> Job | Json:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        params = {"dry_run": "true", "delta": delta} if dry_run else None
        answer: Json = self._transport.json("POST", path, json=body, params=params, headers=headers)
        if dry_run:
            return answer
        return Job(self._transport, str(answer["job_id"]), accepted=answer)

    @overload
    def measure(
        self,
        dataset_id: str,
        marginals: Marginals,
        *,
        noise: Noise = ...,
        rho: float | None = ...,
        epsilon: float | None = ...,
        delta: float | None = ...,
        sigma: float | None = ...,
        scale: float | None = ...,
        idempotency_key: str | None = ...,
        dry_run: Literal[False] = ...,
    ) -> Job: ...

    @overload
    def measure(
        self,
        dataset_id: str,
        marginals: Marginals,
        *,
        noise: Noise = ...,
        rho: float | None = ...,
        epsilon: float | None = ...,
        delta: float | None = ...,
        sigma: float | None = ...,
        scale: float | None = ...,
        idempotency_key: str | None = ...,
        dry_run: Literal[True],
    ) -> Json: ...

    @overload
    def measure(
        self,
        dataset_id: str,
        marginals: Marginals,
        *,
        noise: Noise = ...,
        rho: float | None = ...,
        epsilon: float | None = ...,
        delta: float | None = ...,
        sigma: float | None = ...,
        scale: float | None = ...,
        idempotency_key: str | None = ...,
        dry_run: bool,
    ) -> Job | Json: ...

    def measure(
        self,
        dataset_id: str,
        marginals: Marginals,
        *,
        noise: Noise = "gaussian",
        rho: float | None = None,
        epsilon: float | None = None,
        delta: float | None = None,
        sigma: float | None = None,
        scale: float | None = None,
        idempotency_key: str | None = None,
        dry_run: bool = False,
    ) -> Job | Json:
        """Measure noisy marginals, paying `rho` (split equally over them), or `epsilon`
        at `delta` (converted to ρ by the service), or giving the noise itself: `sigma`
        (Gaussian) or `scale` (Laplace). Returns the queued `Job` (`.wait()` for it);
        `ApiError` 409 `insufficient_budget` (with `rho_remaining`) charges nothing.
        `idempotency_key` makes a retry return the first job, charged once.
        `dry_run=True`: what it would cost (ε at `delta`) and how accurate it would be,
        as a dict; nothing is charged."""
        body: Json = {"marginals": marginal_lists(marginals, field="marginals"), "noise": noise}
        body.update(privacy_amount(rho, epsilon, delta))
        if sigma is not None:
            body["sigma"] = sigma
        if scale is not None:
            body["scale"] = scale
        path = f"/v1/datasets/{segment(dataset_id)}/measurements"
        return self._submit(
            path, body, idempotency_key=idempotency_key, dry_run=dry_run, delta=delta
        )

    def measure_within_bin_means(
        self,
        dataset_id: str,
        attributes: Sequence[str],
        *,
        noise: Noise = "gaussian",
        rho: float | None = None,
        epsilon: float | None = None,
        delta: float | None = None,
        sigma: float | None = None,
        scale: float | None = None,
        idempotency_key: str | None = None,
        dry_run: bool = False,
    ) -> Job | Json:
        """Measure the within-bin means of binned (numeric) attributes: each bin's noisy
        sum of where its rows lie within it, priced as a one-way marginal each; the
        model version the job ends with uses them for SUM, AVG and moments instead of
        midpoints. Amounts, noise, `idempotency_key` and `dry_run` as in `measure`."""
        if isinstance(attributes, str):
            raise TypeError("attributes is a list of attribute names, not one string")
        body: Json = {"within_bin_means": list(attributes), "noise": noise}
        body.update(privacy_amount(rho, epsilon, delta))
        if sigma is not None:
            body["sigma"] = sigma
        if scale is not None:
            body["scale"] = scale
        path = f"/v1/datasets/{segment(dataset_id)}/measurements"
        return self._submit(
            path, body, idempotency_key=idempotency_key, dry_run=dry_run, delta=delta
        )

    def _mechanism(
        self,
        kind: str,
        dataset_id: str,
        amount: Json,
        options: Json,
        *,
        idempotency_key: str | None,
        dry_run: bool,
        delta: float | None,
    ) -> Job | Json:
        body = {**amount, **{k: v for k, v in options.items() if v is not None}}
        if body.get("workload") is not None:
            body["workload"] = marginal_lists(body["workload"], field="workload")
        path = f"/v1/datasets/{segment(dataset_id)}/mechanisms/{kind}"
        return self._submit(
            path, body, idempotency_key=idempotency_key, dry_run=dry_run, delta=delta
        )

    @overload
    def aim(
        self,
        dataset_id: str,
        rho: float | None = ...,
        *,
        epsilon: float | None = ...,
        delta: float | None = ...,
        workload: Marginals | None = ...,
        max_model_cells: int | None = ...,
        idempotency_key: str | None = ...,
        dry_run: Literal[False] = ...,
    ) -> Job: ...

    @overload
    def aim(
        self,
        dataset_id: str,
        rho: float | None = ...,
        *,
        epsilon: float | None = ...,
        delta: float | None = ...,
        workload: Marginals | None = ...,
        max_model_cells: int | None = ...,
        idempotency_key: str | None = ...,
        dry_run: Literal[True],
    ) -> Json: ...

    @overload
    def aim(
        self,
        dataset_id: str,
        rho: float | None = ...,
        *,
        epsilon: float | None = ...,
        delta: float | None = ...,
        workload: Marginals | None = ...,
        max_model_cells: int | None = ...,
        idempotency_key: str | None = ...,
        dry_run: bool,
    ) -> Job | Json: ...

    def aim(
        self,
        dataset_id: str,
        rho: float | None = None,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        workload: Marginals | None = None,
        max_model_cells: int | None = None,
        idempotency_key: str | None = None,
        dry_run: bool = False,
    ) -> Job | Json:
        """AIM (McKenna et al. 2022): charged `rho` (or `epsilon` at `delta`) up front, it
        chooses which marginals to measure for `workload` (default: all 2-way). Returns
        the `Job`; `dry_run=True` returns its schedule and expected errors instead,
        charging nothing."""
        return self._mechanism(
            "aim",
            dataset_id,
            privacy_amount(rho, epsilon, delta),
            {"workload": workload, "max_model_cells": max_model_cells},
            idempotency_key=idempotency_key,
            dry_run=dry_run,
            delta=delta,
        )

    @overload
    def mwem(
        self,
        dataset_id: str,
        rho: float | None = ...,
        *,
        epsilon: float | None = ...,
        delta: float | None = ...,
        workload: Marginals | None = ...,
        rounds: int | None = ...,
        max_model_cells: int | None = ...,
        idempotency_key: str | None = ...,
        dry_run: Literal[False] = ...,
    ) -> Job: ...

    @overload
    def mwem(
        self,
        dataset_id: str,
        rho: float | None = ...,
        *,
        epsilon: float | None = ...,
        delta: float | None = ...,
        workload: Marginals | None = ...,
        rounds: int | None = ...,
        max_model_cells: int | None = ...,
        idempotency_key: str | None = ...,
        dry_run: Literal[True],
    ) -> Json: ...

    @overload
    def mwem(
        self,
        dataset_id: str,
        rho: float | None = ...,
        *,
        epsilon: float | None = ...,
        delta: float | None = ...,
        workload: Marginals | None = ...,
        rounds: int | None = ...,
        max_model_cells: int | None = ...,
        idempotency_key: str | None = ...,
        dry_run: bool,
    ) -> Job | Json: ...

    def mwem(
        self,
        dataset_id: str,
        rho: float | None = None,
        *,
        epsilon: float | None = None,
        delta: float | None = None,
        workload: Marginals | None = None,
        rounds: int | None = None,
        max_model_cells: int | None = None,
        idempotency_key: str | None = None,
        dry_run: bool = False,
    ) -> Job | Json:
        """MWEM+PGM: `rounds` exponential-mechanism selections over `workload`, charged
        `rho` (or `epsilon` at `delta`) up front. Returns the `Job`; `dry_run=True` its
        rounds and expected errors instead."""
        return self._mechanism(
            "mwem",
            dataset_id,
            privacy_amount(rho, epsilon, delta),
            {"workload": workload, "rounds": rounds, "max_model_cells": max_model_cells},
            idempotency_key=idempotency_key,
            dry_run=dry_run,
            delta=delta,
        )

    def sql(self, dataset_id: str, query: str) -> pd.DataFrame:
        """A SQL SELECT answered from the model (docs/sql.md): a DataFrame with the query's
        columns and rows (NULL as None/NaN), then `<column>_low` and `<column>_high` for
        each SUM/AVG/VAR/STDDEV column (the bounds its bins' edges allow). `attrs` keeps
        `model_version`, `unmeasured`, `standard_errors` and `bounds` (one list per row),
        `estimates` (per column), `note`, `terms`. Free."""
        if not isinstance(query, str) or not query.strip():
            raise ValueError("give one SELECT statement")
        body: Json = self._transport.json(
            "POST", f"/v1/datasets/{segment(dataset_id)}/sql", json={"query": query}
        )
        frame = frames.sql_frame(body)
        warn_names(list(body.get("unmeasured") or []), "sql")
        return frame
