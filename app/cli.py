"""The `privq` command: serve | worker | migrate | demo, and the operator's commands.

- `privq serve` — the API with uvicorn; on SQLite (the default) it upgrades the
  schema itself and starts one worker process beside the API (a child it stops).
- `privq worker` — a standalone worker process (scale-out, PostgreSQL).

`serve`, `worker` and `admin` check the schema first (`app.migrations.database_problem`): an
out-of-date one is a one-line error naming `privq migrate` and exit status 1.
- `privq migrate` — upgrade the database schema to the latest revision.
- `privq admin create-tenant NAME` — create a tenant and print its id and API key.
- `privq admin rotate-key` — replace the admin key (the way to recover a lost one).
- `privq demo` — the whole loop on a made-up census table, in one process (`app.demo`).
- `privq tenants|keys|grants|datasets|jobs|ledger …` — what the admin key can do over
  HTTP, on the host against the database (`app.commands`; `--json` for the API's JSON).
- `privq measure|aim|jobs|budget|marginal|count|sql|synthetic` — an analyst's commands
  over HTTP, with `--url` and `--key`, PRIVQ_URL and PRIVQ_KEY, or a profile
  (`app.commands.service`); `jobs` and `sql` read the database instead when no service
  is named.

Starting fast: `privq --help` imports argparse and this package's command modules, whose
heavy imports (the settings, SQLAlchemy, the service, numpy) happen inside each command
when it runs. Keep it so: a module-level import of `app.config`, `app.services` or
`app.api` in a command module puts seconds back on every `--help`.

No command creates a database it was not told to: only `serve`, `migrate` and `demo`
may create one; every other command that needs the database refuses (one line, exit
status 1) when PRIVQ_DATABASE_URL is unset and the default SQLite file is not in the
working directory, rather than creating an empty one there.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.config import Settings


def _warn(line: str) -> None:
    print(f"privq: {line}", file=sys.stderr)


def _refuse(problem: str) -> int:
    print(f"privq: {problem}", file=sys.stderr)
    return 1


def _serve(args: argparse.Namespace, settings: Settings) -> int:
    import uvicorn

    from app.api import create_app
    from app.migrations import database_problem
    from app.worker import EmbeddedWorkers, start_embedded_workers

    problem = database_problem(settings, reachable_required=False, warn=_warn)
    if problem is not None:
        return _refuse(problem)
    if args.workers_in_process is not None:
        settings = settings.model_copy(update={"workers_in_process": args.workers_in_process})
    started: list[EmbeddedWorkers] = []

    def start_workers(count: int, worker_settings: Settings) -> EmbeddedWorkers:
        workers = start_embedded_workers(count, worker_settings)
        started.append(workers)
        return workers

    app = create_app(settings, start_workers=start_workers)
    _settle_garbage_collector()
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        access_log=False,  # the app's own JSON request log replaces uvicorn's
        timeout_graceful_shutdown=settings.api_shutdown_grace_seconds,
        timeout_keep_alive=settings.api_keep_alive_seconds,
        backlog=settings.api_backlog,
    )

    def signal_workers() -> None:
        for workers in started:
            workers.signal()

    _stopping_server(config, on_exit=signal_workers).run()
    return 0


def _stopping_server(config: Any, on_exit: Callable[[], None]) -> Any:
    """uvicorn's server, whose stop signal also reaches the embedded workers at once: they
    head for a safe point while the API drains its requests, not after."""
    import uvicorn

    class Server(uvicorn.Server):
        def handle_exit(self, sig: int, frame: Any) -> None:
            on_exit()  # the first signal stops them gracefully; a second one forces it
            super().handle_exit(sig, frame)

    return Server(config)


def _settle_garbage_collector() -> None:
    """Keep the cyclic garbage collector's pauses out of the API's answer latency.

    A full collection walks every tracked object: with the imports and the app (~175k
    objects) it stopped the event loop for 50-120 ms several times in ten seconds of
    free answers, which was their whole p99. What exists now lives for the life of the
    process, so it is frozen out of every future collection, and the first generation
    is collected every 50,000 allocations rather than 700, which keeps the objects of
    requests in flight from being promoted to the old generation at every collection.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 10)


def _worker(args: argparse.Namespace, settings: Settings) -> int:
    from app.logs import configure_logging
    from app.migrations import database_problem
    from app.worker import run_worker  # lazy: only this command needs the worker

    problem = database_problem(settings, reachable_required=False, warn=_warn)
    if problem is not None:
        return _refuse(problem)
    configure_logging(settings.log_level)
    run_worker(settings, metrics_port=args.metrics_port, metrics_host=args.metrics_host)
    return 0


def _migrate(_args: argparse.Namespace, settings: Settings) -> int:
    from sqlalchemy.exc import SQLAlchemyError

    from app.migrations import upgrade_to_head

    try:
        upgrade_to_head(settings.database_url)
    except SQLAlchemyError as error:
        cause = getattr(error, "orig", None) or error
        first_line = (str(cause).strip().splitlines() or [""])[0]
        return _refuse(
            f"cannot migrate the database ({type(cause).__name__}: {first_line}); "
            "check PRIVQ_DATABASE_URL"
        )
    print("privq: database schema is up to date")
    return 0


def _create_tenant(args: argparse.Namespace, settings: Settings) -> int:
    from app.db import Database
    from app.errors import PrivqError
    from app.migrations import database_problem
    from app.services import tenants as tenant_service

    problem = database_problem(settings, reachable_required=True)
    if problem is not None:
        return _refuse(problem)
    database = Database.from_settings(settings)
    try:
        with database.unit_of_work() as session:
            tenant, _key, api_key = tenant_service.create_tenant(session, name=args.name)
    except PrivqError as error:
        print(f"privq: {error.message}", file=sys.stderr)
        return 1
    finally:
        database.dispose()
    print(f"tenant_id: {tenant.id}")
    print(f"api_key:   {api_key}")
    print("(the key is shown only now; only its hash is stored)")
    return 0


def _demo(args: argparse.Namespace, _settings: Settings) -> int:
    from app.demo import run_demo

    return run_demo(rho=args.rho)


def build_parser() -> argparse.ArgumentParser:
    from app.commands.output import OneLineErrorParser

    parser = OneLineErrorParser(
        prog="privq", description="Privacy-budgeted query answering service."
    )
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the HTTP API (and in-process workers)")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument(
        "--workers-in-process",
        type=int,
        default=None,
        metavar="N",
        help="worker processes started beside the API (default: 1 on SQLite, 0 otherwise)",
    )
    serve.set_defaults(handler=_serve, database=CREATES_DATABASE)

    worker = commands.add_parser(
        "worker",
        help="run a job worker until interrupted",
        description="Run jobs until stopped. SIGTERM or Ctrl-C: the job in hand stops at "
        "its next safe point and goes back to the queue without spending an attempt; a "
        "second signal, or PRIVQ_WORKER_STOP_GRACE_SECONDS without a safe point, stops at "
        "once.",
    )
    worker.add_argument(
        "--metrics-port",
        type=int,
        default=None,
        metavar="PORT",
        help="serve this worker's Prometheus /metrics on PORT (admin key unless "
        "PRIVQ_METRICS_PUBLIC=true)",
    )
    worker.add_argument(
        "--metrics-host",
        default="127.0.0.1",
        help="address for --metrics-port (default 127.0.0.1: this machine only; give "
        "0.0.0.0 for a scraper elsewhere, e.g. in another container)",
    )
    worker.set_defaults(handler=_worker)

    demo = commands.add_parser(
        "demo", help="run the whole loop on a made-up census table (examples/), in-process"
    )
    demo.add_argument("--rho", type=float, default=1.0, help="the analyst's grant (default 1)")
    demo.set_defaults(handler=_demo, database=CREATES_DATABASE)

    migrate = commands.add_parser("migrate", help="upgrade the database schema")
    migrate.set_defaults(handler=_migrate, database=CREATES_DATABASE)

    admin = commands.add_parser("admin", help="administrative commands")
    admin_commands = admin.add_subparsers(dest="admin_command", required=True)
    create_tenant = admin_commands.add_parser(
        "create-tenant", help="create a tenant and print its API key"
    )
    create_tenant.add_argument("name")
    create_tenant.set_defaults(handler=_create_tenant)
    from app.commands.admin_key import add_rotate_key

    add_rotate_key(admin_commands)

    from app.commands import add_commands  # tenants, keys, grants, datasets, jobs, ledger

    add_commands(commands)

    from app.commands import schema as schema_commands  # privq schema draft FILE

    schema_commands.register(commands)

    from app.commands import sql as sql_commands  # privq sql DATASET "SELECT …"

    sql_commands.register(commands)

    from app.commands import analyst  # measure, aim, budget, marginal, count, synthetic

    analyst.register(commands)
    return parser


# Our numerical work is many small array operations in several processes (API, workers):
# multi-threaded BLAS only adds contention there (measured 4× slower ADMM on 2 busy
# cores). Set before numpy is first imported; an explicit setting in the environment wins.
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
# Arrow's allocator. pyarrow's default (mimalloc) hands the large buffers of each
# decoded record batch back to the system and faults them in again for the next: the
# local engine's scan spent a third of its CPU in the kernel (bench/lake.py scan, 10⁷
# rows: 2.3 of 6.4 CPU seconds); with the C library's allocator, 0.6 of 4.7. Read when
# pyarrow is first imported; an explicit setting in the environment wins.
ARROW_MEMORY_POOL_VARIABLE = "ARROW_DEFAULT_MEMORY_POOL"


# What a command does with the database (its parser's `database` default): the commands
# that may create one say so; those that need none (`schema draft`) too; every other
# command needs an existing one (`_missing_database`).
CREATES_DATABASE = "creates"
NEEDS_NO_DATABASE = "none"
DATABASE_VARIABLE = "PRIVQ_DATABASE_URL"


def _missing_database(settings: Settings) -> str | None:
    """None if the command was told of a database (PRIVQ_DATABASE_URL) or the default
    SQLite file exists here; else the one line that says what to do instead."""
    if any(name.upper() == DATABASE_VARIABLE for name in os.environ):
        return None
    prefix = "sqlite:///"
    if not settings.database_url.startswith(prefix):
        return None
    path = Path(settings.database_url[len(prefix) :])
    if path.exists():
        return None
    return (
        f"no service and no database: no {path.name} in {Path.cwd()} and "
        f"{DATABASE_VARIABLE} is unset, and nothing was created. Give --url and --key "
        "(or PRIVQ_URL and PRIVQ_KEY, or a profile) to use a running service, or set "
        f"{DATABASE_VARIABLE} (or run from the folder that holds {path.name})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    for variable in BLAS_THREAD_VARIABLES:
        os.environ.setdefault(variable, "1")
    os.environ.setdefault(ARROW_MEMORY_POOL_VARIABLE, "system")
    args = build_parser().parse_args(argv)
    over_http = getattr(args, "over_http", None)
    if over_http is not None:  # an analyst's command: a named service wins over the database
        from app.commands.service import ServiceProblem, find_service

        try:
            service = find_service(args)
        except ServiceProblem as problem:
            return _refuse(str(problem))
        if service is not None or args.handler is None:
            return int(over_http(args, service))
    from app.config import get_settings

    try:
        settings = get_settings()
    except ValueError as error:  # pydantic's ValidationError: bad PRIVQ_* configuration
        print(f"privq: invalid configuration: {error}", file=sys.stderr)
        return 2
    if getattr(args, "database", None) not in (CREATES_DATABASE, NEEDS_NO_DATABASE):
        missing = _missing_database(settings)
        if missing is not None:
            return _refuse(missing)
    return int(args.handler(args, settings))


if __name__ == "__main__":
    raise SystemExit(main())
