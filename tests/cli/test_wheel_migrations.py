"""The built wheel carries every module, the client (typed) and the Alembic scripts;
`privq migrate` runs from it.

The repository keeps the migrations at the top level (alembic/, alembic.ini); the
wheel must still hold them (as app/migration_scripts), or an installed privq could
not create its schema. The wheel is built from a copy of the sources, offline (no
build isolation), and `privq migrate` runs from the unpacked wheel in a directory
away from the repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from alembic.script import ScriptDirectory
from sqlalchemy import create_engine, inspect

from app.migrations import alembic_config

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("app", "privq_client", "alembic", "setup.py", "pyproject.toml", "README.md")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    source = tmp_path_factory.mktemp("source")
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(path, source / name)
    out = tmp_path_factory.mktemp("wheel")
    offline = ["--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", *offline, "-w", str(out), str(source)],
        check=True,
        capture_output=True,
    )
    (built,) = out.glob("privq-*.whl")
    return built


def test_the_wheel_holds_every_module_and_the_migration_scripts(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    modules = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "app").rglob("*.py")
        if "__pycache__" not in path.parts
    }
    assert modules <= names, sorted(modules - names)
    client = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "privq_client").iterdir()
        if path.suffix == ".py" or path.name == "py.typed"
    }
    assert "privq_client/py.typed" in client and client <= names, sorted(client - names)
    revisions = [p.name for p in (ROOT / "alembic" / "versions").glob("*.py")]
    assert revisions, "no migration revisions in alembic/versions"
    packaged = {f"app/migration_scripts/versions/{name}" for name in revisions}
    assert packaged | {"app/migration_scripts/env.py"} <= names
    assert "app/migration_scripts/script.py.mako" in names
    # Nothing may be installed as a top-level `alembic`: it would shadow the library.
    assert not any(name.startswith("alembic/") for name in names)


def test_the_packaged_head_is_the_repository_head(wheel: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(tmp_path)
    packaged = ScriptDirectory(str(tmp_path / "app" / "migration_scripts"))
    checkout = ScriptDirectory.from_config(alembic_config("sqlite://"))
    assert packaged.get_heads() == checkout.get_heads()


def test_privq_migrate_runs_from_the_unpacked_wheel(wheel: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    database = tmp_path / "from-wheel.db"
    env = {
        **os.environ,
        "PYTHONPATH": str(site),
        "PRIVQ_DATABASE_URL": f"sqlite:///{database}",
    }
    script = (
        "import sys, app, app.migrations\n"
        "print(app.__file__)\n"
        "print(app.migrations.script_location())\n"
        "from app.cli import main\n"
        "sys.exit(main(['migrate']))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    app_file, scripts, message = result.stdout.splitlines()[:3]
    # The wheel's copy ran, with its own migration scripts, not the checkout's.
    assert Path(app_file).is_relative_to(site)
    assert Path(scripts) == site / "app" / "migration_scripts"
    assert "up to date" in message
    engine = create_engine(f"sqlite:///{database}")
    try:
        assert {"tenants", "jobs", "alembic_version"} <= set(inspect(engine).get_table_names())
    finally:
        engine.dispose()
