"""The deployment files: compose scales behind one port, secrets stay out, image runs non-root.

`docker compose config` validates the compose file where a compose CLI exists; the
image is built only where a Docker engine answers. Everywhere, the files are read
and checked for what the scale-out layout relies on.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yml"
SECRETS = {
    "POSTGRES_PASSWORD": "pw-test-0123456789abcdef",
    "PRIVQ_ADMIN_KEY": "admin-test-0123456789abcdefghijklmnopqrstuv",
}


def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())  # type: ignore[no-any-return]


def compose_cli() -> list[str] | None:
    """`docker compose` (v2) if present, else `docker-compose`, else None."""
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_api_replicas_share_one_published_port() -> None:
    services = compose()["services"]
    assert {"postgres", "migrate", "api", "worker", "proxy"} <= services.keys()
    # Replicas cannot each bind a host port: only the proxy publishes one.
    published = [name for name, service in services.items() if service.get("ports")]
    assert published == ["proxy"]
    caddyfile = (REPO / "deploy" / "Caddyfile").read_text()
    assert re.search(r"dynamic a api 8000", caddyfile)
    mount = services["proxy"]["volumes"][0]
    assert mount.startswith("./deploy/Caddyfile:")


def test_migrations_run_once_before_api_and_workers() -> None:
    services = compose()["services"]
    migrate = services["migrate"]
    assert migrate["command"] == ["privq", "migrate"] and migrate["restart"] == "no"
    for name in ("api", "worker"):
        assert services[name]["depends_on"]["migrate"]["condition"] == (
            "service_completed_successfully"
        )
        assert services[name]["environment"]["PRIVQ_AUTO_MIGRATE"] == "false"


def test_healthchecks_use_readyz() -> None:
    services = compose()["services"]
    assert "/readyz" in " ".join(services["api"]["healthcheck"]["test"])
    assert services["proxy"]["depends_on"]["api"]["condition"] == "service_healthy"
    assert "/readyz" in (REPO / "Dockerfile").read_text()


def test_worker_metrics_are_reachable_from_the_compose_network_only() -> None:
    # The metrics port binds 127.0.0.1 by default, which Prometheus in another container
    # cannot reach: a worker that exposes its metrics port must bind all its interfaces.
    worker = compose()["services"]["worker"]
    command = worker["command"]
    port = command[command.index("--metrics-port") + 1]
    assert command[command.index("--metrics-host") + 1] == "0.0.0.0"
    assert worker["expose"] == [port] and not worker.get("ports")


def test_no_secret_is_written_in_the_compose_file() -> None:
    text = COMPOSE.read_text()
    services = compose()["services"]
    assert "${POSTGRES_PASSWORD:?" in services["postgres"]["environment"]["POSTGRES_PASSWORD"]
    assert services["api"]["environment"]["PRIVQ_ADMIN_KEY"].startswith("${PRIVQ_ADMIN_KEY:?")
    assert not re.search(r"postgresql://\w+:\w+@", text)  # no literal password in a URL
    example = (REPO / "deploy" / "privq.env.example").read_text()
    assert re.search(r"^POSTGRES_PASSWORD=$", example, re.MULTILINE)
    assert re.search(r"^PRIVQ_ADMIN_KEY=$", example, re.MULTILINE)
    ignored = (REPO / ".gitignore").read_text().split()
    assert ".env" in ignored


def test_image_is_small_and_runs_as_a_non_root_user() -> None:
    dockerfile = (REPO / "Dockerfile").read_text()
    assert len(re.findall(r"^FROM ", dockerfile, re.MULTILINE)) == 2  # build stage + runtime
    assert "COPY --from=build" in dockerfile
    users = re.findall(r"^USER (\S+)", dockerfile, re.MULTILINE)
    assert users and users[-1] not in ("root", "0")
    ignored = (REPO / ".dockerignore").read_text().split()
    for entry in (".git", ".venv", "tests", "*.db", ".env"):
        assert entry in ignored, entry


def test_compose_config_validates_where_a_compose_cli_exists(tmp_path) -> None:
    cli = compose_cli()
    if cli is None:
        pytest.skip("no docker compose / docker-compose on this machine")
    env_file = tmp_path / "test.env"
    env_file.write_text("".join(f"{k}={v}\n" for k, v in SECRETS.items()))
    compose_file = COMPOSE
    if cli == ["docker-compose"]:
        # Compose v1 predates the top-level `name`; everything else it checks the same.
        compose_file = tmp_path / "docker-compose.yml"
        compose_file.write_text(re.sub(r"^name: .*\n", "", COMPOSE.read_text(), flags=re.M))
    result = subprocess.run(
        [
            *cli,
            "-f",
            str(compose_file),
            "--project-directory",
            str(REPO),
            "--env-file",
            str(env_file),
            "config",
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    rendered = yaml.safe_load(result.stdout)
    url = rendered["services"]["api"]["environment"]["PRIVQ_DATABASE_URL"]
    assert url == f"postgresql://privq:{SECRETS['POSTGRES_PASSWORD']}@postgres:5432/privq"
    # Without the secrets the file refuses to render.
    missing = subprocess.run(
        [*cli, "-f", str(compose_file), "--project-directory", str(tmp_path), "config"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin:/usr/local/bin"},
    )
    assert missing.returncode != 0


def test_image_builds_where_a_docker_engine_answers() -> None:
    if shutil.which("docker") is None:
        pytest.skip("no docker CLI")
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        pytest.skip("no Docker engine answers on this machine")
    result = subprocess.run(
        ["docker", "build", "-q", "-t", "privq:test", str(REPO)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    user = subprocess.run(
        ["docker", "run", "--rm", "--entrypoint", "id", "privq:test", "-u"],
        capture_output=True,
        text=True,
    )
    assert user.stdout.strip() == "10001"
