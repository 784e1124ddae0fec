"""Workload-adaptive mechanisms: AIM and MWEM+PGM as resumable select/measure loops.

- `engine` — the select/measure run both loops drive (`MechanismRun`), its options
  and result: the protocol with the service.
- `fitting` — the run's model fits (solver and iterations from public sizes) and its
  progress reports, every iteration of every fit included.
- `rounds` — the persisted record of each round, and the checks of stored rounds.
- `budget` — round costs (float and exact), the split of a round's ρ, the ρ ledger.
- `workload` — workloads, their candidates and the model-size filter.
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
from app.privacy.mechanisms.engine import MechanismResult, RoundAccess
from app.privacy.mechanisms.fitting import Progress
from app.privacy.mechanisms.mwem import run_mwem
from app.privacy.mechanisms.options import MechanismOptions
from app.privacy.mechanisms.rounds import Round, RoundsMismatch

__all__ = [
    "ErrorBound",
    "MechanismOptions",
    "MechanismResult",
    "Progress",
    "Round",
    "RoundAccess",
    "RoundsMismatch",
    "UnmeasuredBound",
    "error_bound",
    "run_aim",
    "run_mwem",
    "theorem2_bound",
    "theorem4_bound",
]
