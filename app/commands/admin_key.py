"""`privq admin rotate-key`: replace the admin key (and recover a lost one)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.config import Settings

ROTATE_HELP = "replace the admin key (also: recover a lost one)"
ROTATE_DESCRIPTION = """\
Replace the admin key and print the new one, once. The old key stops working in every
API process within a few seconds; no restart is needed.

This needs the database (PRIVQ_DATABASE_URL), not the old key: an operator on a host
that reaches the database recovers a LOST admin key this way, e.g. in a container
deployment `docker compose exec api privq admin rotate-key`.

If the key comes from PRIVQ_ADMIN_KEY, privq stores nothing of it and this command
refuses: set PRIVQ_ADMIN_KEY to a new random value (at least 32 characters) for every
API and worker process and restart them. Unset it instead to switch to a stored key,
then run this command to issue one.
"""


def rotate_key(_args: argparse.Namespace, settings: Settings) -> int:
    from app.commands.output import fail
    from app.db import Database
    from app.errors import PrivqError
    from app.migrations import database_problem
    from app.services import admin_key

    problem = database_problem(settings, reachable_required=True)
    if problem is not None:
        return fail(problem)
    database = Database.from_settings(settings)
    try:
        with database.unit_of_work() as session:
            key = admin_key.rotate(session, settings)
    except PrivqError as error:
        return fail(error.message)
    finally:
        database.dispose()
    print(admin_key.notice(key, headline="new admin key (the previous one no longer works):"))
    sys.stdout.flush()
    return 0


def add_rotate_key(admin_commands: argparse._SubParsersAction[Any]) -> None:
    parser = admin_commands.add_parser(
        "rotate-key",
        help=ROTATE_HELP,
        description=ROTATE_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.set_defaults(handler=rotate_key)
