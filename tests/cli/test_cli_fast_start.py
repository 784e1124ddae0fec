"""`privq --help` is fast, and no command creates a database it was not told to.

Fast: building the parser imports none of the heavy libraries (the settings, SQLAlchemy,
numpy, pyarrow, httpx, the service); each command imports what it needs when it runs.
The timing is a generous bound (3 s on a busy machine; measured ~0.2 s of imports).
The parser's copies of constants that live in heavy modules agree with them.

No database: a command that needs one, run where there is no `privq.db` and with no
PRIVQ_DATABASE_URL, refuses in one line and leaves the folder empty; `migrate` creates
one, after which the same command works.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.cli import main
from app.commands import datasets as dataset_commands
from app.commands import schema as schema_commands
from app.config import get_settings

ROOT = Path(__file__).resolve().parents[2]
HELP_SECONDS_BOUND = 3.0
HEAVY_MODULES = (
    "app.api",
    "app.config",
    "app.db",
    "app.services",
    "httpx",
    "numpy",
    "pyarrow",
    "pydantic",
    "sqlalchemy",
)


def _environment() -> dict[str, str]:
    """This environment without any PRIVQ_* setting and with this worktree importable."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVQ_")}
    return {**env, "PYTHONPATH": str(ROOT)}


def _privq(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=cwd,
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_parser_imports_no_heavy_module() -> None:
    probe = (
        "import sys, app.cli\n"
        "app.cli.build_parser()\n"
        f"heavy = {HEAVY_MODULES!r}\n"
        "print(sorted({m for m in sys.modules for h in heavy if m == h or "
        "m.startswith(h + '.')}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        env=_environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "args",
    [("--help",), ("measure", "--help"), ("datasets", "upload", "--help"), ("sql", "--help")],
)
def test_help_answers_fast(args: tuple[str, ...], tmp_path: Path) -> None:
    started = time.perf_counter()
    result = _privq(*args, cwd=tmp_path)
    elapsed = time.perf_counter() - started
    assert result.returncode == 0, result.stderr
    assert "usage: privq" in result.stdout
    assert elapsed < HELP_SECONDS_BOUND, f"{' '.join(args)} took {elapsed:.2f} s"


def test_the_parsers_copies_of_constants_agree() -> None:
    from app.limits import MAX_RHO
    from app.pgm.estimation import ESTIMATOR_NAMES
    from app.schema import drafting

    assert dataset_commands.ESTIMATOR_CHOICES == ESTIMATOR_NAMES
    assert schema_commands.DEFAULT_BINS == drafting.DEFAULT_BINS
    assert schema_commands.DEFAULT_MAX_CATEGORIES == drafting.DEFAULT_MAX_CATEGORIES
    assert schema_commands.MAX_PRIVATE_BINS_RHO == MAX_RHO


@pytest.mark.parametrize(
    "args",
    [
        ("tenants", "list"),
        ("jobs", "list"),
        ("sql", "people", "SELECT COUNT(*) FROM people"),
        ("admin", "create-tenant", "team"),
        ("worker",),
    ],
)
def test_no_database_is_a_one_line_refusal_and_creates_nothing(
    args: tuple[str, ...], tmp_path: Path
) -> None:
    result = _privq(*args, cwd=tmp_path)
    assert result.returncode == 1, (result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr
    assert lines[0].startswith("privq: no service and no database")
    assert "--url" in lines[0] and "PRIVQ_DATABASE_URL" in lines[0]
    assert list(tmp_path.iterdir()) == []


def test_the_default_database_is_used_once_it_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for variable in [name for name in os.environ if name.startswith("PRIVQ_")]:
        monkeypatch.delenv(variable)
    monkeypatch.setenv("PRIVQ_INSECURE_DEV_KEY", "true")  # a throw-away folder
    monkeypatch.chdir(tmp_path)
    get_settings.cache_clear()
    try:
        assert main(["tenants", "list"]) == 1
        assert not (tmp_path / "privq.db").exists()
        assert main(["migrate"]) == 0  # told to: creates ./privq.db
        assert (tmp_path / "privq.db").exists()
        capsys.readouterr()
        assert main(["tenants", "create", "team", "--json"]) == 0
        assert '"name": "team"' in capsys.readouterr().out
    finally:
        get_settings.cache_clear()
