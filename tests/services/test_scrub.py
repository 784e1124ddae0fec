"""The storage scrub after a purge: it retries, says when it could not finish, never raises,
and a purge whose scrub failed still stands."""

from __future__ import annotations

import logging

import pytest
from conftest import ADMIN_HEADERS, ApiHelper, SeedHelper
from fastapi.testclient import TestClient
from sqlalchemy import func, select

from app.db import Database, DatasetColumn
from app.services import scrub

# stands for data an exception's message might quote: not digits alone, which a log
# record's timestamps and thread ids may hold by chance (one CI run failed so)
SECRET = "row-48842-of-the-table"


@pytest.fixture
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(scrub, "RETRY_PAUSE_SECONDS", 0.0)
    monkeypatch.setattr(scrub, "POSTGRES_LOCK_TIMEOUT", "100ms")


def scrub_messages(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "privq.scrub"]


def test_a_scrub_held_off_by_a_reader_retries_says_so_and_succeeds_later(
    database_url: str,
    database: Database,
    seed: SeedHelper,
    quick: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Waits 0.1 s for a lock or for readers, where the service waits 30.
    impatient = Database(database_url, sqlite_busy_timeout_seconds=0.1)
    try:
        seed.dataset()  # on SQLite: something in the WAL for the reader's snapshot
        # A transaction that read the table and is still open: on SQLite its snapshot
        # keeps the WAL from being truncated, on PostgreSQL its lock delays VACUUM FULL.
        with database.read_only() as reader, caplog.at_level(logging.INFO, "privq.scrub"):
            reader.execute(select(func.count()).select_from(DatasetColumn)).scalar()
            assert scrub.scrub_storage(impatient) is False
        messages = scrub_messages(caplog)
        assert [level for level, _ in messages] == [logging.WARNING] * 3 + [logging.ERROR]
        assert "deleted records may remain" in messages[-1][1]
        assert scrub.scrub_storage(impatient) is True  # the reader is gone
    finally:
        impatient.dispose()


def test_a_purge_stands_when_its_scrub_fails_and_the_log_quotes_no_data(
    client: TestClient,
    api: ApiHelper,
    database: Database,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken(_engine: object) -> None:
        raise RuntimeError(f"disk full while writing row {SECRET}")

    monkeypatch.setattr(scrub, "_scrub_sqlite", broken)
    monkeypatch.setattr(scrub, "_scrub_postgresql", broken)
    dataset = api.upload_dataset()
    with caplog.at_level(logging.INFO, "privq.scrub"):
        purged = client.delete(f"/v1/datasets/{dataset['id']}/records", headers=ADMIN_HEADERS)
    assert purged.status_code == 204
    shown = client.get(f"/v1/datasets/{dataset['id']}", headers=ADMIN_HEADERS).json()
    assert shown["records_purged_at"]
    messages = scrub_messages(caplog)
    assert [level for level, _ in messages] == [logging.ERROR, logging.ERROR]  # no retry
    assert all(SECRET not in record.getMessage() for record in caplog.records)
    assert all(SECRET not in str(record.__dict__) for record in caplog.records)
