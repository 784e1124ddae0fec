"""A purge (and a delete) leaves no byte of the records in the database's files.

SQLite: the packed columns are looked for, piece by piece, in the main file and in the
`-wal` file after `DELETE /v1/datasets/{id}/records` (and `DELETE /v1/datasets/{id}`).
PostgreSQL: the purge rewrote `dataset_columns` and its TOAST table into new files
(VACUUM FULL); with the privileges to read the server's files (a superuser, as in CI),
the pieces are looked for in those files too, after a CHECKPOINT wrote every page out.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from conftest import ADMIN_HEADERS, ApiHelper
from fastapi.testclient import TestClient
from sqlalchemy import Connection, text
from storage_scan import (
    DISTINCTIVE_SCHEMA,
    count_found,
    distinctive_csv,
    pieces_of,
    sqlite_files,
    stored_blobs,
)

from app.db import Database


def upload(api: ApiHelper, database: Database, seed: int) -> tuple[dict[str, Any], list[bytes]]:
    """A dataset whose column packs into a long unique blob, and pieces of what was stored.

    Another one is uploaded after it and kept, so that its pages are not the last of the
    table or file: a plain vacuum would simply cut those off.
    """
    dataset = api.upload_dataset(distinctive_csv(seed), DISTINCTIVE_SCHEMA)
    api.upload_dataset(distinctive_csv(seed + 1000), DISTINCTIVE_SCHEMA)
    return dataset, pieces_of(stored_blobs(database, dataset["id"]))


@pytest.mark.parametrize("retire", ["purge", "delete"])
def test_no_byte_of_the_records_is_left_in_the_sqlite_files(
    client: TestClient, api: ApiHelper, database: Database, retire: str
) -> None:
    if not database.is_sqlite:
        pytest.skip("SQLite's files; PostgreSQL's are the next test")
    dataset, pieces = upload(api, database, seed=1 if retire == "purge" else 2)
    before = sqlite_files(database.url)
    # The scan sees what is stored: nearly every piece is in the files (one may straddle
    # two pages), in the WAL or already checkpointed into the main file.
    assert count_found(pieces, before["main"] + before["wal"]) >= 0.9 * len(pieces)

    url = f"/v1/datasets/{dataset['id']}" + ("/records" if retire == "purge" else "")
    assert client.delete(url, headers=ADMIN_HEADERS).status_code == 204
    for name, content in sqlite_files(database.url).items():
        left = count_found(pieces, content)
        assert left == 0, f"{left} pieces of the records left in the {name} file"


def test_every_sqlite_connection_overwrites_what_it_deletes(database: Database) -> None:
    # Some SQLite builds (Debian's) default to it, others (python.org's, Homebrew's) do
    # not: the files scan above cannot tell the two apart on a build that defaults to it.
    if not database.is_sqlite:
        pytest.skip("a SQLite setting")
    with database.engine.connect() as connection:
        assert connection.exec_driver_sql("PRAGMA secure_delete").scalar() == 1


def relation_files(connection: Connection) -> dict[str, int]:
    """The file numbers of `dataset_columns` and of its TOAST table."""
    row = connection.execute(
        text(
            "SELECT c.relfilenode, t.relfilenode FROM pg_class c "
            "JOIN pg_class t ON t.oid = c.reltoastrelid "
            "WHERE c.oid = 'dataset_columns'::regclass"
        )
    ).one()
    return {"heap": row[0], "toast": row[1]}


def may_read_server_files(connection: Connection) -> bool:
    return bool(
        connection.execute(
            text(
                "SELECT rolsuper OR (pg_has_role(current_user, 'pg_read_server_files', 'MEMBER')"
                " AND pg_has_role(current_user, 'pg_checkpoint', 'MEMBER'))"
                " FROM pg_roles WHERE rolname = current_user"
            )
        ).scalar()
    )


TOAST_OF_RECORDS = "(SELECT reltoastrelid FROM pg_class WHERE oid = 'dataset_columns'::regclass)"


def records_table_bytes(connection: Connection) -> bytes:
    """The on-disk bytes of `dataset_columns` and its TOAST table, every page written out."""
    connection.execute(text("CHECKPOINT"))
    content = b""
    for relation in ("'dataset_columns'::regclass", TOAST_OF_RECORDS):
        content += connection.execute(
            text(f"SELECT pg_read_binary_file(pg_relation_filepath({relation}))")
        ).scalar_one()
    return content


def test_a_purge_rewrites_the_records_table_on_postgresql(
    client: TestClient, api: ApiHelper, database: Database
) -> None:
    if database.is_sqlite:
        pytest.skip("PostgreSQL's files; SQLite's are the previous test")
    dataset, pieces = upload(api, database, seed=7)
    engine = database.engine.execution_options(isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        files_before = relation_files(connection)
        scan = may_read_server_files(connection)
        if scan:
            assert count_found(pieces, records_table_bytes(connection)) >= 0.9 * len(pieces)

    url = f"/v1/datasets/{dataset['id']}/records"
    assert client.delete(url, headers=ADMIN_HEADERS).status_code == 204
    with engine.connect() as connection:
        # New files for both (VACUUM FULL): the old ones, dead tuples and all, are gone.
        files_after = relation_files(connection)
        assert files_after["heap"] != files_before["heap"]
        assert files_after["toast"] != files_before["toast"]
        if scan:
            left = count_found(pieces, records_table_bytes(connection))
            assert left == 0, f"{left} pieces of the records left in the table's files"


def test_a_purge_waits_for_a_transaction_that_still_sees_the_records(
    client: TestClient, api: ApiHelper, database: Database
) -> None:
    """A session whose snapshot predates the purge still sees the deleted rows, and VACUUM
    FULL would copy them into the new files: the scrub waits for it to end first."""
    if database.is_sqlite:
        pytest.skip("PostgreSQL's snapshots")
    dataset, pieces = upload(api, database, seed=11)
    with database.engine.connect() as probe:
        if not may_read_server_files(probe.execution_options(isolation_level="AUTOCOMMIT")):
            pytest.skip("reading the server's files needs a superuser (CI has one)")
    holder = database.engine.connect().execution_options(isolation_level="REPEATABLE READ")
    holder.execute(text("SELECT 1"))  # the snapshot is taken here, after the upload
    ended = threading.Event()

    def end_it() -> None:
        holder.rollback()
        holder.close()
        ended.set()

    timer = threading.Timer(1.0, end_it)
    timer.start()
    try:
        url = f"/v1/datasets/{dataset['id']}/records"
        assert client.delete(url, headers=ADMIN_HEADERS).status_code == 204
        # the scrub could not have finished while the older snapshot was open
        assert ended.is_set()
    finally:
        timer.join()
    engine = database.engine.execution_options(isolation_level="AUTOCOMMIT")
    with engine.connect() as connection:
        left = count_found(pieces, records_table_bytes(connection))
    assert left == 0, f"{left} pieces of the records left in the table's files"
