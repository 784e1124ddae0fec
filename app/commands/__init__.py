"""The operator's commands: `privq tenants|keys|grants|datasets|jobs|ledger …`.

Everything the admin key can do over HTTP, done on the host against the database
directly (like `privq serve`, from the same `PRIVQ_*` settings), through the same
services. `--json` prints exactly the JSON the HTTP API would return; without it,
tables and `field: value` lines for people. Every refusal is one line on stderr
(`privq: …`) and exit status 1 — never a traceback.

- `output` — printing, and the runner that turns errors into one line;
- one module per resource: `tenants` (with `keys`), `datasets`, `grants`, `jobs`
  (with `ledger`).
"""

from __future__ import annotations

import argparse
from typing import Any

from app.commands import datasets, grants, jobs, tenants


def add_commands(commands: argparse._SubParsersAction[Any]) -> None:
    """Register every operator command on the `privq` parser's subcommands."""
    for module in (tenants, datasets, grants, jobs):
        module.register(commands)
