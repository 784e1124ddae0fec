"""Refunds: give back exactly the ρ a job has not used on data — one service for every ending.

A job is charged up front. What it has *used* is every access to the records that
passed the gate (`app.services.gate`), which records an access's exact cost BEFORE the
access reads anything — whether or not its output was ever stored or seen:

- a measurement job's one access costs its whole charge (all its marginals are
  drawn together);
- a mechanism job (AIM, MWEM) records one access per round, at the round's exact
  cost 1/(2σ²) + ε²/8 (the rationals of the floats it used): its selection and its
  draw. A run stopped at round k used the exact sum of the rounds that began,
  rounded UP to the ledger's unit.

Measurements stored before accesses were recorded count too: the used ρ is the larger
of what the accesses and what the stored rows account for.

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

from app.db import Job, LedgerEntry, MeasurementRecord, RecordAccess
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


def units_up(exact: Fraction) -> int:
    """Rounded up, in integers: ⌈p·U/q⌉ = −⌊−p·U/q⌋."""
    return -(-exact.numerator * UNITS_PER_RHO // exact.denominator)


def accessed_units(session: Session, job_id: str) -> int:
    """Units of every access to the records the job recorded (exact sum, rounded up)."""
    exact = sum(
        (
            Fraction(text)
            for text in session.scalars(
                select(RecordAccess.exact_rho).where(RecordAccess.job_id == job_id)
            ).all()
        ),
        Fraction(0),
    )
    return units_up(exact)


def used_units(session: Session, job: Job) -> int:
    """Units of the job's charge used on the records: every access the gate recorded, and
    at least what its stored measurements cost (rounded up)."""
    return max(accessed_units(session, job.id), _stored_units(session, job))


def _stored_units(session: Session, job: Job) -> int:
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
    # A round's price from what it stored: σ, ε and its sensitivity k (rows per privacy
    # unit; rounds stored before units existed had k = 1).
    exact: Fraction = sum(
        (
            exact_round_cost(
                record.scale,
                float((record.details or {}).get("epsilon", 0.0)),
                int((record.details or {}).get("sensitivity", 1)),
            )
            for record in records
        ),
        Fraction(0),
    )
    return units_up(exact)


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
            "a job's accesses to the records cost more than was charged for it", job_id=job.id
        )
    if used == 0:
        description = f"{reason}: nothing read the records; the whole charge is refunded"
    else:
        description = (
            f"{reason}: rho={units_to_decimal_str(used)} was spent on accesses to the "
            "records that already ran; the rest is refunded"
        )
    return ledger.refund(
        session, job_id=job.id, rho_units=still_charged - used, description=description
    )
