"""Measurements: price and queue a request, draw the noise once, store it, read it back.

`request` validates everything first (attributes, the cell caps, the model that the
dataset's measurements plus these would make), then in the caller's ONE transaction
charges the ledger and creates the job. The worker's side (the gate, the draw) is
`app.services.measuring`; `store` adds a noisy marginal, before anything uses it.

Pricing is exact: a ρ given by the client is split equally over the m marginals and
each σ (or b) is the smallest float whose exact rational cost fits its share; a σ
(or b) given by the client is charged its exact cost rounded up to a ledger unit.
Every cost is at the dataset's sensitivity k, the rows one privacy unit may hold
(`app.services.unit_accounting`): σ costs k²/(2σ²), b costs (k/b)²/2.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from cachetools import LRUCache
from sqlalchemy import Text, func, select
from sqlalchemy import cast as sql_cast
from sqlalchemy.orm import Session

from app.db import Dataset, Job, MeasurementRecord, new_id
from app.errors import InvalidRequest, LedgerInvariantViolated, RecordsPurged
from app.ingest import pack_column, unpack_column
from app.limits import MAX_NOISE_SCALE, format_limit
from app.metrics import record_pending_measurement
from app.pgm.domain import Domain
from app.pgm.junction_tree import model_cells
from app.pgm.measurement import Measurement
from app.privacy import noise
from app.privacy.accounting import BudgetOverspent
from app.privacy.mechanisms.coarse import Coarse
from app.services import jobs, ledger
from app.services.pages import Page, page
from app.services.rho import noise_for_request, units_to_rho

NOISE_KINDS = ("gaussian", "laplace")
MAX_MARGINALS_PER_REQUEST = 1000


class RequestTooLarge(InvalidRequest, code="request_too_large"):
    """The request asks for more cells in all than one measurement may draw noise for."""


class ModelTooLargeRequest(InvalidRequest, code="model_too_large"):
    """The model these measurements would need is larger than the service allows."""


@dataclass(frozen=True)
class MeasurementPlan:
    """A validated request: what to measure, with which noise, at what exact price."""

    marginals: tuple[tuple[str, ...], ...]
    noise: str
    scale: float  # σ (Gaussian) or b (Laplace), the same for every marginal
    rho_units: int  # the total charge
    sensitivity: int = 1  # k, rows per privacy unit, at which it was priced

    def params(self) -> dict[str, Any]:
        return {
            "marginals": [list(m) for m in self.marginals],
            "noise": self.noise,
            "scale": self.scale,
            "rho_units": self.rho_units,
        }


def check_attribute_sets(
    domain: Domain,
    marginals: Sequence[Sequence[str]],
    *,
    max_cells: int,
    field: str = "marginals",
    max_total_cells: int | None = None,
) -> tuple[tuple[str, ...], ...]:
    """Each marginal: known, distinct, non-empty attributes within the cell cap, and with
    `max_total_cells`, all of them together within it (422 otherwise)."""
    if not marginals:
        raise InvalidRequest(f"{field} must list at least one marginal")
    if len(marginals) > MAX_MARGINALS_PER_REQUEST:
        raise InvalidRequest(f"{field}: at most {MAX_MARGINALS_PER_REQUEST} marginals per request")
    checked = []
    for index, attrs in enumerate(marginals):
        attrs = tuple(attrs)
        if not attrs:
            raise InvalidRequest(f"{field}[{index}] is empty: name one or more attributes")
        unknown = [a for a in attrs if a not in domain]
        if unknown:
            raise InvalidRequest(
                f"{field}[{index}] names unknown attribute(s) {unknown}; "
                f"the dataset has {list(domain.attributes)}"
            )
        if len(set(attrs)) != len(attrs):
            raise InvalidRequest(f"{field}[{index}] repeats an attribute: {list(attrs)}")
        cells = domain.cells(attrs)
        if cells > max_cells:
            raise InvalidRequest(
                f"{field}[{index}] {list(attrs)} has {cells} cells; at most {max_cells} are allowed"
            )
        checked.append(attrs)
    total = sum(domain.cells(attrs) for attrs in checked)
    if max_total_cells is not None and total > max_total_cells:
        raise RequestTooLarge(
            f"{field} ask for {total} cells in all; one request may ask for at most "
            f"{max_total_cells} (noise is drawn for every cell). Split it into several requests",
            cells=total,
            max_request_cells=max_total_cells,
        )
    return tuple(checked)


def _active_marginals(dataset_id: str) -> tuple[Any, ...]:
    return (  # what models fit: noisy counts (not `app.services.within_bin_means`)
        MeasurementRecord.dataset_id == dataset_id,
        MeasurementRecord.status == "active",
        MeasurementRecord.kind == "marginal",
    )


def released_attribute_sets(session: Session, dataset_id: str) -> list[tuple[str, ...]]:
    """The distinct attribute sets of the dataset's stored (active) measurements."""
    stored = session.scalars(
        select(sql_cast(MeasurementRecord.attributes, Text))
        .where(*_active_marginals(dataset_id))
        .distinct()
    ).all()
    return sorted({tuple(json.loads(text)) for text in stored if text})


def measured_attribute_sets(
    session: Session, dataset_id: str, *, tenant_id: str | None = None
) -> list[tuple[str, ...]]:
    """The distinct attribute sets measured on the dataset so far (and queued, not yet measured:
    with `tenant_id`, only that tenant's own queued jobs, so that no refusal or dry run
    reveals what another tenant asked for and has not received; releases are everyone's).

    De-duplicated in SQL (as JSON text), so a dataset with thousands of measurements of
    a few marginals costs a few rows here, not thousands.
    """
    sets = set(released_attribute_sets(session, dataset_id))
    # Measurement jobs not yet run will add theirs too: count them, or two requests could
    # each pass the check and together exceed the cap. (Two tenants' still can: the worker
    # refuses the second at its gate, before drawing, refunded whole — see
    # `app.services.measuring`. A mechanism job keeps its own model within the cap, given
    # what is measured when it runs.)
    pending_query = select(sql_cast(Job.params["marginals"], Text)).where(
        Job.dataset_id == dataset_id,
        Job.kind == "measure",
        Job.status.in_(("queued", "running")),
    )
    if tenant_id is not None:
        pending_query = pending_query.where(Job.tenant_id == tenant_id)
    pending = session.scalars(pending_query.distinct()).all()
    for text in pending:
        for attrs in json.loads(text) if text else ():
            sets.add(tuple(attrs))
    return sorted(sets)


# Attribute sets of each dataset's stored (active) measurements, for the most recently
# used datasets. A stored set stays (only a quarantine removes one, which shrinks the
# model), so an entry is never wrong, only incomplete: a miss looks again.
_measured_sets: LRUCache[str, frozenset[frozenset[str]]] = LRUCache(maxsize=256)
_measured_sets_lock = threading.Lock()


def adds_attribute_sets(
    session: Session, dataset_id: str, new_sets: Sequence[Sequence[str]]
) -> bool:
    """Whether any of `new_sets` is not yet among the dataset's stored measurements' sets.

    If none is, measuring them cannot grow the model, and the model-size check (which
    reads every measurement and queued job under the write lock) can be skipped: a
    stored set stays in every later union. (Sets of queued jobs do not count: a queued
    job may still fail and take its sets with it; and releases reveal no one's queue.)
    """
    wanted = {frozenset(s) for s in new_sets}
    with _measured_sets_lock:
        if wanted <= _measured_sets.get(dataset_id, frozenset()):
            return False
    stored = frozenset(
        frozenset(attributes)
        for attributes in session.scalars(
            select(MeasurementRecord.attributes).where(*_active_marginals(dataset_id))
        ).all()
    )
    with _measured_sets_lock:
        _measured_sets[dataset_id] = stored
    return not wanted <= stored


def check_model_size(
    session: Session,
    dataset_id: str,
    domain: Domain,
    new_sets: Sequence[Sequence[str]],
    *,
    max_model_cells: int,
    tenant_id: str | None = None,
) -> int:
    """Cells of the model the dataset's measurements plus `new_sets` make; 422 above the cap."""
    sets = measured_attribute_sets(session, dataset_id, tenant_id=tenant_id)
    sets += [tuple(s) for s in new_sets]
    cells = model_cells(domain, sets)
    if cells > max_model_cells:
        raise ModelTooLargeRequest(
            f"the model these measurements would need has {cells} cells; the service allows "
            f"{max_model_cells}. Measure smaller marginals, or ones that overlap what is "
            "already measured",
            model_cells=cells,
            max_model_cells=max_model_cells,
        )
    return cells


def plan(
    domain: Domain,
    marginals: Sequence[Sequence[str]],
    *,
    noise_kind: str,
    rho_units_total: int | None,
    scale: float | None,
    max_marginal_cells: int,
    max_request_cells: int | None = None,
    sensitivity: int = 1,
) -> MeasurementPlan:
    """Validate a request and price it exactly (no database).

    Exactly one of `rho_units_total` (the charge, already in ledger units) and `scale`
    (σ or b, within `app.limits`' noise range; charged its exact cost rounded up).
    `sensitivity` is the dataset's k (rows per privacy unit), every marginal's L1 and
    L2 sensitivity.
    """
    if noise_kind not in NOISE_KINDS:
        raise InvalidRequest(f"noise must be one of {list(NOISE_KINDS)}, not {noise_kind!r}")
    checked = check_attribute_sets(
        domain, marginals, max_cells=max_marginal_cells, max_total_cells=max_request_cells
    )
    count = len(checked)
    scale_name = "sigma" if noise_kind == "gaussian" else "scale"
    chosen, units = noise_for_request(
        noise_kind,
        rho_units_total,
        scale,
        count,
        sensitivity,
        max_scale=MAX_NOISE_SCALE,
        items="marginal(s)",
    )
    # The noise must be storable and fittable exactly (see app.limits); a ρ share this
    # small (for this sensitivity) cannot happen within the ρ, marginal and unit limits,
    # but a changed limit could.
    if chosen > MAX_NOISE_SCALE:
        raise InvalidRequest(
            f"this ρ spread over {count} marginal(s) needs noise above "
            f"{scale_name}={format_limit(MAX_NOISE_SCALE)}; give more ρ or fewer marginals"
        )
    # OpenDP's own privacy map must agree that this is within what we charge.
    per_marginal = noise.privacy_map(cast(noise.NoiseKind, noise_kind), chosen, sensitivity)
    opendp_rho = per_marginal if noise_kind == "gaussian" else per_marginal**2 / 2
    if count * opendp_rho > units_to_rho(units) * (1 + 1e-9):
        raise BudgetOverspent("OpenDP's privacy map exceeds the charge; refusing to measure")
    return MeasurementPlan(checked, noise_kind, chosen, units, sensitivity)


def request_hash(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()


def submit(
    session: Session,
    *,
    tenant_id: str,
    dataset_id: str,
    domain: Domain,
    kind: str,
    params: dict[str, Any],
    rho_units_total: int,
    attribute_sets: Sequence[Sequence[str]],
    max_model_cells: int,
    idempotency_key: str | None,
    body_hash: str,
    description: str,
    check_model: bool = True,
) -> tuple[Job, ledger.ChargeResult]:
    """Check the model cap, then charge and create the job in the caller's one transaction.

    The caller has checked that the tenant may see the dataset (`domain` is its schema's).
    The same idempotency key and body return the first job and charge nothing more.
    `check_model=False` when the caller saw every one of `attribute_sets` already among
    the dataset's (`adds_attribute_sets`): they cannot grow the model, and the check
    reads every measurement and queued job under the write lock.
    """
    job_id = new_id()
    charge = ledger.charge(
        session,
        tenant_id=tenant_id,
        dataset_id=dataset_id,
        rho_units=rho_units_total,
        idempotency_key=idempotency_key,
        request_hash=body_hash,
        job_id=job_id,
        description=description,
    )
    if charge.replayed:
        if charge.job_id is None:  # every charge this path writes names its job
            raise LedgerInvariantViolated("an idempotent replay found a charge without a job")
        return jobs.get(session, charge.job_id), charge
    # Raising here rolls the charge back with the rest of the transaction.
    # The grant's row is locked now. A purge that committed while this request was checked
    # is seen here; one still running waits for this charge before its last look for
    # unfinished jobs (`datasets.purge_records`), so a job is never made for records that
    # are gone. (A delete revokes the grant: the charge above finds none.)
    purged = session.scalar(select(Dataset.records_purged_at).where(Dataset.id == dataset_id))
    if purged is not None:
        raise RecordsPurged()
    if check_model:
        check_model_size(
            session,
            dataset_id,
            domain,
            attribute_sets,
            max_model_cells=max_model_cells,
            tenant_id=tenant_id,
        )
    job = jobs.create(
        session,
        job_id=job_id,
        dataset_id=dataset_id,
        tenant_id=tenant_id,
        kind=kind,
        params=params,
        idempotency_key=idempotency_key,
        request_hash=body_hash,
    )
    return job, charge


# -- the worker's side ----------------------------------------------------------------


def store(
    session: Session,
    *,
    dataset_id: str,
    job_id: str,
    position: int,
    attributes: Sequence[str],
    noise_kind: str,
    scale: float,
    rho_units_used: int,
    values: np.ndarray,
    access_id: int | None,
    details: dict[str, Any] | None = None,
    kind: str = "marginal",
) -> MeasurementRecord:
    """Add one noisy marginal, naming the gate access that produced it; never commits.

    The dataset's row is locked first (FOR NO KEY UPDATE, held to the commit), so one
    dataset's measurement ids are taken and committed in the same order: a fit that sees
    a measurement sees every one of the dataset with a smaller id that will ever commit,
    and a version's high-water mark covers exactly what it fitted. (On PostgreSQL ids
    come from a sequence at insert time; without the lock, a job that took id 5 could
    commit after one that took id 6 and after a fit that saw 6 but not 5, and its job
    would find itself covered by a version without its measurement. SQLite's writers
    are serialised already.)"""
    session.scalars(
        select(Dataset.id).where(Dataset.id == dataset_id).with_for_update(key_share=True)
    ).one()
    # The dataset's next number (its API id), under the same lock: ids and numbers of a
    # dataset go up together, and nothing of other datasets shows in them.
    number = session.scalar(
        select(func.coalesce(func.max(MeasurementRecord.number), 0)).where(
            MeasurementRecord.dataset_id == dataset_id
        )
    )
    record = MeasurementRecord(
        number=int(number or 0) + 1,
        dataset_id=dataset_id,
        job_id=job_id,
        position=position,
        kind=kind,
        attributes=list(attributes),
        noise=noise_kind,
        scale=float(scale),
        rho_units=int(rho_units_used),
        values=pack_column(np.asarray(values, dtype=np.int64)),
        details=details,
        access_id=access_id,
    )
    session.add(record)
    session.flush()
    record_pending_measurement(session, dataset_id, noise_kind)
    return record


def coarse_of(record: MeasurementRecord) -> Coarse | None:
    """A coarse measurement's groups (an AIM round over groups of values), or None: its
    values are then over the attributes' own values. ValueError if they are unreadable."""
    stored = (record.details or {}).get("coarse")
    if stored is None:
        return None
    try:
        return Coarse.from_dict(record.attributes, stored)
    except (KeyError, TypeError) as error:
        raise ValueError("unreadable groups of values") from error


def to_pgm(record: MeasurementRecord) -> Measurement:
    coarse = coarse_of(record)
    return Measurement(
        attributes=tuple(record.attributes),
        values=unpack_column(record.values).astype(float),
        noise=record.noise,
        scale=record.scale,
        query=None if coarse is None else coarse.query,
    )


def high_water(
    session: Session,
    *,
    dataset_id: str,
    job_id: str | None = None,
    up_to: int | None = None,
    active_only: bool = False,
) -> int:
    """The largest measurement id of the dataset (of one job, up to an id, active only)."""
    query = select(func.coalesce(func.max(MeasurementRecord.id), 0)).where(
        MeasurementRecord.dataset_id == dataset_id
    )
    if job_id is not None:
        query = query.where(MeasurementRecord.job_id == job_id)
    if up_to is not None:
        query = query.where(MeasurementRecord.id <= up_to)
    if active_only:
        query = query.where(MeasurementRecord.status == "active")
    return int(session.scalar(query) or 0)


def id_statuses(session: Session, dataset_id: str) -> list[tuple[int, str, str]]:
    """(id, job id, status) of each of the dataset's measurements, in one read."""
    query = select(MeasurementRecord.id, MeasurementRecord.job_id, MeasurementRecord.status)
    rows = session.execute(query.where(MeasurementRecord.dataset_id == dataset_id)).all()
    return [(int(i), str(job), str(status)) for i, job, status in rows]


def list_for_dataset(
    session: Session, dataset_id: str, *, active_only: bool = False, kind: str | None = "marginal"
) -> Sequence[MeasurementRecord]:
    """The dataset's measurements of `kind` (None: all), oldest first; `active_only`: active."""
    query = select(MeasurementRecord).where(MeasurementRecord.dataset_id == dataset_id)
    if kind is not None:
        query = query.where(MeasurementRecord.kind == kind)
    if active_only:
        query = query.where(MeasurementRecord.status == "active")
    return session.scalars(query.order_by(MeasurementRecord.id)).all()


def page_for_dataset(
    session: Session, dataset_id: str, *, limit: int, cursor: str | None = None
) -> Page[MeasurementRecord]:
    """One page of the dataset's measurements, oldest first (by their number in the
    dataset: the cursor, like the ids shown, says nothing of other datasets)."""
    return page(
        session,
        select(MeasurementRecord).where(MeasurementRecord.dataset_id == dataset_id),
        keys=(MeasurementRecord.number,),
        kinds=(int,),
        limit=limit,
        cursor=cursor,
        key_of=lambda record: (record.number,),
    )
