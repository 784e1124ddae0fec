"""Marginals: the model's counts over some attributes, their cell labels, standard
error (AIM §5, Theorem 1's estimator) and error bound (AIM Theorems 2 and 4)."""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from cachetools import LRUCache

from app.limits import COUNT_DECIMALS
from app.pgm.elimination import InferenceTooLarge
from app.schema import DatasetSchema
from app.services.answers.common import (
    MAX_INFERENCE_CELLS,
    TooManyCells,
    WorkSize,
    attribute_of,
    cell_labels,
    dumps,
    invalid,
    labels_json,
    numbers_json,
    too_large,
    untouched_note,
)
from app.services.bounds import marginal_bound
from app.services.models import LoadedModel


def parse_attribute_list(
    schema: DatasetSchema, text: str | Sequence[str], *, parameter: str = "attrs"
) -> tuple[str, ...]:
    """`age,sex` (or a list of names) → validated names: known, distinct, non-empty."""
    names = [n.strip() for n in text.split(",")] if isinstance(text, str) else list(text)
    if not names or any(not n for n in names):
        raise invalid(parameter, "give one or more attribute names separated by commas")
    for name in names:
        attribute_of(schema, name, parameter)
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise invalid(parameter, f"attribute(s) named twice: {', '.join(repeated)}")
    return tuple(names)


@dataclass(frozen=True)
class StandardError:
    """Per-cell standard error of the combined measurements covering a marginal."""

    value: float | None  # None: no measurement covers the attributes
    covered_by: int


def standard_error(loaded: LoadedModel, attrs: Sequence[str]) -> StandardError:
    """AIM §5, Theorem 1: the inverse-variance-weighted combination of the projections.

    A measurement over s ⊇ r, projected onto r, sums n_s/n_r noisy cells into each
    cell of r, so its per-cell variance is (n_s/n_r)·σ² (Gaussian) or (n_s/n_r)·2b²
    (Laplace). The unbiased combination weighted by 1/v_i has variance 1/Σ 1/v_i.
    """
    wanted = set(attrs)
    domain = loaded.model.domain
    precision = 0.0
    covering = 0
    for measurement in loaded.measurements:
        if not wanted <= set(measurement.attributes):
            continue
        summed_cells = domain.cells([a for a in measurement.attributes if a not in wanted])
        precision += 1.0 / (summed_cells * measurement.noise_variance)
        covering += 1
    if covering == 0:
        return StandardError(value=None, covered_by=0)
    return StandardError(value=math.sqrt(1.0 / precision), covered_by=covering)


def error_bound(
    loaded: LoadedModel, attrs: Sequence[str], counts: np.ndarray
) -> dict[str, Any] | None:
    """A 95% upper bound on the L1 error of these counts, and which AIM theorem gave it.

    Theorem 2 (with its corollary for the model's answer) where Gaussian measurements
    cover the attributes; Theorem 4 for a workload marginal a mechanism never measured;
    None otherwise — no bound is claimed. See `app.services.bounds`.
    """
    return marginal_bound(loaded.bounds, loaded.model.domain, attrs, counts)


def marginal_size(loaded: LoadedModel, attrs: Sequence[str], *, max_cells: int) -> WorkSize:
    """Check a marginal can be answered (TooManyCells, QueryTooLarge) and size its work."""
    cells = loaded.model.domain.cells(attrs)
    if cells > max_cells:
        raise TooManyCells(
            f"attrs: the marginal over {', '.join(attrs)} has {cells} cells, more than "
            f"the limit of {max_cells}; ask for fewer or smaller attributes",
            parameter="attrs",
            cells=cells,
            max_cells=max_cells,
        )
    try:
        plan = loaded.model.plan(attrs, max_cells=MAX_INFERENCE_CELLS)
    except InferenceTooLarge as error:
        raise too_large(error, "attrs") from None
    return WorkSize(cells, plan.max_intermediate_cells, plan.work)


def _marginal_counts(loaded: LoadedModel, attrs: Sequence[str], *, max_cells: int) -> np.ndarray:
    marginal_size(loaded, attrs, max_cells=max_cells)
    try:
        counts = loaded.model.marginal(attrs, max_cells=MAX_INFERENCE_CELLS)
    except InferenceTooLarge as error:
        raise too_large(error, "attrs") from None
    # N̂·p is non-negative: clamp the last-bit rounding of the elimination. Thousandths
    # of a record are far below any measurement's noise; fewer digits also halve the
    # response and its encoding time.
    rounded: np.ndarray = np.round(np.maximum(counts, 0.0).ravel(), COUNT_DECIMALS)
    return rounded


def _marginal_details(
    loaded: LoadedModel, attrs: Sequence[str], counts: np.ndarray
) -> dict[str, Any]:
    se = standard_error(loaded, attrs)
    untouched, note = untouched_note(loaded, attrs)
    return {
        "model_version": loaded.version,
        "measured": se.covered_by > 0,
        "covered_by": se.covered_by,
        "standard_error": se.value,
        "error_bound": error_bound(loaded, attrs, counts),
        "unmeasured_attributes": untouched,
        "note": note,
    }


def marginal_answer(loaded: LoadedModel, attrs: Sequence[str], *, max_cells: int) -> dict[str, Any]:
    """The model's counts over `attrs` (axes in the order given) with cell labels:
    `{"attributes", "values", "counts", "model_version", "measured", "covered_by",
    "standard_error", "error_bound", "unmeasured_attributes", "note"}`."""
    counts = _marginal_counts(loaded, attrs, max_cells=max_cells)
    label_lists = [loaded.schema.attribute(a).labels() for a in attrs]
    return {
        "attributes": list(attrs),
        "values": cell_labels(label_lists),
        "counts": counts.tolist(),
        **_marginal_details(loaded, attrs, counts),
    }


# Encoded cell labels of recent marginals, by dataset: they depend only on the
# schema, which is fixed when the dataset is uploaded, and encoding them is most of
# the cost of a marginal's response. The cache is bounded by the bytes it holds.
_LABELS_JSON_BYTES = 32 * 1024 * 1024  # all entries together
_LABELS_JSON_ENTRY_BYTES = 1024 * 1024  # larger label lists are encoded every time
_labels_json_cache: LRUCache[tuple[str, tuple[str, ...]], bytes] = LRUCache(
    maxsize=_LABELS_JSON_BYTES, getsizeof=len
)
_labels_json_lock = threading.Lock()


def _labels_json(loaded: LoadedModel, attrs: tuple[str, ...]) -> bytes:
    key = (loaded.dataset_id, attrs)
    with _labels_json_lock:
        encoded = _labels_json_cache.get(key)
    if encoded is not None:
        return encoded
    label_lists = [loaded.schema.attribute(a).labels() for a in attrs]
    encoded = labels_json(label_lists)
    if len(encoded) <= _LABELS_JSON_ENTRY_BYTES:
        with _labels_json_lock:
            _labels_json_cache[key] = encoded
    return encoded


def marginal_json(loaded: LoadedModel, attrs: Sequence[str], *, max_cells: int) -> bytes:
    """`marginal_answer` as JSON bytes, with the cell labels encoded once per marginal."""
    names = tuple(attrs)
    counts = _marginal_counts(loaded, names, max_cells=max_cells)
    return b"".join(
        (
            b'{"attributes":',
            dumps(list(names)),
            b',"values":',
            _labels_json(loaded, names),
            b',"counts":',
            numbers_json(counts),
            b",",
            dumps(_marginal_details(loaded, names, counts))[1:],
        )
    )
