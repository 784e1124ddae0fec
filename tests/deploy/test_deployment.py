"""The deployment files, read: what the compose stack and the image rely on.

Compose scales behind one port bound to localhost (TLS by an override), secrets stay
out, one build feeds every service, health checks fit each role, logs rotate, limits
and stop grace periods are set, base images are pinned and dependencies locked. `docker
compose config` validates the files where a compose CLI exists, and the image is built
where a container engine answers; tests/deploy/test_stack.py runs the stack itself.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from app.config import Settings

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import deploy_stack  # noqa: E402  (bench/deploy_stack.py: the docker CLI, as the check uses it)

COMPOSE = REPO / "docker-compose.yml"
DOCKERFILE = REPO / "Dockerfile"
LOCK = REPO / "deploy" / "requirements.lock"
SECRETS = {
    "POSTGRES_PASSWORD": "pw-test-0123456789abcdef",
    "PRIVQ_ADMIN_KEY": "admin-test-0123456789abcdefghijklmnopqrstuv",
}
PRIVQ_SERVICES = ("migrate", "api", "worker")
DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


def compose(path: Path = COMPOSE) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())  # type: ignore[no-any-return]


def seconds(duration: str) -> float:
    """A compose duration ("90s", "1m30s") in seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", duration)
    assert parts and "".join(n + u for n, u in parts) == duration, duration
    return sum(float(n) * units[u] for n, u in parts)


def instructions(dockerfile: str) -> list[tuple[str, str]]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n(\s*#[^\n]*\n)*", " ", dockerfile)
    found = []
    for line in joined.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            keyword, _, rest = line.strip().partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def test_api_replicas_share_one_published_port_on_localhost() -> None:
    services = compose()["services"]
    assert {"postgres", "migrate", "api", "worker", "proxy"} <= services.keys()
    # Replicas cannot each bind a host port: only the proxy publishes one.
    published = [name for name, service in services.items() if service.get("ports")]
    assert published == ["proxy"]
    # Plain HTTP on the loopback interface unless the operator says otherwise.
    assert services["proxy"]["ports"] == [
        "${PRIVQ_HTTP_BIND:-127.0.0.1}:${PRIVQ_HTTP_PORT:-8000}:8000"
    ]
    caddyfile = (REPO / "deploy" / "Caddyfile").read_text()
    assert re.search(r"dynamic a api 8000", caddyfile)
    # While every replica is recreated (a redeploy) the proxy waits instead of a 502.
    wait = re.search(r"^\s*lb_try_duration (\S+)$", caddyfile, re.M)
    assert wait is not None and seconds(wait.group(1)) >= 30
    mount = services["proxy"]["volumes"][0]
    assert mount.startswith("./deploy/Caddyfile:")


def test_tls_is_one_override_away() -> None:
    # The site block serves PRIVQ_DOMAIN (automatic HTTPS) when it is set, :8000 always.
    caddyfile = (REPO / "deploy" / "Caddyfile").read_text()
    assert re.search(r"^\{\$PRIVQ_DOMAIN\} :8000 \{$", caddyfile, re.M)
    assert "auto_https off" not in caddyfile
    proxy = compose(REPO / "deploy" / "compose.tls.yml")["services"]["proxy"]
    assert proxy["environment"]["PRIVQ_DOMAIN"].startswith("${PRIVQ_DOMAIN:?")
    assert {"80:80", "443:443"} <= set(proxy["ports"])
    # Certificates survive a recreate: Caddy's /data is a named volume.
    assert "caddy-data:/data" in compose()["services"]["proxy"]["volumes"]


def test_migrations_run_once_before_api_and_workers() -> None:
    services = compose()["services"]
    migrate = services["migrate"]
    assert migrate["command"] == ["privq", "migrate"] and migrate["restart"] == "no"
    for name in ("api", "worker"):
        assert services[name]["depends_on"]["migrate"]["condition"] == (
            "service_completed_successfully"
        )
        assert services[name]["environment"]["PRIVQ_AUTO_MIGRATE"] == "false"


def test_one_build_feeds_every_privq_service() -> None:
    services = compose()["services"]
    builders = [name for name, service in services.items() if "build" in service]
    # migrate builds privq's image; spark-master the Spark image of profile `spark`
    # (tests/deploy/test_spark_deployment.py), which holds no privq code.
    assert builders == ["migrate", "spark-master"]
    assert services["migrate"]["build"]["context"] == "."
    version = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.M)
    assert version is not None
    images = {services[name]["image"] for name in PRIVQ_SERVICES}
    assert images == {f"privq:${{PRIVQ_VERSION:-{version.group(1)}}}"}
    # The others run what migrate built, never an image of that name from a registry.
    for name in ("api", "worker"):
        assert services[name]["pull_policy"] == "never"


def test_privq_is_never_process_1() -> None:
    # Process 1 ignores a signal it has no handler for yet: a SIGTERM during start-up
    # would be lost and the container killed at the end of its grace period.
    services = compose()["services"]
    for name in PRIVQ_SERVICES:
        assert services[name]["init"] is True, name


def test_healthchecks_fit_each_role() -> None:
    services = compose()["services"]
    probe = ["CMD", "python", "/opt/privq/healthcheck.py"]
    assert services["api"]["healthcheck"]["test"] == [*probe, "api"]
    assert services["worker"]["healthcheck"]["test"] == [*probe, "worker"]
    assert "--metrics-port" in services["worker"]["command"]  # what the worker check probes
    assert services["proxy"]["depends_on"]["api"]["condition"] == "service_healthy"
    healthcheck = (REPO / "deploy" / "healthcheck.py").read_text()
    assert "/readyz" in healthcheck and "/metrics" in healthcheck
    steps = instructions(DOCKERFILE.read_text())
    assert ("COPY", "deploy/healthcheck.py /opt/privq/healthcheck.py") in steps
    checks = [rest for keyword, rest in steps if keyword == "HEALTHCHECK"]
    assert len(checks) == 1 and checks[0].endswith('CMD ["python", "/opt/privq/healthcheck.py"]')


def test_logs_rotate_and_every_container_is_capped() -> None:
    for name, service in compose()["services"].items():
        logging = service["logging"]
        assert logging["driver"] == "json-file", name
        assert {"max-size", "max-file"} <= logging["options"].keys(), name
        limits = service["deploy"]["resources"]["limits"]
        assert limits.get("memory") and limits.get("cpus"), name


def test_stop_grace_periods_cover_a_safe_point_and_a_drain() -> None:
    services = compose()["services"]
    fields = Settings.model_fields
    worker_grace = float(
        services["worker"]["environment"].get(
            "PRIVQ_WORKER_STOP_GRACE_SECONDS", fields["worker_stop_grace_seconds"].default
        )
    )
    # Docker's SIGKILL comes only after the worker's own deadline, with time to give back.
    assert seconds(services["worker"]["stop_grace_period"]) >= worker_grace + 15
    api_grace = float(fields["api_shutdown_grace_seconds"].default)
    assert seconds(services["api"]["stop_grace_period"]) >= api_grace + 5
    # Caddy drops idle connections to a replica before the replica would.
    caddyfile = (REPO / "deploy" / "Caddyfile").read_text()
    keepalive = re.search(r"^\s*keepalive (\S+)$", caddyfile, re.M)
    assert keepalive is not None
    assert seconds(keepalive.group(1)) < fields["api_keep_alive_seconds"].default


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
    for name in PRIVQ_SERVICES:
        assert services[name]["environment"]["PRIVQ_ADMIN_KEY"].startswith("${PRIVQ_ADMIN_KEY:?")
    assert not re.search(r"postgresql://\w+:\w+@", text)  # no literal password in a URL
    example = (REPO / "deploy" / "privq.env.example").read_text()
    assert re.search(r"^POSTGRES_PASSWORD=$", example, re.MULTILINE)
    assert re.search(r"^PRIVQ_ADMIN_KEY=$", example, re.MULTILINE)
    ignored = (REPO / ".gitignore").read_text().split()
    assert ".env" in ignored


def test_base_images_are_pinned_by_digest() -> None:
    dockerfile = DOCKERFILE.read_text()
    arg = re.search(r"^ARG PYTHON_IMAGE=(\S+)$", dockerfile, re.M)
    assert arg is not None and DIGEST.search(arg.group(1)), "pin the Python base by digest"
    stages: list[str] = []
    for keyword, rest in instructions(dockerfile):
        if keyword == "FROM":
            base, _, name = rest.partition(" AS ")
            assert base == "${PYTHON_IMAGE}" or base in stages, base
            stages.append(name.strip())
    services = compose()["services"]
    for name in ("postgres", "proxy"):
        assert DIGEST.search(services[name]["image"]), name
    # The stand-in override (machines without a registry) is the only place tags alone are used.
    standin = compose(REPO / "deploy" / "compose.standin.yml")["services"]
    assert standin["migrate"]["build"]["args"]["PYTHON_IMAGE"] == "python:3.11-slim"


def test_the_image_installs_the_lock_before_anything_else() -> None:
    steps = instructions(DOCKERFILE.read_text())
    install = next(i for i, (k, rest) in enumerate(steps) if "--require-hashes" in rest)
    assert "-r /tmp/requirements.lock" in steps[install][1]
    copies = [rest for keyword, rest in steps[:install] if keyword in ("COPY", "ADD")]
    # Only the lock feeds the dependency layer: README.md, docs or code never invalidate it.
    assert copies == ["deploy/requirements.lock /tmp/requirements.lock"]
    later = " ".join(rest for keyword, rest in steps[install:] if keyword == "COPY")
    assert "README.md" in later  # pyproject.toml's readme, in the small privq layer
    assert not any(keyword == "VOLUME" for keyword, _ in steps)
    assert "--no-build-isolation" in " ".join(rest for _, rest in steps)


def test_the_lock_pins_every_dependency_with_hashes() -> None:
    import tomllib

    text = LOCK.read_text()
    assert "sh deploy/lock.sh" in text.split("\n\n")[0]  # how to regenerate it
    pinned: dict[str, str] = {}
    for entry in re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 6)[-1]):
        match = re.match(r"([A-Za-z0-9_.-]+)==([^\s;\\]+)", entry)
        if match:
            assert "--hash=sha256:" in entry, match.group(1)
            pinned[canonicalize_name(match.group(1))] = match.group(2)
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    wanted = [*project["project"]["dependencies"], *project["build-system"]["requires"]]
    for line in wanted:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in pinned, f"{name} is not in deploy/requirements.lock: sh deploy/lock.sh"
        assert requirement.specifier.contains(pinned[name], prereleases=True), (
            f"{name}=={pinned[name]} in the lock does not satisfy {requirement.specifier}"
        )


def test_image_is_small_and_runs_as_a_non_root_user() -> None:
    steps = instructions(DOCKERFILE.read_text())
    froms = [rest for keyword, rest in steps if keyword == "FROM"]
    assert froms[-1] == "${PYTHON_IMAGE}"  # the runtime starts from the clean base
    runtime = steps[max(i for i, (k, _) in enumerate(steps) if k == "FROM") :]
    assert any(k == "COPY" and rest.startswith("--from=") for k, rest in runtime)
    users = [rest for keyword, rest in runtime if keyword == "USER"]
    assert users and users[-1] not in ("root", "0")
    lines = (REPO / ".dockerignore").read_text().splitlines()
    ignored = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    # An allow-list: everything is left out but what is named.
    assert ignored[0] == "*" and "!app" in ignored
    assert not any(entry in ignored for entry in ("!tests", "!.git", "!.venv", "!docs"))
    for entry in ("**/*.db", "**/.env", "**/*.env"):
        assert entry in ignored, entry


def compose_cli_or_skip() -> list[str]:
    problem = deploy_stack.engine_problem()
    try:
        deploy_stack.run(["docker", "compose", "version"], timeout=30)
    except (RuntimeError, OSError, subprocess.TimeoutExpired):
        pytest.skip(f"no docker compose v2 CLI on this machine ({problem or 'plugin missing'})")
    return ["docker", "compose"]


@pytest.mark.parametrize(
    "overrides",
    [[], ["deploy/compose.tls.yml"], ["deploy/compose.standin.yml"]],
    ids=["default", "tls", "standin"],
)
def test_compose_config_validates_where_a_compose_cli_exists(
    tmp_path: Path, overrides: list[str]
) -> None:
    cli = compose_cli_or_skip()
    env_file = tmp_path / "test.env"
    env_file.write_text(
        "".join(f"{k}={v}\n" for k, v in SECRETS.items()) + "PRIVQ_DOMAIN=privq.example.org\n"
    )
    files = ["-f", str(COMPOSE)] + [x for o in overrides for x in ("-f", str(REPO / o))]
    args = [*cli, *files, "--project-directory", str(REPO), "--env-file", str(env_file)]
    rendered = yaml.safe_load(deploy_stack.run([*args, "config"], timeout=60))
    url = rendered["services"]["api"]["environment"]["PRIVQ_DATABASE_URL"]
    assert url == f"postgresql://privq:{SECRETS['POSTGRES_PASSWORD']}@postgres:5432/privq"
    ports = {p["published"]: p.get("host_ip") for p in rendered["services"]["proxy"]["ports"]}
    assert ports["8000"] == "127.0.0.1"
    if overrides == ["deploy/compose.tls.yml"]:
        assert {"80", "443"} <= ports.keys()
        assert rendered["services"]["proxy"]["environment"]["PRIVQ_DOMAIN"] == "privq.example.org"
    # Without the secrets the file refuses to render.
    empty = tmp_path / "empty.env"
    empty.write_text("")
    with pytest.raises(RuntimeError):
        deploy_stack.run(
            [*cli, *files, "--project-directory", str(REPO), "--env-file", str(empty), "config"],
            timeout=60,
        )


def test_image_builds_where_a_container_engine_answers() -> None:
    problem = deploy_stack.engine_problem()
    if problem is not None:
        pytest.skip(problem)
    command = ["docker", "build", "-q", "-t", "privq:deploy-test"]
    if deploy_stack.needs_standins():  # no registry here: the local stand-in base image
        command += ["--network", "host", "--build-arg", "PYTHON_IMAGE=python:3.11-slim"]
    deploy_stack.run([*command, str(REPO)], timeout=1800)
    user = deploy_stack.run(
        ["docker", "run", "--rm", "--entrypoint", "id", "privq:deploy-test", "-u"], timeout=120
    )
    assert user.strip() == "10001"
    inspected = deploy_stack.run(
        ["docker", "image", "inspect", "--format", "{{json .Config.Volumes}}", "privq:deploy-test"]
    )
    assert inspected.strip() == "null"  # no VOLUME: no anonymous volume per container
