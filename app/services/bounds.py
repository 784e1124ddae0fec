"""Error bounds for the marginals endpoint: AIM §5 Theorems 2 and 4 applied to a model version.

For each model version the API loads once (and caches), `load_context` gathers what
the bounds need — all public releases or post-processing of them:

- the Gaussian measurements the version covers, with their noisy values (Theorem 2
  and its corollary: any marginal in the downward closure of what was measured);
- the Theorem 4 bounds that mechanism jobs left for workload marginals they never
  measured, with the answer of the model version each bound refers to, so that the
  bound moves to this version by the triangle inequality.

`marginal_bound` then gives the 95% upper bound on the L1 error of an answer, and
says which theorem gave it; None when neither applies (no bound is claimed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db import Job
from app.pgm.domain import Domain
from app.pgm.measurement import Measurement
from app.pgm.model import GraphicalModel
from app.privacy.mechanisms import UnmeasuredBound, error_bound

Attrs = tuple[str, ...]
THEOREM_NAMES = {"theorem 2": "AIM theorem 2", "theorem 4": "AIM theorem 4"}


@dataclass(frozen=True)
class BoundContext:
    gaussian: tuple[Measurement, ...] = ()
    # canonical attributes → (the mechanism's bound, its reference model's answer)
    unmeasured: dict[Attrs, tuple[UnmeasuredBound, np.ndarray]] = field(default_factory=dict)


def load_context(
    session: Session,
    dataset_id: str,
    *,
    version: int,
    model: GraphicalModel,
    high_water: int,
    load_model: Any,
) -> BoundContext:
    """What the bounds of one model version need (`load_model(version)` for references)."""
    from app.services.measurements import list_for_dataset, to_pgm

    gaussian = tuple(
        to_pgm(record)
        for record in list_for_dataset(session, dataset_id, active_only=True)
        if record.id <= high_water and record.noise == "gaussian"
    )
    unmeasured: dict[Attrs, tuple[UnmeasuredBound, np.ndarray]] = {}
    mechanism_jobs = session.scalars(
        select(Job)
        .where(
            Job.dataset_id == dataset_id, Job.kind.in_(("aim", "mwem")), Job.status == "succeeded"
        )
        .order_by(Job.finished_at, Job.id)
    ).all()
    references: dict[int, GraphicalModel] = {version: model}
    for job in mechanism_jobs:  # later jobs' bounds replace earlier ones
        result = job.progress or {}
        reference_version = result.get("bounds_model_version")
        if reference_version is None or reference_version > version:
            continue
        if reference_version not in references:
            references[reference_version] = load_model(reference_version)
        reference = references[reference_version]
        for data in result.get("unmeasured_bounds", []):
            bound = UnmeasuredBound.from_dict(data)
            key = model.domain.canonical(bound.attributes)
            unmeasured[key] = (bound, np.asarray(reference.marginal(key), dtype=float).ravel())
    return BoundContext(gaussian=gaussian, unmeasured=unmeasured)


def marginal_bound(
    context: BoundContext, domain: Domain, attrs: Sequence[str], answer: np.ndarray
) -> dict[str, Any] | None:
    """The 95% upper bound on ‖M_r(D) − answer‖₁ for the answer over `attrs` (in that order)."""
    attrs = tuple(attrs)
    key = domain.canonical(attrs)
    found = context.unmeasured.get(key)
    bound = error_bound(
        domain,
        attrs,
        np.asarray(answer, dtype=float).ravel(),
        context.gaussian,
        unmeasured_bounds=None if found is None else {key: found[0]},
        reference_answer=None if found is None else found[1],
    )
    if bound is None:
        return None
    described = {
        "l1": float(bound.bound),
        "confidence": bound.confidence,
        "method": THEOREM_NAMES[bound.theorem],
    }
    if bound.theorem == "theorem 4" and found is not None:
        described["round"] = found[0].round_index
    return described
