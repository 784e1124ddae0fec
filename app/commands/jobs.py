"""`privq jobs list|show|cancel` and `privq ledger`: the queue and every ρ movement."""

from __future__ import annotations

import argparse
from functools import partial
from typing import Any

from sqlalchemy.orm import Session

from app.api.routers.measurements import JobOut
from app.api.schemas import LedgerEntryOut
from app.commands.output import (
    Listing,
    Record,
    action,
    json_flag,
    page_flags,
    resolve_dataset,
    run,
)
from app.services import jobs as job_service
from app.services import ledger

JOB_COLUMNS = ("id", "kind", "status", "dataset_id", "tenant_id", "created_at")
LEDGER_COLUMNS = ("id", "kind", "rho_exact", "dataset_id", "tenant_id", "job_id", "created_at")
JOB_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")


def list_jobs(args: argparse.Namespace, session: Session) -> Listing:
    found = job_service.list_jobs(
        session,
        tenant_id=args.tenant,
        dataset_id=resolve_dataset(session, args.dataset, deleted_ids=True),
        status=args.status,
        kind=args.kind,
        limit=args.limit,
        cursor=args.cursor,
    )
    return Listing([JobOut.of(job) for job in found.items], JOB_COLUMNS, found.next_cursor)


def show_job(args: argparse.Namespace, session: Session) -> Record:
    return Record(JobOut.of(job_service.get(session, args.job_id)))


def cancel_job(args: argparse.Namespace, session: Session) -> Record:
    job = job_service.get(session, args.job_id, for_update=True)
    job_service.cancel(session, job)
    return Record(JobOut.of(job))


def read_ledger(args: argparse.Namespace, session: Session) -> Listing:
    found = ledger.entries(
        session,
        dataset_id=resolve_dataset(session, args.dataset, deleted_ids=True),
        tenant_id=args.tenant,
        limit=args.limit,
        cursor=args.cursor,
    )
    return Listing(
        [LedgerEntryOut.of(entry) for entry in found.items], LEDGER_COLUMNS, found.next_cursor
    )


def register(commands: argparse._SubParsersAction[Any]) -> None:
    jobs = commands.add_parser("jobs", help="the job queue: list, inspect")
    actions = jobs.add_subparsers(dest="jobs_command", required=True)
    listing = action(actions, "list", list_jobs, "jobs, newest first", paged=True)
    listing.add_argument(
        "--dataset", default=None, help="only this dataset's jobs (its id or unique name)"
    )
    listing.add_argument("--tenant", default=None, help="only this tenant's jobs")
    listing.add_argument("--status", choices=JOB_STATUSES, default=None)
    listing.add_argument("--kind", default=None, help="measure, aim, mwem, …")
    action(actions, "show", show_job, "a job's status, progress and error", "job_id")
    action(
        actions,
        "cancel",
        cancel_job,
        "cancel a job (queued: refunded whole; running: stops, refunds the rest)",
        "job_id",
    )
    ledger_parser = commands.add_parser("ledger", help="every charge and refund, oldest first")
    ledger_parser.add_argument(
        "--dataset", default=None, help="only this dataset's lines (its id or unique name)"
    )
    ledger_parser.add_argument("--tenant", default=None, help="only this tenant's lines")
    page_flags(ledger_parser)
    json_flag(ledger_parser)
    ledger_parser.set_defaults(handler=partial(run, read_ledger))
