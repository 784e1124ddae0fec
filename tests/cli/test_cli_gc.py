"""`privq serve` settles the garbage collector before serving (see `_settle_garbage_collector`).

Run in a child process with uvicorn replaced by a probe: freezing and thresholds are
process-wide state this test process must not take on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import ADMIN_KEY

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import gc, json, sys
import uvicorn
from app import cli

def probe(server, *args):
    print(json.dumps({"threshold": gc.get_threshold(), "frozen": gc.get_freeze_count()}))

uvicorn.Server.run = probe
sys.exit(cli.main(["serve", "--port", "1", "--workers-in-process", "0"]))
"""


def test_serve_freezes_start_up_objects_and_raises_the_first_threshold(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=ROOT,
        env={
            **os.environ,
            "PRIVQ_DATABASE_URL": f"sqlite:///{tmp_path / 'gc.db'}",
            "PRIVQ_ADMIN_KEY": ADMIN_KEY,
        },
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    # The interpreter's defaults are (700, 10, 10) and nothing frozen.
    assert seen["threshold"][0] >= 10_000
    # The imports and the app: well over 10k objects moved out of every collection.
    assert seen["frozen"] > 10_000
