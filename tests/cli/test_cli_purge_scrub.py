"""`privq datasets purge-records` and `delete` scrub the SQLite files, as the API does."""

from __future__ import annotations

import json

import pytest
from storage_scan import (
    DISTINCTIVE_SCHEMA,
    count_found,
    distinctive_csv,
    pieces_of,
    sqlite_files,
    stored_blobs,
)

from app.cli import main
from app.config import get_settings
from app.db import Database


@pytest.mark.parametrize("command", ["purge-records", "delete"])
def test_the_commands_leave_no_byte_of_the_records_in_the_files(
    command: str, tmp_path, monkeypatch, capsys
) -> None:
    url = f"sqlite:///{tmp_path}/operator.db"
    monkeypatch.setenv("PRIVQ_DATABASE_URL", url)
    get_settings.cache_clear()
    try:
        assert main(["migrate"]) == 0
        schema = tmp_path / "schema.json"
        schema.write_text(json.dumps(DISTINCTIVE_SCHEMA))
        uploaded = []
        for seed in (3, 4):  # the second is kept: its pages come after the purged one's
            csv = tmp_path / f"codes-{seed}.csv"
            csv.write_bytes(distinctive_csv(seed))
            capsys.readouterr()
            argv = ["datasets", "upload", str(csv), "--schema", str(schema), "--name", csv.stem]
            assert main([*argv, "--json"]) == 0
            uploaded.append(json.loads(capsys.readouterr().out)["id"])
        dataset_id = uploaded[0]
        # Open through the command, as a running `privq serve` would be: the command's
        # connection is not the last one, so closing it does not checkpoint the WAL.
        service = Database(url)
        try:
            pieces = pieces_of(stored_blobs(service, dataset_id))
            capsys.readouterr()
            assert main(["datasets", command, dataset_id]) == 0
            assert capsys.readouterr().err == ""  # the scrub complained of nothing
            for name, content in sqlite_files(url).items():
                left = count_found(pieces, content)
                assert left == 0, f"{left} pieces of the records left in the {name} file"
        finally:
            service.dispose()
    finally:
        get_settings.cache_clear()
