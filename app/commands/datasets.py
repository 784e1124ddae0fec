"""`privq datasets list|show|upload|purge-records|delete`: the curator's tables."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from app.api.schemas import DatasetOut
from app.commands.output import Done, Listing, Record, action
from app.config import get_settings
from app.services import datasets as dataset_service
from app.services.rho import rho_units

DATASET_COLUMNS = ("id", "name", "rows", "rho_total", "created_at")


def list_datasets(args: argparse.Namespace, session: Session) -> Listing:
    found = dataset_service.list_datasets(session, limit=args.limit, cursor=args.cursor)
    return Listing(
        [DatasetOut.of(d, for_admin=True) for d in found.items], DATASET_COLUMNS, found.next_cursor
    )


def show_dataset(args: argparse.Namespace, session: Session) -> Record:
    dataset = dataset_service.get_dataset(session, args.dataset_id)
    return Record(DatasetOut.of(dataset, for_admin=True))


def upload_dataset(args: argparse.Namespace, session: Session) -> Record:
    schema = dataset_service.parse_dataset_schema(Path(args.schema).read_text())
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
        )
    return Record(DatasetOut.of(dataset, for_admin=True), hidden=("attributes",))


def purge_records(args: argparse.Namespace, session: Session) -> Done:
    dataset_service.purge_records(session, args.dataset_id)
    return Done(
        f"dataset {args.dataset_id}: raw records destroyed; free answers keep working "
        "from the model, measuring is refused"
    )


def delete_dataset(args: argparse.Namespace, session: Session) -> Done:
    dataset_service.delete_dataset(session, args.dataset_id)
    return Done(
        f"dataset {args.dataset_id} deleted: records, measurements and models gone; "
        "the ledger keeps its lines"
    )


def register(commands: argparse._SubParsersAction[Any]) -> None:
    datasets = commands.add_parser("datasets", help="list, inspect and upload datasets")
    actions = datasets.add_subparsers(dest="datasets_command", required=True)
    action(actions, "list", list_datasets, "every dataset, oldest first", paged=True)
    action(actions, "show", show_dataset, "one dataset: schema, rows, rho_total", "dataset_id")
    upload = action(
        actions,
        "upload",
        upload_dataset,
        "upload a CSV under a schema (JSON file)",
        ("csv", "the CSV file, with a header row"),
    )
    upload.add_argument("--schema", required=True, help="the schema's JSON file")
    upload.add_argument("--name", required=True)
    upload.add_argument("--rho-total", default=None, help="cap on all grants together")
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
