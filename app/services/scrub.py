"""Scrubbing the database's files once raw records were deleted (a purge, a dataset delete).

A committed DELETE does not destroy the bytes it deletes, so whoever commits a purge
or a delete (`app.services.datasets.purge_records`, `delete_dataset`) calls
`scrub_storage` afterwards, on a connection of its own with no transaction open
(neither SQLite's nor PostgreSQL's VACUUM runs inside one):

- SQLite: every connection runs with `secure_delete` on (`app.db.make_engine`), so
  the delete overwrites the rows' cells and freed pages with zeros — but it writes
  those zeroed pages to the write-ahead log, and until the log is reset its older
  frames (the upload's) still hold the records, as does the main file until the
  zeroed pages are checkpointed into it. The scrub checkpoints with TRUNCATE (pages
  into the file, the `-wal` file cut to zero bytes), VACUUMs (the file rebuilt with
  no free page: nothing a connection without `secure_delete` — the sqlite3 shell —
  ever left behind) and checkpoints again, since VACUUM writes through the log too.
  VACUUM holds the write lock while it rewrites the whole file.
- PostgreSQL: a DELETE only marks the tuples dead. `VACUUM FULL dataset_columns`
  rewrites the table and its TOAST table (where large columns live) into new files
  and unlinks the old ones. Plain VACUUM is not enough: it makes the space reusable
  but does not overwrite it — measured on PostgreSQL 15, 18 of 20 pieces of a deleted
  20 kB value were still in the TOAST file after it, none after VACUUM FULL. The
  price is an ACCESS EXCLUSIVE lock on `dataset_columns` while it rewrites (uploads
  and workers loading columns wait; free answers never read the table), taken with
  a `lock_timeout` so that a long transaction ahead of it cannot make every later
  reader of the table queue behind it; it is retried. Only `dataset_columns` holds
  raw records: measurements and models are differentially private releases.
  VACUUM FULL keeps every dead tuple that a snapshot still open may see, so the scrub
  first waits (a few seconds at most, then the attempt is retried) until no other
  session's snapshot is older than the scrub: a transaction that began before the purge
  committed would otherwise keep the deleted rows in the new files.

What no scrub reaches — PostgreSQL's own WAL until it is recycled, WAL archives,
backups, copies of the SQLite file — is in docs/privacy.md.

`scrub_storage` never raises: the purge is committed whatever happens here. A failure
is logged (its type and SQLSTATE, never a message that could quote data) and the
scrub can be run again: purging a purged dataset's records again changes nothing but
scrubs once more.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.exc import OperationalError

from app.db import Database, DatasetColumn

logger = logging.getLogger("privq.scrub")

# Tries before giving up, and the pause between them: lock waits and busy checkpoints
# are transient (a reader or a transaction that was open when the purge committed).
ATTEMPTS = 3
RETRY_PAUSE_SECONDS = 1.0
# How long VACUUM FULL waits for its lock before the attempt gives up: while it waits,
# every later reader of `dataset_columns` waits behind it.
POSTGRES_LOCK_TIMEOUT = "5s"
# The table whose rows are the raw records; its TOAST table is vacuumed with it.
RECORDS_TABLE = DatasetColumn.__tablename__


class ScrubIncomplete(Exception):
    """The database could not finish a step of the scrub now (e.g. a reader held the WAL)."""


def scrub_storage(database: Database) -> bool:
    """Overwrite what deleted records left in the database's files; True when done.

    Call it after the transaction that deleted them committed, never inside one.
    """
    scrub = _scrub_sqlite if database.is_sqlite else _scrub_postgresql
    for attempt in range(1, ATTEMPTS + 1):
        try:
            scrub(database.engine)
            return True
        except (OperationalError, ScrubIncomplete) as error:
            logger.warning(
                "storage scrub attempt failed",
                extra={"attempt": attempt, "attempts": ATTEMPTS, **_describe(error)},
            )
        except Exception as error:  # a bug: still no reason to fail the committed purge
            logger.error("storage scrub failed", extra=_describe(error))
            break
        if attempt < ATTEMPTS:
            time.sleep(RETRY_PAUSE_SECONDS)
    logger.error(
        "deleted records may remain in the database files: the storage scrub did not "
        "complete; purge the records again to retry it (docs/privacy.md)"
    )
    return False


def _describe(error: BaseException) -> dict[str, Any]:
    """The error's type and SQLSTATE: a driver's message can quote the statement's data."""
    cause = getattr(error, "orig", None) or error
    described: dict[str, Any] = {"error": type(cause).__name__}
    sqlstate = getattr(cause, "sqlstate", None)
    if sqlstate:
        described["sqlstate"] = sqlstate
    return described


def _scrub_sqlite(engine: Engine) -> None:
    # A raw DB-API connection: the engine's "begin" hook would open a transaction, and
    # app.db's connections run with no implicit one (isolation_level None).
    connection = engine.raw_connection()
    try:
        cursor = connection.cursor()
        try:
            _checkpoint(cursor)
            cursor.execute("VACUUM")
            _checkpoint(cursor)
        finally:
            cursor.close()
    finally:
        connection.close()


def _checkpoint(cursor: Any) -> None:
    """Copy the WAL into the main file and truncate it to zero bytes."""
    # Waits (busy_timeout) for readers still on the old frames; (busy, frames, copied).
    busy, _frames, _copied = cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
    if busy:
        raise ScrubIncomplete("a reader kept the write-ahead log from being checkpointed")


# Another session's transaction whose snapshot is older than the purge still sees the
# deleted rows, and VACUUM FULL copies every row some snapshot may see into the new files.
# The scrub waits (polling) up to this long for such transactions to end, then gives the
# attempt up (it is retried).
SNAPSHOT_WAIT_SECONDS = 5.0
SNAPSHOT_POLL_SECONDS = 0.05
# Client sessions of this database whose oldest snapshot (`backend_xmin`, a 32-bit xid)
# was taken at or before the marker xid: `age` is counted from this statement's own xid,
# so current − age is the snapshot's position on the same 64-bit scale as the marker.
_OLDER_SNAPSHOTS = """
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
  AND backend_type = 'client backend' AND backend_xmin IS NOT NULL
  AND pg_current_xact_id()::text::bigint - age(backend_xmin) <= %(marker)s
"""


def _scrub_postgresql(engine: Engine) -> None:
    table = engine.dialect.identifier_preparer.quote(RECORDS_TABLE)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        _wait_for_older_snapshots(connection)
        # SET, not SET LOCAL (there is no transaction): reset before the pool reuses it.
        connection.exec_driver_sql(f"SET lock_timeout = '{POSTGRES_LOCK_TIMEOUT}'")
        try:
            connection.exec_driver_sql(f"VACUUM FULL {table}")
        finally:
            connection.exec_driver_sql("RESET lock_timeout")


def _wait_for_older_snapshots(connection: Any) -> None:
    """Return once no other session holds a snapshot from before this call (one taken
    before the purge committed is among them); ScrubIncomplete after
    SNAPSHOT_WAIT_SECONDS."""
    marker = int(connection.exec_driver_sql("SELECT pg_current_xact_id()::text").scalar_one())
    deadline = time.monotonic() + SNAPSHOT_WAIT_SECONDS
    while True:
        older = connection.exec_driver_sql(_OLDER_SNAPSHOTS, {"marker": marker}).scalar_one()
        if not older:
            return
        if time.monotonic() >= deadline:
            raise ScrubIncomplete(f"{older} transaction(s) older than the purge stayed open")
        time.sleep(SNAPSHOT_POLL_SECONDS)
