"""`privq datasets list|show|upload|register|set-estimator|purge-records|delete`: the
curator's tables."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.commands import analyst
from app.commands.output import Done, Listing, Record, action
from app.commands.service import over_http

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

# The service, the API's schemas and the database are imported inside each command, when
# it runs: `privq --help` and the parser must not pay for them (app/cli.py).

DATASET_COLUMNS = ("id", "name", "status", "rows", "rho_total", "created_at")
# app.pgm.estimation.ESTIMATOR_NAMES, written out so that the parser imports no scipy
# (tests/cli/test_cli_startup.py checks that they agree).
ESTIMATOR_CHOICES = ("mle", "cgm-em", "stein")


def list_datasets(args: argparse.Namespace, session: Session) -> Listing:
    from app.api.schemas import DatasetOut
    from app.services import datasets as dataset_service

    found = dataset_service.list_datasets(session, limit=args.limit, cursor=args.cursor)
    return Listing(
        [DatasetOut.of(d, for_admin=True) for d in found.items], DATASET_COLUMNS, found.next_cursor
    )


def show_dataset(args: argparse.Namespace, session: Session) -> Record:
    from app.api.schemas import DatasetOut
    from app.services import datasets as dataset_service

    dataset = dataset_service.get_dataset(session, args.dataset_id)
    return Record(DatasetOut.of(dataset, for_admin=True))


def upload_dataset(args: argparse.Namespace, session: Session) -> Record:
    from app.api.schemas import DatasetOut
    from app.config import get_settings
    from app.services import datasets as dataset_service
    from app.services.rho import rho_units

    schema = dataset_service.parse_dataset_schema(Path(args.schema).read_bytes())
    with Path(args.csv).open("rb") as stream:
        dataset = dataset_service.create_dataset(
            session,
            name=args.name,
            schema=schema,
            stream=stream,
            rho_total_units=None
            if args.rho_total is None
            else rho_units(args.rho_total, field="rho_total", rounding="down"),
            max_bytes=get_settings().max_upload_bytes,
            unit=dataset_service.parse_privacy_unit_field(args.privacy_unit, schema),
        )
    return Record(DatasetOut.of(dataset, for_admin=True), hidden=("attributes",))


def register_dataset(args: argparse.Namespace, session: Session) -> Record:
    """As POST /v1/datasets with a JSON body: the dataset (registering) and its job, which
    a worker runs (it scans the source against the schema; no row is copied)."""
    from app.api.schemas import DatasetOut
    from app.config import get_settings
    from app.services import datasets as dataset_service
    from app.services import sources as source_service
    from app.services.rho import rho_units

    schema = dataset_service.parse_dataset_schema(Path(args.schema).read_bytes())
    dataset, job = source_service.register(
        session,
        name=args.name,
        schema=schema,
        source_format="parquet",
        uri=args.uri,
        roots=get_settings().source_root_list,
        rho_total_units=None
        if args.rho_total is None
        else rho_units(args.rho_total, field="rho_total", rounding="down"),
        unit=dataset_service.parse_privacy_unit_field(args.privacy_unit, schema),
    )
    note = (
        f"registration job {job.id} queued: a worker scans the source, then the dataset is "
        f"ready or rejected (privq jobs show {job.id}; privq datasets show {dataset.id})"
    )
    return Record(DatasetOut.of(dataset, for_admin=True), note=note, hidden=("attributes",))


def set_estimator(args: argparse.Namespace, session: Session) -> Record:
    """As PATCH /v1/datasets/{id} {"estimator"}: a changed estimator over measured data
    queues a refit job (same measurements, no noise, no budget)."""
    from app.api.schemas import DatasetOut
    from app.services import refits

    change = refits.set_estimator(session, args.dataset_id, args.estimator)
    out = DatasetOut.of(change.dataset, for_admin=True)
    out.refit_job_id = change.job.id if change.job is not None else None
    note = (
        f"refit job {out.refit_job_id} queued: the next model version, no budget spent"
        if out.refit_job_id
        else "no refit: the estimator did not change or nothing is measured yet"
    )
    return Record(out, note=note, hidden=("attributes",))


def purge_records(args: argparse.Namespace, session: Session) -> Done:
    from app.services import datasets as dataset_service
    from app.services import scrub

    dataset_service.purge_records(session, args.dataset_id)
    return Done(
        f"dataset {args.dataset_id}: raw records destroyed; free answers keep working "
        "from the model, measuring is refused",
        after_commit=scrub.scrub_storage,
    )


def delete_dataset(args: argparse.Namespace, session: Session) -> Done:
    from app.services import datasets as dataset_service
    from app.services import scrub

    dataset_service.delete_dataset(session, args.dataset_id)
    return Done(
        f"dataset {args.dataset_id} deleted: records, measurements and models gone; "
        "the ledger keeps its lines",
        after_commit=scrub.scrub_storage,
    )


def register(commands: argparse._SubParsersAction[Any]) -> None:
    datasets = commands.add_parser("datasets", help="list, inspect and upload datasets")
    actions = datasets.add_subparsers(dest="datasets_command", required=True)
    listing = action(actions, "list", list_datasets, "every dataset, oldest first", paged=True)
    showing = action(
        actions, "show", show_dataset, "one dataset: schema, rows, rho_total", "dataset_id"
    )
    # With a service named (--url, PRIVQ_URL, a profile): the tenant's datasets over HTTP.
    over_http(listing, analyst.list_datasets)
    over_http(showing, analyst.show_dataset)
    upload = action(
        actions,
        "upload",
        upload_dataset,
        "upload a CSV or Parquet file under a schema (JSON file)",
        ("csv", "the CSV (with a header row) or Parquet file"),
    )
    upload.add_argument("--schema", required=True, help="the schema's JSON file")
    upload.add_argument("--name", required=True)
    upload.add_argument("--rho-total", default=None, help="cap on all grants together")
    upload.add_argument(
        "--privacy-unit",
        default=None,
        metavar="JSON",
        help='\'{"column": "person_id", "max_rows": k}\': rows sharing an id are one unit, '
        "each keeps at most k of them (at random); the id column is never stored",
    )
    registration = action(
        actions,
        "register",
        register_dataset,
        "register a Parquet file or folder by reference (no row is copied)",
        ("name", "the dataset's name"),
    )
    registration.add_argument("--schema", required=True, help="the schema's JSON file")
    registration.add_argument(
        "--uri",
        required=True,
        help="file:///… or s3://bucket/prefix/, within PRIVQ_SOURCE_ROOTS",
    )
    registration.add_argument("--rho-total", default=None, help="cap on all grants together")
    registration.add_argument(
        "--privacy-unit",
        default=None,
        metavar="JSON",
        help='\'{"column": "person_id", "max_rows": k}\': rows sharing an id are one unit; '
        "each access counts at most k of them (the same rows every time)",
    )
    estimator = action(
        actions,
        "set-estimator",
        set_estimator,
        "choose how the model is fitted; refits from the same measurements, free",
        "dataset_id",
    )
    estimator.add_argument(
        "estimator",
        choices=ESTIMATOR_CHOICES,
        help="mle (default), cgm-em (Laplace EM) or stein (one-way marginals shrunk)",
    )
    action(
        actions,
        "purge-records",
        purge_records,
        "destroy the raw records; the model keeps answering",
        "dataset_id",
    )
    action(
        actions, "delete", delete_dataset, "delete records, measurements and models", "dataset_id"
    )
