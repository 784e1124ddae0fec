"""Settings: every knob of the service, read from `PRIVQ_*` environment variables.

One pydantic-settings class is the only place configuration is read. Code receives a
`Settings` instance (the API from `app.state`, the CLI and the worker from
`get_settings()`), never the environment directly, so tests can build their own.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.limits import DEFAULT_MAX_DELTA

# The admin key can create tenants, grant any ρ and read every ledger: in every
# environment it must be at least this long and none of the well-known keys below
# (compared case-insensitively) — unless PRIVQ_INSECURE_DEV_KEY=true, which only a
# development or test setup may give.
MIN_ADMIN_KEY_LENGTH = 32
# Placeholders, words and keys published with privq (documentation, the demo): a short
# one is refused for its length anyway; listed, a longer one is refused too.
WEAK_ADMIN_KEYS = frozenset(
    {
        "",
        "admin",
        "administrator",
        "root",
        "password",
        "passw0rd",
        "p@ssw0rd",
        "changeme",
        "change-me",
        "change_me",
        "changeit",
        "secret",
        "supersecret",
        "test",
        "testing",
        "dev",
        "development",
        "default",
        "example",
        "letmein",
        "qwerty",
        "123456",
        "12345678",
        "1234567890",
        "token",
        "apikey",
        "api-key",
        "admin-key",
        "adminkey",
        "privq",
        "demo-admin-key-not-for-production-use",
        "changeme-changeme-changeme-changeme",
        "0123456789abcdef0123456789abcdef",
        "00000000000000000000000000000000",
    }
)
GENERATE_KEY_HINT = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"


def normalise_database_url(url: str) -> str:
    """Use psycopg 3 for PostgreSQL URLs given without a driver (`postgresql://…`)."""
    for prefix in ("postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+psycopg://" + url[len(prefix) :]
    return url


class Settings(BaseSettings):
    """Configuration of one privq process (API server, worker or CLI command)."""

    # Errors name the variable, never its value: the admin key or a database URL's
    # password would otherwise be printed with the refusal.
    model_config = SettingsConfigDict(
        env_prefix="PRIVQ_", extra="ignore", hide_input_in_errors=True
    )

    database_url: str = Field(
        default="sqlite:///./privq.db",
        description="SQLAlchemy URL; a plain postgresql:// URL uses psycopg 3.",
    )
    admin_key: SecretStr | None = Field(
        default=None,
        description="Admin bearer key: at least 32 characters and not a well-known word or "
        "key, in every environment. Unset: one is generated on first start, stored hashed "
        "and printed once (not allowed when env=production).",
    )
    insecure_dev_key: bool = Field(
        default=False,
        description="Accept a short or well-known admin key anyway: for a throw-away "
        "development or test setup only; refused when env=production.",
    )
    env: Literal["development", "production", "test"] = Field(
        default="development",
        description="production requires admin_key to be set and refuses insecure_dev_key.",
    )
    max_upload_bytes: int = Field(default=2 * 1024**3, gt=0, description="Largest CSV upload.")
    max_json_body_bytes: int = Field(
        default=4 * 1024**2, gt=0, description="Largest JSON request body (413 beyond)."
    )
    max_marginal_cells: int = Field(
        default=1_000_000, gt=0, description="Largest marginal a measurement may ask for."
    )
    max_request_cells: int = Field(
        default=4_000_000,
        gt=0,
        description="Most cells one measurement request may draw noise for, over all its "
        "marginals (422 request_too_large beyond): bounds how long one request keeps a "
        "worker busy.",
    )
    max_model_cells: int = Field(
        default=10_000_000, gt=0, description="Largest total clique size of a fitted model."
    )
    max_delta: float = Field(
        default=DEFAULT_MAX_DELTA,
        gt=0,
        lt=1,
        description="Largest δ a request may give for (ε, δ) (grants, measurements, "
        "mechanisms, budget and dry-run reports, the CLI); larger is a 422.",
    )
    workers_in_process: int | None = Field(
        default=None,
        ge=0,
        description="Job slots (worker processes) started beside `privq serve`; default 2 on "
        "SQLite, so one tenant's long job never holds the only slot, 0 otherwise.",
    )
    api_threads: int = Field(
        default=24,
        ge=1,
        le=1000,
        description="Threads an API process runs blocking request work in; its database "
        "pool holds as many connections (plus a few), so a request thread never waits "
        "for a connection held by a request waiting for a thread.",
    )
    api_write_threads: int = Field(
        default=4,
        ge=1,
        le=100,
        description="Threads an API process runs writes in (charges, grants, uploads), "
        "apart from the reads, so that writes waiting for the database's write lock never "
        "hold every thread.",
    )
    api_answer_threads: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Free answers too large for the event loop (a marginal whose plan "
        "builds a table of millions of cells, a batch of many queries) are computed in "
        "at most this many threads at once. They hold the interpreter lock for most of "
        "their work, so more threads mostly trade it back and forth.",
    )
    database_pool_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="How long a request waits for a pooled connection before a 503.",
    )
    lease_seconds: int = Field(
        default=30,
        gt=0,
        description="How long a worker's claim on a job (and a fit lock) lasts without "
        "renewal; a heartbeat renews it every third of that, so a killed worker's job is "
        "picked up by another within about this long.",
    )
    auto_migrate: bool | None = Field(
        default=None,
        description="Upgrade the schema when the API starts; default on for SQLite only "
        "(PostgreSQL deployments run `privq migrate`).",
    )
    sqlite_busy_timeout_seconds: float = Field(
        default=30.0, gt=0, description="How long a SQLite writer waits for the lock."
    )
    worker_poll_seconds: float = Field(
        default=0.5, gt=0, description="How often an idle worker looks for a job."
    )
    fair_queue: bool = Field(
        default=True,
        description="Take tenants in turn: a claim takes the oldest job of the queue (a "
        "tenant; tenant-less jobs are one more) served least recently, and a mechanism job "
        "gives its slot back between rounds while another tenant's job waits (it resumes "
        "from its stored rounds). False: first come, first served, no yielding (for "
        "comparison).",
    )
    worker_stop_grace_seconds: float = Field(
        default=60.0,
        gt=0,
        description="On SIGTERM a worker stops at its job's next safe point (between "
        "mechanism rounds, before or after a measurement's draw, between a fit's "
        "iterations) and gives the job back without spending an attempt; if none comes "
        "within this many seconds, or a second signal arrives, it stops at once and the "
        "attempt counts. A container's stop grace period should exceed it (and "
        "api_shutdown_grace_seconds for `privq serve`).",
    )
    api_shutdown_grace_seconds: int = Field(
        default=30,
        gt=0,
        description="On SIGTERM the API stops accepting connections and lets requests in "
        "flight finish for up to this many seconds (uvicorn's graceful shutdown) before "
        "closing them.",
    )
    api_keep_alive_seconds: int = Field(
        default=75,
        gt=0,
        description="How long the API keeps an idle HTTP connection open. Longer than the "
        "idle timeout of common client pools and proxies (httpx 5 s, requests/urllib3 "
        "none, nginx 60 s), so the server never closes a connection a client is about to "
        "reuse.",
    )
    api_backlog: int = Field(
        default=2048,
        ge=64,
        description="Connections the API's listening socket queues before accepting them "
        "(the kernel caps it at net.core.somaxconn): a burst of clients waits instead of "
        "being refused.",
    )
    fit_solver: Literal["auto", "admm", "mirror_descent", "accelerated", "dual_averaging"] = Field(
        default="auto",
        description="Private-PGM solver for model fits; auto: ADMM for models up to "
        "200,000 cells, mirror descent above (a mechanism's final fit: accelerated "
        "mirror descent above).",
    )
    fit_max_iterations: int = Field(default=5000, gt=0, description="Iteration cap of one fit.")
    fit_tolerance: float = Field(
        default=1e-6, ge=0, description="Relative tolerance at which a fit stops."
    )
    log_level: str = Field(
        default="INFO",
        description="Level of the JSON log lines every process writes on stderr "
        "(DEBUG, INFO, WARNING, ERROR).",
    )
    metrics_public: bool = Field(
        default=False,
        description="Serve /metrics without the admin key (e.g. to a scraper on a private "
        "network); by default it needs the admin key.",
    )

    source_roots: str = Field(
        default="",
        description="Where registered sources may be read: URI prefixes, comma-separated "
        "(file:///srv/lake/,s3://bucket/prefix/). Empty: no dataset can be registered by "
        "reference.",
    )
    record_engine: Literal["local", "spark"] = Field(
        default="local",
        description="What counts a registered source: the local engine (Arrow batches "
        "streamed through the worker) or Spark through Spark Connect (PRIVQ_SPARK_REMOTE).",
    )
    spark_remote: str | None = Field(
        default=None,
        description="The Spark Connect server the spark engine uses: sc://host:15002.",
    )

    @model_validator(mode="after")
    def _spark_needs_a_remote(self) -> Settings:
        if self.record_engine == "spark" and not self.spark_remote:
            raise ValueError("PRIVQ_RECORD_ENGINE=spark needs PRIVQ_SPARK_REMOTE (sc://host:15002)")
        return self

    @property
    def source_root_list(self) -> tuple[str, ...]:
        """The allowed roots, in the order given, without blanks."""
        return tuple(r.strip() for r in self.source_roots.split(",") if r.strip())

    @field_validator("database_url")
    @classmethod
    def _normalise_url(cls, value: str) -> str:
        return normalise_database_url(value)

    @model_validator(mode="after")
    def _refuse_weak_admin_key(self) -> Settings:
        production = self.env == "production"
        if production and self.insecure_dev_key:
            raise ValueError(
                "PRIVQ_INSECURE_DEV_KEY=true is for development and tests only: unset it "
                "when PRIVQ_ENV=production"
            )
        if self.admin_key is None:
            if production:
                raise ValueError(
                    "PRIVQ_ADMIN_KEY must be set when PRIVQ_ENV=production: use at least "
                    f"{MIN_ADMIN_KEY_LENGTH} random characters (e.g. {GENERATE_KEY_HINT})"
                )
            return self  # development and tests: one is generated on first start
        weakness = admin_key_weakness(self.admin_key.get_secret_value())
        if weakness is None or self.insecure_dev_key:
            return self
        advice = (
            f"PRIVQ_ADMIN_KEY is too weak: {weakness}. Use at least {MIN_ADMIN_KEY_LENGTH} "
            f"random characters (e.g. {GENERATE_KEY_HINT})"
        )
        if not production:
            advice += (
                ", or unset it to have one generated on first start (only for a throw-away "
                "development or test setup, PRIVQ_INSECURE_DEV_KEY=true accepts it)"
            )
        raise ValueError(advice)

    @property
    def is_sqlite(self) -> bool:
        return self.database_url.startswith("sqlite")

    @property
    def effective_workers_in_process(self) -> int:
        if self.workers_in_process is not None:
            return self.workers_in_process
        return 2 if self.is_sqlite else 0

    @property
    def effective_auto_migrate(self) -> bool:
        return self.is_sqlite if self.auto_migrate is None else self.auto_migrate


def admin_key_weakness(key: str) -> str | None:
    """Why `key` may not be the admin key (without quoting it), or None if it may."""
    if not key.strip():
        return "it is empty"
    if key.strip().lower() in WEAK_ADMIN_KEYS:
        return "it is a well-known word or published key"
    if len(key) < MIN_ADMIN_KEY_LENGTH:
        return f"it has {len(key)} characters, fewer than {MIN_ADMIN_KEY_LENGTH}"
    return None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()
