"""Refunds: give back exactly the ρ a job has not used on data — one service for every ending.

A job is charged up front. What it has *used* is what its released noise cost, and
its released noise is exactly its stored measurement rows (noise is stored before
anything uses it):

- a measurement job draws all of its marginals in one transaction: once any row
  exists the whole charge is used; before that, nothing is;
- a mechanism job (AIM, MWEM) stores one row per round; a round cost 1/(2σ²) + ε²/8
  exactly (the rationals of the floats it used), so a run stopped at round k used
  the sum of its k rounds' exact costs, rounded UP to the ledger's unit.

`refund_unused(session, job_id, reason=...)` appends one refund line (a ledger line of
its own, never an edit) for the difference between what is still charged for the job
and what it used, and returns its units (0 if nothing is left to give back, so calling
it twice is harmless). Noise that was drawn stays charged. A failed or abandoned job
calls it (`jobs.fail`); so will a cancelled one.
"""

from __future__ import annotations

from fractions import Fraction

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.db import Job, LedgerEntry, MeasurementRecord
from app.errors import LedgerInvariantViolated
from app.privacy.mechanisms.budget import exact_round_cost
from app.services import ledger
from app.services.rho import UNITS_PER_RHO, units_to_decimal_str

MECHANISM_KINDS = ("aim", "mwem")


def _job_units(session: Session, job_id: str) -> tuple[int, int]:
    """(charged, still charged): the job's charges, and those less its refunds so far."""
    amounts = session.scalars(
        select(LedgerEntry.rho_units).where(LedgerEntry.job_id == job_id)
    ).all()
    return sum(a for a in amounts if a > 0), sum(amounts)


def used_units(session: Session, job: Job) -> int:
    """Units of the job's charge spent on released noise (rounded up)."""
    records = session.scalars(
        select(MeasurementRecord)
        .where(MeasurementRecord.job_id == job.id)
        .order_by(MeasurementRecord.position)
    ).all()
    if not records:
        return 0
    if job.kind not in MECHANISM_KINDS:
        # Every marginal of a measurement job is drawn and stored together.
        return _job_units(session, job.id)[0]
    exact: Fraction = sum(
        (
            exact_round_cost(record.scale, float((record.details or {}).get("epsilon", 0.0)))
            for record in records
        ),
        Fraction(0),
    )
    # Rounded up, in integers: ⌈p·U/q⌉ = −⌊−p·U/q⌋.
    return -(-exact.numerator * UNITS_PER_RHO // exact.denominator)


def refund_unused(session: Session, job: Job, *, reason: str) -> int:
    """Refund what the job has not used on data, as a ledger line of its own; never commits.

    `reason` starts the line's description ("job failed", "job cancelled", …).
    Returns the units refunded.
    """
    charged, still_charged = _job_units(session, job.id)
    used = used_units(session, job)
    if still_charged <= used:
        return 0
    if used > charged:
        # A mechanism's rounds never cost more than its charge (checked as they run).
        raise LedgerInvariantViolated(
            "a job's released noise cost more than was charged for it", job_id=job.id
        )
    if used == 0:
        description = f"{reason}: no noise was drawn; the whole charge is refunded"
    else:
        description = (
            f"{reason}: rho={units_to_decimal_str(used)} was spent on noise already "
            "released; the rest is refunded"
        )
    return ledger.refund(
        session, job_id=job.id, rho_units=still_charged - used, description=description
    )
