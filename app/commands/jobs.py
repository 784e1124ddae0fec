"""`privq jobs list|show|cancel` and `privq ledger`: the queue and every ρ movement.

`jobs` reads the database as the admin, or, when a service is named (`--url`, PRIVQ_URL
or a profile), asks it over HTTP as the tenant whose key is given: its own jobs only."""

from __future__ import annotations

import argparse
import sys
from functools import partial
from typing import TYPE_CHECKING, Any

from app.commands.output import (
    Listing,
    Record,
    action,
    json_flag,
    page_flags,
    render_record,
    render_table,
    resolve_dataset,
    run,
)
from app.commands.service import Service, call, next_cursor, over_http, print_json, segment
from app.commands.service import resolve_dataset as resolve_service_dataset

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

# The service, the API's schemas and the database are imported inside each command, when
# it runs: `privq --help` and the parser must not pay for them (app/cli.py).

JOB_COLUMNS = ("id", "kind", "status", "dataset_id", "tenant_id", "created_at")
LEDGER_COLUMNS = ("id", "kind", "rho_exact", "dataset_id", "tenant_id", "job_id", "created_at")
JOB_STATUSES = ("queued", "running", "succeeded", "failed", "cancelled")


def list_jobs(args: argparse.Namespace, session: Session) -> Listing:
    from app.api.routers.measurements import JobOut
    from app.services import jobs as job_service

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
    from app.api.routers.measurements import JobOut
    from app.services import jobs as job_service

    return Record(JobOut.of(job_service.get(session, args.job_id)))


def cancel_job(args: argparse.Namespace, session: Session) -> Record:
    from app.api.routers.measurements import JobOut
    from app.services import jobs as job_service

    job = job_service.get(session, args.job_id, for_update=True)
    job_service.cancel(session, job)
    return Record(JobOut.of(job))


def read_ledger(args: argparse.Namespace, session: Session) -> Listing:
    from app.api.schemas import LedgerEntryOut
    from app.services import ledger

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


# ---- over HTTP, as a tenant (when a service is named: app.commands.service) -------------

TENANT_JOB_COLUMNS = ("id", "kind", "status", "dataset_id", "created_at")


def list_jobs_over_http(args: argparse.Namespace, service: Service) -> int:
    dataset = resolve_service_dataset(service, args.dataset) if args.dataset else None
    params = {
        "dataset_id": dataset,
        "status": args.status,
        "kind": args.kind,
        "limit": args.limit,
        "cursor": args.cursor,
    }
    response = call(service, "GET", "/v1/jobs", params=params)
    jobs = response.json()
    print_json(jobs) if args.json else print(render_table(jobs, TENANT_JOB_COLUMNS))
    cursor = next_cursor(response)
    if cursor is not None:
        print(f"privq: more results: add --cursor {cursor}", file=sys.stderr)
    return 0


def show_job_over_http(args: argparse.Namespace, service: Service) -> int:
    job = call(service, "GET", f"/v1/jobs/{segment(args.job_id)}").json()
    print_json(job) if args.json else print(render_record(job))
    return 0


def cancel_job_over_http(args: argparse.Namespace, service: Service) -> int:
    job = call(service, "POST", f"/v1/jobs/{segment(args.job_id)}/cancel").json()
    print_json(job) if args.json else print(render_record(job))
    return 0


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
    over_http(listing, list_jobs_over_http)
    showing = action(actions, "show", show_job, "a job's status, progress and error", "job_id")
    over_http(showing, show_job_over_http)
    cancelling = action(
        actions,
        "cancel",
        cancel_job,
        "cancel a job (queued: refunded whole; running: stops, refunds the rest)",
        "job_id",
    )
    over_http(cancelling, cancel_job_over_http)
    ledger_parser = commands.add_parser("ledger", help="every charge and refund, oldest first")
    ledger_parser.add_argument(
        "--dataset", default=None, help="only this dataset's lines (its id or unique name)"
    )
    ledger_parser.add_argument("--tenant", default=None, help="only this tenant's lines")
    page_flags(ledger_parser)
    json_flag(ledger_parser)
    ledger_parser.set_defaults(handler=partial(run, read_ledger))
