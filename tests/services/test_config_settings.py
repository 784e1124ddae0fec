"""Settings: PRIVQ_* environment, URL normalisation, weak admin keys refused everywhere."""

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
    # Two job slots: one tenant's long job never holds the only one.
    assert settings.effective_workers_in_process == 2 and settings.fair_queue
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


# -- the admin key: strong in every environment -------------------------------------------

WEAK_KEYS = [
    "changeme",
    "ADMIN",
    "Password",
    "short-key",
    "",
    "x" * 31,
    "Demo-Admin-Key-Not-For-Production-Use",  # long enough, but published with privq
    "changeme-changeme-changeme-changeme",
]


@pytest.mark.parametrize("env", ["development", "test"])
@pytest.mark.parametrize("admin_key", WEAK_KEYS)
def test_a_weak_admin_key_is_refused_in_every_environment(env, admin_key, monkeypatch) -> None:
    monkeypatch.delenv("PRIVQ_INSECURE_DEV_KEY", raising=False)
    with pytest.raises(ValidationError, match="PRIVQ_ADMIN_KEY is too weak") as refused:
        Settings(env=env, admin_key=admin_key)
    message = str(refused.value)
    assert "32" in message and "PRIVQ_INSECURE_DEV_KEY" in message
    if len(admin_key) >= 8:
        assert admin_key not in message  # the refusal never prints the key


def test_a_weak_key_from_the_environment_is_refused_naming_the_variable(monkeypatch) -> None:
    monkeypatch.setenv("PRIVQ_ADMIN_KEY", "admin")
    monkeypatch.delenv("PRIVQ_ENV", raising=False)
    monkeypatch.delenv("PRIVQ_INSECURE_DEV_KEY", raising=False)
    with pytest.raises(ValidationError, match="PRIVQ_ADMIN_KEY"):
        Settings()


@pytest.mark.parametrize("env", ["development", "test"])
@pytest.mark.parametrize("admin_key", WEAK_KEYS)
def test_insecure_dev_key_allows_a_weak_key_outside_production(env, admin_key) -> None:
    settings = Settings(env=env, admin_key=admin_key, insecure_dev_key=True)
    assert settings.admin_key is not None
    assert settings.admin_key.get_secret_value() == admin_key


def test_insecure_dev_key_is_read_from_the_environment(monkeypatch) -> None:
    monkeypatch.setenv("PRIVQ_ADMIN_KEY", "changeme")
    monkeypatch.setenv("PRIVQ_INSECURE_DEV_KEY", "true")
    monkeypatch.delenv("PRIVQ_ENV", raising=False)
    assert Settings().insecure_dev_key is True


@pytest.mark.parametrize("admin_key", ["changeme", "s" * 40])
def test_production_refuses_insecure_dev_key(admin_key) -> None:
    with pytest.raises(ValidationError, match="PRIVQ_INSECURE_DEV_KEY"):
        Settings(env="production", admin_key=admin_key, insecure_dev_key=True)


@pytest.mark.parametrize("env", ["development", "test"])
def test_an_unset_admin_key_is_generated_outside_production(env, monkeypatch) -> None:
    monkeypatch.delenv("PRIVQ_ADMIN_KEY", raising=False)
    assert Settings(env=env).admin_key is None  # the API generates and prints one


@pytest.mark.parametrize("env", ["development", "test", "production"])
def test_a_strong_admin_key_is_accepted_everywhere(env) -> None:
    key = "Zq8-" + "7Kd2pW0xN4" * 3  # 34 characters
    assert Settings(env=env, admin_key=key).admin_key is not None
