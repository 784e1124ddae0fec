"""Settings: PRIVQ_* environment, URL normalisation, production refuses weak admin keys."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.config import Settings


def test_defaults_are_the_embedded_sqlite_service(monkeypatch) -> None:
    for name in ("PRIVQ_DATABASE_URL", "PRIVQ_ADMIN_KEY", "PRIVQ_ENV", "PRIVQ_WORKERS_IN_PROCESS"):
        monkeypatch.delenv(name, raising=False)
    settings = Settings()
    assert settings.database_url == "sqlite:///./privq.db"
    assert settings.is_sqlite and settings.effective_auto_migrate
    assert settings.effective_workers_in_process == 1
    assert settings.max_marginal_cells == 1_000_000 and settings.max_model_cells == 10_000_000


def test_environment_is_read_with_the_privq_prefix(monkeypatch) -> None:
    monkeypatch.setenv("PRIVQ_DATABASE_URL", "postgresql://u@db:5432/privq")
    monkeypatch.setenv("PRIVQ_MAX_UPLOAD_BYTES", "1234")
    settings = Settings()
    assert settings.database_url == "postgresql+psycopg://u@db:5432/privq"
    assert settings.max_upload_bytes == 1234
    assert not settings.effective_auto_migrate and settings.effective_workers_in_process == 0
    assert Settings(database_url="postgres://h/d").database_url == "postgresql+psycopg://h/d"


@pytest.mark.parametrize("admin_key", [None, "changeme", "short-key"])
def test_production_refuses_missing_or_weak_admin_key(admin_key) -> None:
    with pytest.raises(ValidationError, match="PRIVQ_ADMIN_KEY"):
        Settings(env="production", admin_key=admin_key)


def test_production_accepts_a_strong_admin_key() -> None:
    settings = Settings(env="production", admin_key="s" * 40)
    assert settings.admin_key is not None
    assert "s" * 40 not in repr(settings)  # a secret is never printed with the settings
