"""`privq sql DATASET "SELECT …"`: SQL over a dataset's latest model, on the host or over
HTTP.

The same answer as `POST /v1/datasets/{id}/sql` (docs/sql.md): from a running service
as the tenant sees it when one is named (`--url` and `--key`, PRIVQ_URL and PRIVQ_KEY,
or a profile: `app.commands.service`), else read from the database the `PRIVQ_*`
settings name, as the admin sees it. DATASET is an id or a unique name.
Prints a table (each SUM/AVG/VAR/STDDEV column followed by its bounds, the footer
saying how each estimate was made), or with `--json` the API's JSON, or with `--csv`
the API's CSV. Free:
nothing is charged, no record is read.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from app.commands.output import fail
from app.commands.service import Service, call, over_http, print_json, resolve_dataset, segment

if TYPE_CHECKING:
    from app.config import Settings


def _answer(args: argparse.Namespace, settings: Settings) -> dict[str, Any]:
    from app.db import Database
    from app.services import answers
    from app.services import models as model_service

    database = Database.from_settings(settings)
    try:
        statement = answers.read_sql(args.query)
        with database.read_only() as session:
            dataset_id = answers.resolve_dataset(session, args.dataset)
            version = model_service.visible_latest_version(session, dataset_id, tenant_id=None)
            names = answers.table_names(session, dataset_id)
        if version is None:
            raise model_service.NoModel()
        loaded = answers.load_ready_model(database, dataset_id, version)
        prepared = answers.prepare_sql(
            loaded, statement, table_names=names, max_cells=settings.max_marginal_cells
        )
        return answers.answer_sql(loaded, prepared)
    finally:
        database.dispose()


def _text(value: Any) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, float):
        return f"{value:.6g}" if abs(value) < 1e15 else f"{value:.6e}"
    return str(value)


def _with_bounds(result: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """The columns and rows, each column with bounds (SUM/AVG/VAR/STDDEV; COUNT when
    WHERE cuts a bin) followed by them ("[least, greatest]", or NULL) in a column named
    "<column> bounds"."""
    columns = [str(c) for c in result["columns"]]
    estimates = result.get("estimates") or [None] * len(columns)
    bounds = result.get("bounds") or [[None] * len(columns) for _ in result["rows"]]
    bounded = [
        method is not None or any(pairs[i] is not None for pairs in bounds)
        for i, method in enumerate(estimates)
    ]
    shown_columns: list[str] = []
    for name, has_bounds in zip(columns, bounded, strict=True):
        shown_columns += [name, f"{name} bounds"] if has_bounds else [name]
    rows: list[list[Any]] = []
    for row, pairs in zip(result["rows"], bounds, strict=True):
        shown: list[Any] = []
        for value, pair, has_bounds in zip(row, pairs, bounded, strict=True):
            shown.append(value)
            if has_bounds:
                shown.append(None if pair is None else f"[{_text(pair[0])}, {_text(pair[1])}]")
        rows.append(shown)
    return shown_columns, rows


def _estimates(result: dict[str, Any]) -> str:
    """ "; avg_delay: midpoint" — how each bounded column's numbers were made."""
    estimates = result.get("estimates") or []
    said = [
        f"{column}: {method}"
        for column, method in zip(result["columns"], estimates, strict=True)
        if method is not None
    ]
    return f"; estimates {', '.join(said)}" if said else ""


def table_text(result: dict[str, Any]) -> str:
    """Columns aligned: text to the left, numbers and bounds to the right; a footer with
    the version and how each SUM/AVG/VAR/STDDEV estimate was made."""
    columns, rows = _with_bounds(result)
    cells = [[_text(v) for v in row] for row in rows]
    widths = [max([len(c)] + [len(line[i]) for line in cells]) for i, c in enumerate(columns)]
    numeric = [
        bool(rows)
        and all(
            isinstance(row[i], (int, float)) or row[i] is None or c.endswith(" bounds")
            for row in rows
        )
        for i, c in enumerate(columns)
    ]

    def line(values: list[str]) -> str:
        return "  ".join(
            v.rjust(w) if right else v.ljust(w)
            for v, w, right in zip(values, widths, numeric, strict=True)
        ).rstrip()

    footer = f"({len(rows)} rows, model version {result['model_version']}"
    if result["unmeasured"]:
        footer += f"; no measurement touched {', '.join(result['unmeasured'])}"
    footer += _estimates(result)
    if result.get("approximate"):
        footer += "; approximate: WHERE cuts a bin, spread uniformly within it (--json: bounds)"
    return "\n".join([line(columns), *(line(c) for c in cells), footer + ")"])


def run_sql(args: argparse.Namespace, settings: Settings) -> int:
    from sqlalchemy.exc import OperationalError, SQLAlchemyError

    from app.errors import PrivqError
    from app.migrations import database_problem
    from app.services import answers

    problem = database_problem(settings, reachable_required=True)
    if problem is not None:
        return fail(problem)
    try:
        result = _answer(args, settings)
    except PrivqError as error:
        return fail(error.message)
    except OperationalError as error:
        return fail(f"cannot reach the database ({type(error.orig).__name__})")
    except SQLAlchemyError as error:
        return fail(f"database error ({type(error).__name__})")
    if args.json:
        print(json.dumps(result, allow_nan=False))
    elif args.csv:
        print(answers.sql_csv(result), end="")
    else:
        print(table_text(result))
    return 0


def sql_over_http(args: argparse.Namespace, service: Service) -> int:
    """The same answer from a running service, as the tenant sees it: a table, `--json`
    or `--csv` (the API's CSV, asked for with Accept: text/csv)."""
    path = f"/v1/datasets/{segment(resolve_dataset(service, args.dataset))}/sql"
    headers = {"Accept": "text/csv"} if args.csv else None
    response = call(service, "POST", path, json_body={"query": args.query}, headers=headers)
    if args.csv:
        sys.stdout.write(response.text)
    elif args.json:
        print_json(response.json())
    else:
        print(table_text(response.json()))
    return 0


def register(commands: argparse._SubParsersAction[Any]) -> None:
    parser = commands.add_parser(
        "sql", help="answer a SQL SELECT from a dataset's model (free; docs/sql.md)"
    )
    parser.add_argument("dataset", help="the dataset's id or name")
    parser.add_argument("query", help='one SELECT statement, e.g. "SELECT COUNT(*) FROM adult"')
    formats = parser.add_mutually_exclusive_group()
    formats.add_argument("--json", action="store_true", help="print the HTTP API's JSON")
    formats.add_argument("--csv", action="store_true", help="print CSV (as Accept: text/csv)")
    parser.set_defaults(handler=run_sql)
    over_http(parser, sql_over_http)  # with a service named (--url, PRIVQ_URL, a profile)
