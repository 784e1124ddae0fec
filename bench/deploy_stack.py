"""The compose stack of docker-compose.yml as a throw-away project: up, inspect, down.

`bench/deploy.py` (the deployment check) drives it; `tests/deploy/test_stack.py` runs
that check under pytest. Everything goes through the `docker` CLI and its compose
plugin; nothing here starts a container engine.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
COMPOSE_FILE = REPO / "docker-compose.yml"
STANDIN_FILE = REPO / "deploy" / "compose.standin.yml"
# Where ../shared/tools/containers/setup.sh puts the compose plugin on these machines.
STANDIN_DOCKER_CONFIG = Path("/var/tmp/privq-containers/docker")


def docker_env() -> dict[str, str]:
    env = dict(os.environ)
    plugin = STANDIN_DOCKER_CONFIG / "cli-plugins" / "docker-compose"
    if "DOCKER_CONFIG" not in env and plugin.exists():
        env["DOCKER_CONFIG"] = str(STANDIN_DOCKER_CONFIG)
    return env


def run(args: list[str], *, timeout: float = 120, check: bool = True) -> str:
    result = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=docker_env())
    if check and result.returncode != 0:
        tail = (result.stderr or result.stdout).strip()[-2000:]
        raise RuntimeError(f"{' '.join(args[:4])} … failed ({result.returncode}): {tail}")
    return result.stdout


def engine_problem() -> str | None:
    """Why no container engine can be used here, or None when one answers."""
    if shutil.which("docker") is None:
        return "no docker CLI on this machine (no container engine)"
    try:
        info = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            text=True,
            timeout=30,
            env=docker_env(),
        )
    except subprocess.TimeoutExpired:
        return "no container engine answers (docker info timed out)"
    if info.returncode != 0:
        first = (info.stderr.strip().splitlines() or ["?"])[0]
        return f"no container engine answers (docker info: {first})"
    return None


def compose_problem() -> str | None:
    """Why the compose v2 plugin cannot be used (the engine answers), or None."""
    try:
        run(["docker", "compose", "version"], timeout=30)
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        return (
            f"a container engine answers but `docker compose` does not ({error}); install "
            "the compose v2 plugin (on these machines: ../shared/tools/containers/setup.sh "
            "and DOCKER_CONFIG=/var/tmp/privq-containers/docker)"
        )
    return None


def pinned_python_image() -> str:
    match = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", (REPO / "Dockerfile").read_text(), re.M)
    if match is None:
        raise RuntimeError("the Dockerfile names no ARG PYTHON_IMAGE")
    return match.group(1)


def needs_standins() -> bool:
    """True where the pinned base is absent but a local, registry-less stand-in exists.

    An image pulled from a registry carries repository digests; the stand-ins that
    ../shared/tools/containers/setup.sh builds under the plain tags carry none.
    """
    pinned = subprocess.run(
        ["docker", "image", "inspect", pinned_python_image()],
        capture_output=True,
        timeout=60,
        env=docker_env(),
    )
    if pinned.returncode == 0:
        return False
    found = run(
        ["docker", "image", "inspect", "--format", "{{json .RepoDigests}}", "python:3.11-slim"],
        check=False,
    ).strip()
    return found == "[]"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Stack:
    """One compose project of docker-compose.yml with secrets and a lake of its own.

    `spark`: profile `spark` runs too and the workers count registered sources through
    its Connect server (an image built for PRIVQ_RECORD_ENGINE=spark).
    """

    def __init__(
        self, *, standins: bool, spark: bool = False, version: str = "deploy-check"
    ) -> None:
        self.project = f"privq-check-{secrets.token_hex(3)}"
        self.files = [COMPOSE_FILE, *([STANDIN_FILE] if standins else [])]
        self.port = free_port()
        self.spark = spark
        self.engine = "spark" if spark else "local"
        self.version = f"{version}-spark" if spark else version
        self.admin_key = "check-" + secrets.token_urlsafe(32)
        self._folder = tempfile.mkdtemp(prefix="privq-deploy-check-")
        # The curator's lake, mounted read-only at /srv/lake in privq's containers and Spark's.
        self.lake = Path(self._folder) / "lake"
        self.lake.mkdir(mode=0o755)
        self.env_file = Path(self._folder) / "check.env"
        self.env_file.write_text(
            f"POSTGRES_PASSWORD={secrets.token_urlsafe(24)}\n"
            f"PRIVQ_ADMIN_KEY={self.admin_key}\n"
            f"PRIVQ_HTTP_PORT={self.port}\n"
            f"PRIVQ_VERSION={self.version}\n"
            f"PRIVQ_LAKE={self.lake}\n"
            f"PRIVQ_RECORD_ENGINE={self.engine}\n" + ("COMPOSE_PROFILES=spark\n" if spark else "")
        )

    @property
    def spark_services(self) -> list[str]:
        return ["spark-master", "spark-worker", "spark-connect"] if self.spark else []

    def cpu_seconds(self, service: str) -> float:
        """CPU time used so far by all of `service`'s containers (their cgroups, v2 or v1)."""
        read = "cat /sys/fs/cgroup/cpu.stat 2>/dev/null || cat /sys/fs/cgroup/cpuacct/cpuacct.usage"
        total = 0.0
        for container in self.containers(service):
            stat = run(["docker", "exec", container, "sh", "-c", read], timeout=60).split()
            if stat[0] == "usage_usec":  # cgroup v2: microseconds
                total += int(stat[1]) / 1e6
            else:  # cgroup v1: nanoseconds
                total += int(stat[0]) / 1e9
        return total

    def build_figures(self) -> dict[str, Any]:
        """What runs: the commit (and whether tracked files had changes), the images' sizes."""
        git = ["git", "-C", str(REPO)]
        images = [f"privq:{self.version}"]
        if self.spark:
            images.append(self.inspect_image_of("spark-master"))
        sizes = {}
        for image in images:
            size = run(["docker", "image", "inspect", "--format", "{{.Size}}", image], timeout=60)
            sizes[image] = round(int(size.strip()) / 1e6, 1)
        return {
            "commit": run([*git, "rev-parse", "--short", "HEAD"]).strip(),
            "tree_changed": bool(run([*git, "status", "--porcelain", "--untracked-files=no"])),
            "images_mb": sizes,
        }

    def inspect_image_of(self, service: str) -> str:
        """The image name `service` runs, as the compose files render it."""
        rendered = self.compose("config", "--format", "json", timeout=60)
        return str(json.loads(rendered)["services"][service]["image"])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def compose(self, *args: str, timeout: float = 300, check: bool = True) -> str:
        command = ["docker", "compose", "-p", self.project]
        for file in self.files:
            command += ["-f", str(file)]
        command += ["--project-directory", str(REPO), "--env-file", str(self.env_file)]
        return run([*command, *args], timeout=timeout, check=check)

    def containers(self, service: str) -> list[str]:
        """The ids of `service`'s containers, in the order of their replica number."""
        ids = self.compose("ps", "-a", "-q", service, timeout=60).split()
        return sorted(
            ids,
            key=lambda c: int(
                self.inspect(c)["Config"]["Labels"].get("com.docker.compose.container-number", "0")
            ),
        )

    @staticmethod
    def inspect(container: str) -> dict[str, Any]:
        return json.loads(run(["docker", "inspect", container], timeout=60))[0]  # type: ignore[no-any-return]

    def health(self, container: str) -> str:
        state = self.inspect(container)["State"]
        return str(state.get("Health", {}).get("Status") or state["Status"])

    def wait_healthy(self, services: list[str], timeout: float = 240) -> float:
        started = time.monotonic()
        while True:
            states = {c: self.health(c) for s in services for c in self.containers(s)}
            if states and all(state == "healthy" for state in states.values()):
                return time.monotonic() - started
            if time.monotonic() - started > timeout:
                raise RuntimeError(f"not healthy after {timeout:.0f} s: {states}")
            time.sleep(1)

    def psql(self, sql: str) -> str:
        return self.compose(
            "exec",
            "-T",
            "postgres",
            "psql",
            "-U",
            "privq",
            "-d",
            "privq",
            "-Atc",
            sql,
            timeout=60,
        ).strip()

    def container_of_hostname(self, hostname: str) -> str | None:
        for container in self.containers("worker"):
            if self.inspect(container)["Config"]["Hostname"] == hostname:
                return container
        return None

    def events(self, since: int, actions: tuple[str, ...]) -> list[dict[str, str]]:
        """This project's container events since `since` (Unix time) up to now."""
        command = ["docker", "events", "--since", str(since), "--until", str(int(time.time()))]
        command += ["--filter", f"label=com.docker.compose.project={self.project}"]
        command += [x for action in actions for x in ("--filter", f"event={action}")]
        found = []
        for line in run([*command, "--format", "{{json .}}"], timeout=60).splitlines():
            event = json.loads(line)
            attributes = event.get("Actor", {}).get("Attributes", {})
            found.append(
                {
                    "container": attributes.get("name", "?"),
                    "action": event.get("Action", "?"),
                    "exitCode": attributes.get("exitCode"),
                }
            )
        return found

    def logs(self, service: str, tail: int = 40) -> str:
        return self.compose("logs", "--no-color", "--tail", str(tail), service, check=False)

    def down(self) -> None:
        self.compose("down", "-v", "--remove-orphans", "--timeout", "10", timeout=300, check=False)
        shutil.rmtree(self._folder, ignore_errors=True)
