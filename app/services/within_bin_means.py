"""Within-bin means: a measurement of where values lie inside their bins, and its use.

A binned attribute (numeric, or integer with bins of several integers) keeps only
each row's bin, so an answer that needs a value (SUM, AVG, a moment) puts every row
at its bin's midpoint — badly biased when values crowd one end of wide bins (delays
with a long right tail). A tenant may buy, for such an attribute, each bin's noisy
*sum of fractions*: every row's place within its bin, `(x − low) / (high − low)`
∈ [0, 1], on the public grid of 1/2¹⁶ steps (`app.schema.within_bins`), summed per
bin, with OpenDP's exact discrete noise added to the integer sums.

Sensitivity. A privacy unit holds at most k rows, and each row adds at most 1 (GRID
grid steps) to the one bin it lies in. Adding or removing a unit moves the vector
of sums by at most k in L1 and in L2 (Σ|Δ_b| ≤ k, and √Σ Δ_b² ≤ Σ|Δ_b|), whatever
the bins' widths: the same as a count marginal's. So a release of m attributes at
noise σ (in fraction units) costs m·k²/(2σ²) ρ, exactly as m one-way count
marginals; on the grid the noise is σ·GRID at sensitivity k·GRID (GRID a power of
two: σ·GRID is the exact float), which OpenDP's privacy map checks.

The mean an answer uses for a bin with (model) count n_b and combined noisy fraction
sum S_b is `low + (high − low) · clip(S_b / n_b, 0, 1)`: the count is the model's own
(free, and the weight every answer already gives the bin), so the estimated sum over
the bin, n_b · mean_b, is low·n_b + width·S_b, whose noise does not depend on n_b.
Where n_b < `MIN_COUNT` the midpoint stays. Several releases of an attribute are
combined by inverse-variance weights.

This module prices and checks requests (no database writes) and reads the releases
(`within_bin_means` for one attribute: per-code means, or None when never measured).
The worker's side is `app.services.measuring_within_bins`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db import Dataset, DatasetColumn, MeasurementRecord
from app.errors import Conflict, InvalidRequest
from app.ingest import fraction_column
from app.ingest.packing import unpack_column
from app.limits import MAX_NOISE_SCALE
from app.privacy import noise
from app.privacy.accounting import BudgetOverspent
from app.schema import DatasetSchema
from app.schema.within_bins import GRID, code_intervals, is_binned
from app.services.rho import noise_for_request, units_to_rho

KIND = "within_bin_means"
JOB_KIND = "within_bin_means"
# Below this model count a bin keeps its midpoint: a mean of less than one row is noise.
MIN_COUNT = 1.0
MAX_ATTRIBUTES_PER_REQUEST = 100


class WithinBinMeansUnavailable(Conflict, code="within_bin_means_unavailable"):
    """This dataset's records were stored without their places within the bins (uploaded
    before within-bin means existed, or from a stream that could not be read twice):
    upload the table again to measure within-bin means; nothing was charged."""


@dataclass(frozen=True)
class WithinBinPlan:
    """A validated request: which attributes, the noise (σ or b in fraction units, the
    same for every attribute), the exact total charge and the k it was priced at."""

    attributes: tuple[str, ...]
    noise: str
    scale: float
    rho_units: int
    sensitivity: int = 1

    @property
    def grid_scale(self) -> float:
        """The noise on the stored integer sums (grid steps): exact, GRID is 2¹⁶."""
        return self.scale * GRID

    def params(self) -> dict[str, Any]:
        return {
            "within_bin_means": list(self.attributes),
            "noise": self.noise,
            "scale": self.scale,
            "rho_units": self.rho_units,
        }


def check_attributes(schema: DatasetSchema, names: Sequence[str]) -> tuple[str, ...]:
    """The requested attributes, each a binned attribute of the schema, once (422 if not)."""
    if not names:
        raise InvalidRequest("within_bin_means names no attribute", field="within_bin_means")
    if len(names) > MAX_ATTRIBUTES_PER_REQUEST:
        raise InvalidRequest(
            f"within_bin_means names {len(names)} attributes; at most "
            f"{MAX_ATTRIBUTES_PER_REQUEST} a request",
            field="within_bin_means",
        )
    if len(set(names)) != len(names):
        raise InvalidRequest("within_bin_means names an attribute twice", field="within_bin_means")
    known = {a.name: a for a in schema.attributes}
    unknown = sorted(n for n in names if n not in known)
    if unknown:
        raise InvalidRequest(f"the dataset has no attribute(s) {unknown}", field="within_bin_means")
    unbinned = [n for n in names if not is_binned(known[n])]
    if unbinned:
        kinds = ", ".join(f"{n!r} is {known[n].kind} with one value per code" for n in unbinned)
        raise InvalidRequest(
            f"within-bin means need a numeric attribute (or an integer one with bins): {kinds}",
            field="within_bin_means",
        )
    return tuple(names)


def plan(
    schema: DatasetSchema,
    names: Sequence[str],
    *,
    noise_kind: str,
    rho_units_total: int | None,
    scale: float | None,
    sensitivity: int = 1,
) -> WithinBinPlan:
    """Validate a request and price it exactly (no database); like a marginal request's
    plan (`app.services.measurements.plan`) with one "marginal" per attribute."""
    if noise_kind not in ("gaussian", "laplace"):
        raise InvalidRequest(f"noise must be gaussian or laplace, not {noise_kind!r}")
    attributes = check_attributes(schema, names)
    count = len(attributes)
    chosen, units = noise_for_request(
        noise_kind,
        rho_units_total,
        scale,
        count,
        sensitivity,
        max_scale=MAX_NOISE_SCALE / GRID,
        items="attribute(s)",
    )
    if chosen * GRID > MAX_NOISE_SCALE:
        raise InvalidRequest(
            f"this ρ spread over {count} attribute(s) needs too much noise; give more ρ"
        )
    checked = WithinBinPlan(attributes, noise_kind, chosen, units, sensitivity)
    check_opendp_price(checked)
    return checked


def check_opendp_price(checked: WithinBinPlan) -> None:
    """BudgetOverspent unless OpenDP's own privacy map of the grid noise at sensitivity
    k·GRID agrees that the release costs at most its charge."""
    kind = cast(noise.NoiseKind, checked.noise)
    per_attribute = noise.privacy_map(kind, checked.grid_scale, checked.sensitivity * GRID)
    opendp_rho = per_attribute if checked.noise == "gaussian" else per_attribute**2 / 2
    if len(checked.attributes) * opendp_rho > units_to_rho(checked.rho_units) * (1 + 1e-9):
        raise BudgetOverspent("OpenDP's privacy map exceeds the charge; refusing to measure")


def require_fractions(session: Session, dataset: Dataset, names: Sequence[str]) -> None:
    """WithinBinMeansUnavailable if an uploaded dataset has no stored fractions for one of
    `names` (a registered source's are computed from its files at every read). Reads
    only the stored columns' names, never their data."""
    if dataset.source_uri is not None:
        return
    wanted = [fraction_column(name) for name in names]
    stored = set(
        session.scalars(
            select(DatasetColumn.name).where(
                DatasetColumn.dataset_id == dataset.id, DatasetColumn.name.in_(wanted)
            )
        ).all()
    )
    if set(wanted) - stored:
        raise WithinBinMeansUnavailable()


# -- reading the releases --------------------------------------------------------------


@dataclass(frozen=True)
class FractionSums:
    """One attribute's combined releases: per code, the noisy sum of fractions (in
    fraction units, not grid steps) and its noise variance; how much ρ they cost."""

    sums: np.ndarray
    variance: float
    rho: float
    releases: int


def noise_variance(kind: str, scale: float) -> float:
    """The variance of the release's noise (in its own units)."""
    if kind == "gaussian":
        return scale * scale  # the discrete Gaussian's is below σ², close to it for σ ≥ 1
    # discrete Laplace with P(z) ∝ exp(−|z|/b): 2·e^{−1/b} / (1 − e^{−1/b})²
    t = math.exp(-1.0 / scale)
    return 2.0 * t / (1.0 - t) ** 2 if t > 0 else 1e-300


def released_fraction_sums(
    session: Session, dataset_id: str, *, up_to: int | None = None
) -> dict[str, FractionSums]:
    """Per attribute, its active within-bin releases (with ids up to `up_to`, if given:
    those a model version covers), combined by inverse-variance weights."""
    query = select(MeasurementRecord).where(
        MeasurementRecord.dataset_id == dataset_id,
        MeasurementRecord.kind == KIND,
        MeasurementRecord.status == "active",
    )
    if up_to is not None:
        query = query.where(MeasurementRecord.id <= up_to)
    by_attribute: dict[str, list[MeasurementRecord]] = {}
    for record in session.scalars(query.order_by(MeasurementRecord.id)).all():
        by_attribute.setdefault(record.attributes[0], []).append(record)
    return {name: _combined(records) for name, records in by_attribute.items()}


def _combined(records: Sequence[MeasurementRecord]) -> FractionSums:
    weighted: np.ndarray | None = None
    total_weight = 0.0
    rho = 0.0
    for record in records:
        grid = float((record.details or {}).get("grid", GRID))
        values = unpack_column(record.values).astype(np.float64) / grid
        weight = (grid * grid) / noise_variance(record.noise, record.scale)
        weighted = values * weight if weighted is None else weighted + values * weight
        total_weight += weight
        rho += units_to_rho(record.rho_units)
    if weighted is None:
        raise ValueError("no release to combine")
    return FractionSums(weighted / total_weight, 1.0 / total_weight, rho, len(records))


def means_from(
    lows: np.ndarray, highs: np.ndarray, fraction_sums: np.ndarray, counts: np.ndarray
) -> np.ndarray:
    """Per value code: `low + (high − low) · clip(S / n, 0, 1)`, the midpoint where the
    count n is below `MIN_COUNT`. Every entry is finite."""
    counts = np.asarray(counts, dtype=np.float64)
    size = lows.size
    sums = np.asarray(fraction_sums, dtype=np.float64)[:size]
    counts = counts[:size]
    enough = counts >= MIN_COUNT
    fraction = np.full(size, 0.5)
    fraction[enough] = np.clip(sums[enough] / counts[enough], 0.0, 1.0)
    means: np.ndarray = lows + (highs - lows) * fraction
    return means


def within_bin_means(
    session: Session, dataset_id: str, schema: DatasetSchema, attribute: str, counts: np.ndarray
) -> np.ndarray | None:
    """Per code of `attribute` (its `size`, NaN for the missing code): the measured
    within-bin means given each code's count `counts` (the model's), or None when the
    attribute is not binned or its within-bin means were never measured."""
    found = schema.attribute(attribute)
    if not is_binned(found):
        return None
    released = released_fraction_sums(session, dataset_id).get(attribute)
    if released is None:
        return None
    lows, highs = code_intervals(found)
    out = np.full(found.size, np.nan)
    out[: found.value_size] = means_from(lows, highs, released.sums, counts)
    return out
