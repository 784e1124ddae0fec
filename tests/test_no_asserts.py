"""Invariants in the service's code are typed exceptions, never `assert` (which
`python -O` removes): no assert statement anywhere under app/."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "app"


def test_no_assert_statement_in_app() -> None:
    found = []
    for path in sorted(APP.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        found += [
            f"{path.relative_to(APP.parent)}:{node.lineno}"
            for node in ast.walk(tree)
            if isinstance(node, ast.Assert)
        ]
    assert not found, f"assert statements in app/: {found}"
