"""The README's tour, run as a newcomer would: its commands, verbatim, against `privq serve`.

README.md marks the tour's code blocks with an HTML comment on the line before each
(`<!-- tour:setup -->`, `<!-- tour:shell -->`, `<!-- tour:python -->`). The setup block
only says where the service is and what the admin key is (and installs the client,
which the `test` extra already holds): the test checks that it says exactly that and
gives `URL` and `ADMIN` for a service of its own, on a free port. The shell block runs
in bash and the Python block in this interpreter, both twice, in a folder that holds
only a copy of `examples/` (so the tour needs nothing else of the repository, and
nothing outside it): a second run must succeed as the first did (no 409 for a name
already taken, no second charge for the same measurement).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from app import census

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
BLOCK = re.compile(r"<!-- tour:(\w+) -->\n```(\w+)\n(.*?)\n```", re.DOTALL)
ADMIN_KEY = "readme-tour-admin-key-" + "t" * 32
RUN_SECONDS = 300


def tour_blocks() -> dict[str, str]:
    """The tour's marked blocks by name; each name once."""
    blocks: dict[str, str] = {}
    for name, _language, body in BLOCK.findall(README.read_text(encoding="utf-8")):
        assert name not in blocks, f"README.md marks two blocks tour:{name}"
        blocks[name] = body
    return blocks


def _privq_service() -> ModuleType:
    """tests/client/privq_service.py: how the tests start a real `privq serve`."""
    path = ROOT / "tests" / "client" / "privq_service.py"
    spec = importlib.util.spec_from_file_location("readme_tour_privq_service", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tour_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the tour runs: a folder with a copy of examples/ and nothing else."""
    folder = tmp_path_factory.mktemp("readme-tour-cwd")
    shutil.copytree(ROOT / "examples", folder / "examples")
    return folder


@pytest.fixture(scope="module")
def tour_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    folder = tmp_path_factory.mktemp("readme-tour")
    service_module = _privq_service()
    url = f"sqlite:///{folder}/privq.db"
    with service_module.running_service("sqlite", url, folder, ADMIN_KEY) as service:
        yield {
            **os.environ,
            "URL": service.url,
            "ADMIN": service.admin_key,
            # The CLI, if the tour calls it, works on the service's database.
            "PRIVQ_DATABASE_URL": url,
            "PRIVQ_ADMIN_KEY": ADMIN_KEY,
            "PRIVQ_ENV": "test",
        }


def test_the_tour_is_marked_and_its_setup_only_says_where_and_who() -> None:
    blocks = tour_blocks()
    assert set(blocks) == {"setup", "shell", "python"}
    setup = [line.split("#")[0].strip() for line in blocks["setup"].splitlines()]
    assert setup == [
        "export URL=http://127.0.0.1:8000",
        "export ADMIN=pqadmin_...",
        ".venv/bin/pip install -e '.[client]'",
    ]
    for body in blocks.values():
        assert "../shared" not in body and "/work/" not in body
    assert "../shared" not in README.read_text(encoding="utf-8")


def _run(command: list[str], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=RUN_SECONDS
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_the_shell_tour_runs_verbatim_twice(tour_env: dict[str, str], tour_folder: Path) -> None:
    script = tour_blocks()["shell"]
    for _run_number in (1, 2):
        out = _run(["bash", "-euo", "pipefail", "-c", script], tour_env, tour_folder)
        assert '{"error"' not in out, out  # no refusal anywhere
        assert re.search(r'"rho_spent": ?0\.5\b', out), out  # the measurement, and no more
        assert re.search(r'"attributes": ?\["education", ?"income"\]', out), out
        assert ",".join(census.COLUMNS) in out  # the synthetic rows' header
        assert '"model_version"' in out


def test_the_python_tour_runs_verbatim_twice(tour_env: dict[str, str], tour_folder: Path) -> None:
    script = tour_blocks()["python"]
    outputs = [_run([sys.executable, "-c", script], tour_env, tour_folder) for _ in (1, 2)]
    for out in outputs:
        lines = out.strip().splitlines()
        assert lines[-1] == "0.3", out  # one charge, replayed (not charged) the second time
        assert "education" in out and "income" in out
    assert "count" in outputs[1]


def test_the_example_table_is_the_generators() -> None:
    """examples/census.csv and its schema are what examples/make_census.py writes."""
    examples = ROOT / "examples"
    assert (examples / "census.csv").read_text(encoding="utf-8") == census.csv_text()
    assert (examples / "census-schema.json").read_text(encoding="utf-8") == census.schema_text()
    assert 2000 <= census.ROWS <= 5000
