"""Workload-adaptive mechanisms: AIM and MWEM+PGM as resumable select/measure loops.

- `common` — workloads and their candidates, round records, options, results, the ρ
  ledger and the pieces both loops share (size filter, scoring, replay).
- `bounds` — AIM §5 error bounds: Theorem 2 (measured marginals) and Theorem 4
  (workload marginals never measured).
- `aim` — AIM (McKenna et al., VLDB 2022).
- `mwem` — MWEM+PGM (Algorithm 1 of the same paper).

The mechanisms never see rows: they get a `true_marginal(attrs)` function from the
worker. Noise comes from `app.privacy.noise`, selection from `app.privacy.selection`.
"""

from app.privacy.mechanisms.aim import run_aim
from app.privacy.mechanisms.bounds import (
    ErrorBound,
    UnmeasuredBound,
    error_bound,
    theorem2_bound,
    theorem4_bound,
)
from app.privacy.mechanisms.common import (
    MechanismOptions,
    MechanismResult,
    Progress,
    Round,
    RoundsMismatch,
)
from app.privacy.mechanisms.mwem import run_mwem

__all__ = [
    "ErrorBound",
    "MechanismOptions",
    "MechanismResult",
    "Progress",
    "Round",
    "RoundsMismatch",
    "UnmeasuredBound",
    "error_bound",
    "run_aim",
    "run_mwem",
    "theorem2_bound",
    "theorem4_bound",
]
