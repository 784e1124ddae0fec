"""Printing results (tables, `field: value` lines, or the API's JSON) and running a command.

`run` opens the database from the settings, upgrades the schema first where the
settings say so (the embedded SQLite default), calls the command inside one unit of
work, and prints what it returns. A `PrivqError`, an unreachable database or any
other failure becomes one line on stderr and exit status 1.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from pydantic import BaseModel
    from sqlalchemy.orm import Session

    from app.config import Settings
    from app.db import Database


@dataclass
class Listing:
    """A page of results and the columns a person wants to see of them."""

    items: Sequence[BaseModel]
    columns: Sequence[str]
    next_cursor: str | None = None


@dataclass
class Record:
    """One object, and optionally a note for people (e.g. "the key is shown only now")."""

    item: BaseModel
    note: str | None = None
    hidden: Sequence[str] = field(default_factory=tuple)


@dataclass
class Done:
    """A command with nothing to show but that it worked (204 over HTTP)."""

    message: str
    # Run once the unit of work committed, on the database (a purge's storage scrub,
    # which needs the deletion committed and no transaction open); it logs its failures.
    after_commit: Callable[[Database], object] | None = None


Result = Listing | Record | Done
Command = Callable[[argparse.Namespace, "Session"], Result]


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ",".join(_cell(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def render_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    cells = [[_cell(row.get(column)) for column in columns] for row in rows]
    widths = [
        max([len(column)] + [len(line[i]) for line in cells]) for i, column in enumerate(columns)
    ]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += [
        "  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() for line in cells
    ]
    return "\n".join(lines)


def render_record(data: dict[str, Any], hidden: Sequence[str] = ()) -> str:
    shown = {k: v for k, v in data.items() if k not in hidden}
    width = max((len(k) for k in shown), default=0)
    lines = []
    for key, value in shown.items():
        if isinstance(value, list) and value and isinstance(value[0], dict):
            lines.append(f"{key}:")
            lines += ["  " + line for line in render_table(value, list(value[0])).splitlines()]
        else:
            lines.append(f"{key.ljust(width)}  {_cell(value)}")
    return "\n".join(lines)


def emit(result: Result, *, as_json: bool) -> None:
    if isinstance(result, Done):
        if as_json:
            print(json.dumps({"ok": True, "message": result.message}))
        else:
            print(result.message)
        return
    if isinstance(result, Record):
        data = result.item.model_dump(mode="json")
        print(json.dumps(data) if as_json else render_record(data, result.hidden))
        if result.note and not as_json:
            print(f"({result.note})")
        return
    rows = [item.model_dump(mode="json") for item in result.items]
    print(json.dumps(rows) if as_json else render_table(rows, result.columns))
    if result.next_cursor is not None:
        # The next page, as the HTTP API's Link header would name it; stderr keeps the
        # JSON on stdout one document.
        print(f"privq: more results: add --cursor {result.next_cursor}", file=sys.stderr)


def fail(message: str) -> int:
    print(f"privq: {' '.join(message.split())}", file=sys.stderr)
    return 1


def run(command: Command, args: argparse.Namespace, settings: Settings) -> int:
    """Run `command` in one unit of work and print its result; errors are one line."""
    from sqlalchemy.exc import OperationalError, SQLAlchemyError

    from app.db import Database
    from app.errors import PrivqError
    from app.migrations import database_problem

    problem = database_problem(settings, reachable_required=True)
    if problem is not None:  # an out-of-date schema names `privq migrate`
        return fail(problem)
    try:
        database = Database.from_settings(settings)
    except (SQLAlchemyError, OSError) as error:
        return fail(f"cannot open the database: {type(error).__name__}")
    try:
        with database.unit_of_work() as session:
            result = command(args, session)
        if isinstance(result, Done) and result.after_commit is not None:
            result.after_commit(database)
        emit(result, as_json=args.json)
        return 0
    except PrivqError as error:
        return fail(error.message)
    except OperationalError as error:
        return fail(f"cannot reach the database ({type(error.orig).__name__})")
    except SQLAlchemyError as error:
        return fail(
            f"database error ({type(error).__name__}); is the schema current? (privq migrate)"
        )
    except OSError as error:
        return fail(f"{error.strerror or error}: {error.filename or ''}")
    except Exception as error:  # a bug: still one line for the operator, never a traceback
        return fail(f"internal error ({type(error).__name__}): {error}")
    finally:
        database.dispose()


class OneLineErrorParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr (exit status 2), not a usage dump."""

    def error(self, message: str) -> NoReturn:
        print(f"privq: {message} (see {self.prog} --help)", file=sys.stderr)
        raise SystemExit(2)


def json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print the HTTP API's JSON instead of a table"
    )


def page_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--limit", type=int, default=100, help="results per page (≤ 1000)")
    parser.add_argument("--cursor", default=None, help="the next page, as printed on stderr")


def action(
    actions: argparse._SubParsersAction[Any],
    name: str,
    command: Command,
    help: str,
    *positionals: str | tuple[str, str],
    paged: bool = False,
) -> argparse.ArgumentParser:
    """A subcommand that runs `command`: its positional arguments (a name, or a name and its
    help), `--limit`/`--cursor` if `paged`, and `--json`. Options are added by the caller."""
    parser: argparse.ArgumentParser = actions.add_parser(name, help=help)
    for positional in positionals:
        if positional == DATASET_ARGUMENT:
            parser.add_argument(positional, metavar="DATASET", help=DATASET_HELP)
            command = partial(_with_dataset_resolved, command)
        elif isinstance(positional, tuple):
            parser.add_argument(positional[0], help=positional[1])
        else:
            parser.add_argument(positional)
    if paged:
        page_flags(parser)
    json_flag(parser)
    parser.set_defaults(handler=partial(run, command))
    return parser


# A positional `dataset_id` takes an id or a unique name (`app.services.dataset_names`).
DATASET_ARGUMENT = "dataset_id"
DATASET_HELP = "the dataset's id, or its name if no other dataset has that name"


def resolve_dataset(
    session: Session, reference: str | None, *, deleted_ids: bool = False
) -> str | None:
    """The id of the dataset an id or unique name names (None stays None). A reference
    that names none is passed on as it is, for the command to refuse in its own words
    (after checking its other arguments); a name several datasets share is refused here
    with their ids."""
    from app.errors import NotFound
    from app.services import dataset_names

    if reference is None:
        return None
    try:
        return dataset_names.resolve(session, reference, deleted_ids=deleted_ids)
    except NotFound:
        return reference


def _with_dataset_resolved(command: Command, args: argparse.Namespace, session: Session) -> Result:
    args.dataset_id = resolve_dataset(session, args.dataset_id)
    return command(args, session)
