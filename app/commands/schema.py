"""`privq schema draft FILE`: a first public schema for a CSV or Parquet file, drafted on
the curator's machine (the file is read locally; nothing is sent anywhere).

The schema (full JSON form) goes to stdout, ready for `-F schema=@schema.json`; the
warnings go to stderr: that the schema becomes public, and which columns were left out
and why. `app.schema.drafting` decides each attribute. `--private-bins RHO` releases the
numeric ranges and edges with a differentially private quantile mechanism and records
RHO in the schema (`"private_bins"`), which the upload then charges against the
dataset's `rho_total`.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

PARQUET_MAGIC = b"PAR1"
# app.schema.drafting's defaults, written out so that the parser imports no pyarrow
# (tests/cli/test_cli_startup.py checks that they agree).
DEFAULT_MAX_CATEGORIES = 20
DEFAULT_BINS = 10
# app.limits.MAX_RHO: a larger ρ would not fit one grant.
MAX_PRIVATE_BINS_RHO = 1_000_000.0


def read_table(path: Path) -> Any:
    """The file as an Arrow table: Parquet with its own types, CSV with every column as
    text (so that "NA" or an empty cell stays what it is and the draft decides)."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    with path.open("rb") as handle:
        magic = handle.read(len(PARQUET_MAGIC))
    if magic == PARQUET_MAGIC:
        return pq.read_table(path)
    with path.open("r", encoding="utf-8-sig", newline="") as text:
        header = next(csv.reader(text), [])
    names = [name.strip() for name in header]
    if not names:
        raise ValueError("the file is empty (no header row)")
    return pacsv.read_csv(
        path,
        read_options=pacsv.ReadOptions(column_names=names, skip_rows=1),
        convert_options=pacsv.ConvertOptions(
            column_types=dict.fromkeys(names, pa.string()),
            strings_can_be_null=False,
            quoted_strings_can_be_null=False,
        ),
    )


def draft(args: argparse.Namespace, _settings: Any = None) -> int:
    import pyarrow as pa

    from app.schema.drafting import draft_schema

    path = Path(args.file)
    try:
        table = read_table(path)
    except (OSError, ValueError, pa.ArrowException) as error:  # UnicodeDecodeError too
        print(f"privq: cannot read {path}: {error}", file=sys.stderr)
        return 1
    try:
        result = draft_schema(
            table,
            max_categories=args.max_categories,
            bins=args.bins,
            exclude=args.exclude,
            private_bins=args.private_bins,
            unit=args.unit,
            max_rows=args.max_rows,
        )
    except ValueError as error:
        print(f"privq: {error}", file=sys.stderr)
        return 1
    for warning in result.warnings:
        print(f"privq: warning: {warning}", file=sys.stderr)
    print(json.dumps(result.schema, indent=2, ensure_ascii=False))
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return value


def _rho(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a number") from None
    if not 0 < value <= MAX_PRIVATE_BINS_RHO:
        raise argparse.ArgumentTypeError(f"must be positive and at most {MAX_PRIVATE_BINS_RHO:g}")
    return value


def register(commands: argparse._SubParsersAction[Any]) -> None:
    schema = commands.add_parser("schema", help="the curator's public schema")
    schema_commands = schema.add_subparsers(dest="schema_command", required=True)
    drafting = schema_commands.add_parser(
        "draft",
        help="draft a schema from a CSV or Parquet file (read locally; review it: it "
        "becomes public)",
    )
    drafting.add_argument("file", help="a CSV (with a header row) or a Parquet file")
    drafting.add_argument(
        "--max-categories",
        type=_positive,
        default=DEFAULT_MAX_CATEGORIES,
        metavar="N",
        help=f"text columns with more distinct values are left out (default "
        f"{DEFAULT_MAX_CATEGORIES})",
    )
    drafting.add_argument(
        "--bins",
        type=_positive,
        default=DEFAULT_BINS,
        metavar="B",
        help=f"about this many bins for numeric columns (default {DEFAULT_BINS})",
    )
    drafting.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="COLUMN",
        help="leave this column out (e.g. the privacy unit's id column); repeatable",
    )
    drafting.add_argument(
        "--private-bins",
        type=_rho,
        default=None,
        metavar="RHO",
        help="release the ranges and edges of numeric columns with a differentially "
        "private quantile mechanism, spending RHO (zCDP) split equally over them; the "
        "schema records RHO and the upload charges it to the dataset's rho_total",
    )
    drafting.add_argument(
        "--unit",
        default=None,
        metavar="COLUMN",
        help="the privacy unit's id column, as at upload (left out of the schema; with "
        "--private-bins each unit keeps its first --max-rows rows)",
    )
    drafting.add_argument(
        "--max-rows",
        type=_positive,
        default=1,
        metavar="K",
        help="with --unit: the rows one unit may contribute, as at upload (default 1)",
    )
    drafting.set_defaults(handler=draft, database="none")  # reads a local file only
