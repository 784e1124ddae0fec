"""The image's health check: one script, a check fitting the role of the container.

The role is read from the command the container runs (its process 1), or given as the
first argument (`api`, `worker`, `migrate`):

- `privq serve [--port N]`: GET /readyz on that port answers 200 — the database
  answers and its schema is current (503 while PostgreSQL restarts: not ready).
- `privq worker --metrics-port N`: the worker's own metrics server answers on N.
  It runs in the worker process, so an answer means the process is up and serving;
  a 401 (no admin key given to the check) counts as an answer.
- `privq worker` without a metrics port, `privq migrate`: healthy while they run.

Exit status 0 is healthy, 1 unhealthy (Docker's convention); the reason goes to stdout,
which `docker inspect` shows under State.Health.
"""

from __future__ import annotations

import os
import sys
import urllib.error
import urllib.request

TIMEOUT_SECONDS = 4.0


def command_of_process_1() -> list[str]:
    try:
        with open("/proc/1/cmdline", "rb") as handle:
            raw = handle.read()
    except OSError:
        return []
    return [part.decode(errors="replace") for part in raw.split(b"\0") if part]


def option(command: list[str], name: str) -> str | None:
    """The value of `--name VALUE` or `--name=VALUE` in `command`, or None."""
    for index, part in enumerate(command):
        if part == name and index + 1 < len(command):
            return command[index + 1]
        if part.startswith(name + "="):
            return part.split("=", 1)[1]
    return None


def role_of(command: list[str]) -> str:
    for part in command:
        if part in ("serve", "worker", "migrate"):
            return {"serve": "api"}.get(part, part)
    return "api"  # the image's default command is `privq serve`


def get(url: str, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def check(role: str, command: list[str]) -> tuple[bool, str]:
    if role == "api":
        port = option(command, "--port") or "8000"
        status = get(f"http://127.0.0.1:{port}/readyz")
        return status == 200, f"api: GET /readyz answered {status}"
    if role == "worker":
        port = option(command, "--metrics-port")
        if port is None:
            return True, "worker: running (no --metrics-port to probe)"
        key = os.environ.get("PRIVQ_ADMIN_KEY", "")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        status = get(f"http://127.0.0.1:{port}/metrics", headers)
        return status in (200, 401), f"worker: GET /metrics answered {status}"
    return True, f"{role}: running"


def main(argv: list[str]) -> int:
    command = command_of_process_1()
    role = argv[0] if argv else role_of(command)
    try:
        healthy, reason = check(role, command)
    except OSError as error:  # refused, timed out: nothing answers
        healthy, reason = False, f"{role}: no answer ({type(error).__name__}: {error})"
    print(reason)
    return 0 if healthy else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
