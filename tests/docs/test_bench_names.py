"""A script in bench/ runs with bench/ first on sys.path, so a file there named like a
standard-library module (numbers.py, say) would be imported in its place by every other
script's numpy or pandas."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[2] / "bench"


def test_no_bench_script_shadows_a_standard_library_module() -> None:
    names = {path.stem for path in BENCH.glob("*.py")}
    assert names, "bench/ has scripts"
    assert not names & set(sys.stdlib_module_names)
