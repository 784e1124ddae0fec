"""`privq admin rotate-key`: a stored admin key is replaced (every API process stops
accepting the old one within seconds, no restart), a key from PRIVQ_ADMIN_KEY cannot be
(the command says what to do instead), and the key is printed apart from log lines."""

from __future__ import annotations

import re

import pytest
from conftest import bearer
from fastapi.testclient import TestClient

from app.api import create_app
from app.cli import build_parser, main
from app.config import Settings, get_settings

KEY_LINE = re.compile(r"^    (pqadmin_\S+)$", re.MULTILINE)


@pytest.fixture
def env_database(tmp_path, monkeypatch):  # type: ignore[no-untyped-def]
    url = f"sqlite:///{tmp_path}/keys.db"
    monkeypatch.setenv("PRIVQ_DATABASE_URL", url)
    monkeypatch.delenv("PRIVQ_ADMIN_KEY", raising=False)
    get_settings.cache_clear()
    assert main(["migrate"]) == 0
    yield url
    get_settings.cache_clear()


def printed_key(text: str) -> str:
    """The one key printed on a line of its own, between two rules."""
    keys = KEY_LINE.findall(text)
    assert len(keys) == 1, text
    block = text.strip().splitlines()
    assert block[0] == block[-1] == "=" * 72
    return str(keys[0])


def test_a_stored_admin_key_is_rotated_and_the_old_one_refused(
    env_database, capsys, monkeypatch
) -> None:
    monkeypatch.setattr("app.api.deps.ADMIN_KEY_RECHECK_SECONDS", 0.0)
    settings = Settings(database_url=env_database, workers_in_process=0)
    capsys.readouterr()
    with TestClient(create_app(settings)) as client:
        first = printed_key(capsys.readouterr().out)  # the first start generates one
        assert client.get("/v1/tenants", headers=bearer(first)).status_code == 200

        assert main(["admin", "rotate-key"]) == 0
        printed = capsys.readouterr().out
        assert "new admin key" in printed
        second = printed_key(printed)
        assert second != first
        # The running API process takes the new key, without a restart.
        assert client.get("/v1/tenants", headers=bearer(second)).status_code == 200
        refused = client.get("/v1/tenants", headers=bearer(first))
        assert refused.status_code == 401
    with TestClient(create_app(settings)) as client:  # a restart prints no key again
        assert KEY_LINE.search(capsys.readouterr().out) is None
        assert client.get("/v1/tenants", headers=bearer(second)).status_code == 200


def test_rotating_before_any_start_stores_a_key(env_database, capsys) -> None:
    assert main(["admin", "rotate-key"]) == 0
    key = printed_key(capsys.readouterr().out)
    settings = Settings(database_url=env_database, workers_in_process=0)
    with TestClient(create_app(settings)) as client:
        assert KEY_LINE.search(capsys.readouterr().out) is None  # none generated on top
        assert client.get("/v1/tenants", headers=bearer(key)).status_code == 200


def test_a_key_from_the_environment_cannot_be_rotated_here(
    env_database, capsys, monkeypatch
) -> None:
    monkeypatch.setenv("PRIVQ_ADMIN_KEY", "an-admin-key-from-the-environment-" + "e" * 16)
    get_settings.cache_clear()
    assert main(["admin", "rotate-key"]) == 1
    captured = capsys.readouterr()
    assert "PRIVQ_ADMIN_KEY" in captured.err and "restart" in captured.err
    assert KEY_LINE.search(captured.out) is None


def test_the_help_says_how_to_recover_a_lost_key() -> None:
    admin = build_parser()._subparsers._group_actions[0].choices["admin"]  # type: ignore[union-attr]
    rotate = admin._subparsers._group_actions[0].choices["rotate-key"]  # type: ignore[union-attr]
    text = rotate.format_help()
    assert "LOST" in text and "PRIVQ_DATABASE_URL" in text and "PRIVQ_ADMIN_KEY" in text
