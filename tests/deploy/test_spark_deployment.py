"""The Spark part of the deployment files, read: profile `spark` of docker-compose.yml.

A standalone master, two Spark workers and a Spark Connect server run one image built
from deploy/spark/ (Debian's Java, the locked pyspark package, no privq code); the
curator's lake is mounted read-only at one path in every container that reads it; the
privq workers count through the Connect server when PRIVQ_RECORD_ENGINE=spark, in an
image that then carries the Spark client (deploy/requirements-spark.lock). Where a
compose CLI exists the files are rendered, and where a container engine answers the
Spark image is built and asked its versions; bench/deploy.py --spark runs the stack.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import deploy_stack  # noqa: E402  (bench/deploy_stack.py: the docker CLI, as the check uses it)

COMPOSE = REPO / "docker-compose.yml"
SPARK = REPO / "deploy" / "spark"
SPARK_SERVICES = ("spark-master", "spark-worker", "spark-connect")
LAKE_MOUNT = "${PRIVQ_LAKE:-./lake}:/srv/lake:ro"
SECRETS = (
    "POSTGRES_PASSWORD=pw-test-0123456789abcdef\n"
    "PRIVQ_ADMIN_KEY=admin-test-0123456789abcdefghijklmnopqrstuv\n"
)


def services() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())["services"]  # type: ignore[no-any-return]


def default(value: str) -> str:
    """The default of a compose interpolation "${NAME:-default}" (or the value itself)."""
    match = re.fullmatch(r"\$\{\w+:-([^}]*)\}", value)
    return match.group(1) if match else value


def size_mb(value: str) -> float:
    """A memory size ("512m", "2g", "1g") in MiB."""
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([mg])", value.lower())
    assert match is not None, value
    return float(match.group(1)) * (1024 if match.group(2) == "g" else 1)


def pins(lock: Path) -> dict[str, str]:
    """A pip-compile lock's pins (name → version); every pin must carry hashes."""
    found: dict[str, str] = {}
    for entry in re.split(r"\n(?=[A-Za-z0-9])", lock.read_text()):
        match = re.match(r"([A-Za-z0-9_.-]+)==([^\s;\\]+)", entry)
        if match:
            assert "--hash=sha256:" in entry, f"{match.group(1)} has no hash in {lock.name}"
            found[canonicalize_name(match.group(1))] = match.group(2)
    return found


def steps(dockerfile: Path) -> list[tuple[str, str]]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n(\s*#[^\n]*\n)*", " ", dockerfile.read_text())
    found = []
    for line in joined.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            keyword, _, rest = line.strip().partition(" ")
            found.append((keyword.upper(), rest.strip()))
    return found


def test_spark_is_a_profile_off_by_default() -> None:
    found = services()
    assert set(SPARK_SERVICES) <= found.keys()
    for name, service in found.items():
        expected = ["spark"] if name in SPARK_SERVICES else None
        assert service.get("profiles") == expected, name
    # Two Spark workers by default, one core each; no Spark port leaves the compose network.
    worker = found["spark-worker"]
    assert default(str(worker["deploy"]["replicas"])) == "2"
    assert worker["environment"]["SPARK_WORKER_CORES"] == "1"
    assert default(worker["deploy"]["resources"]["limits"]["cpus"]) == "1"
    for name in SPARK_SERVICES:
        assert not found[name].get("ports"), name


def test_one_spark_image_built_once_with_the_locked_spark() -> None:
    found = services()
    master = found["spark-master"]
    assert master["build"]["context"] == "./deploy/spark"
    image = master["image"]
    for name in SPARK_SERVICES:
        assert found[name]["image"] == image, name
        assert (
            found[name]["command"][0]
            == {
                "spark-master": "master",
                "spark-worker": "worker",
                "spark-connect": "connect",
            }[name]
        )
    for name in ("spark-worker", "spark-connect"):
        assert found[name]["pull_policy"] == "never", name
        assert found[name]["depends_on"]["spark-master"]["condition"] == "service_healthy"
    # The tag names the Spark release the lock installs.
    spark = pins(SPARK / "requirements.lock")
    assert image == f"privq-spark:{spark['pyspark']}"
    wanted = [line for line in (SPARK / "requirements.in").read_text().splitlines() if line.strip()]
    for line in (w for w in wanted if not w.startswith("#")):
        requirement = Requirement(line)
        assert requirement.specifier.contains(spark[canonicalize_name(requirement.name)])


def test_the_spark_image_is_java_and_spark_only() -> None:
    found = steps(SPARK / "Dockerfile")
    privq = steps(REPO / "Dockerfile")
    # The same base as privq's image, pinned by the same digest.
    arg = next(rest for keyword, rest in found if keyword == "ARG")
    assert arg == next(rest for keyword, rest in privq if keyword == "ARG")
    assert re.search(r"@sha256:[0-9a-f]{64}$", arg)
    assert [rest for keyword, rest in found if keyword == "FROM"][-1] == "${PYTHON_IMAGE}"
    runs = " ".join(rest for keyword, rest in found if keyword == "RUN")
    assert "openjdk-17-jre-headless" in runs and "--no-install-recommends" in runs
    assert "--require-hashes -r /tmp/requirements.lock" in runs
    # Nothing of privq reaches it: the lock, the built Spark, its log settings, the entrypoint.
    copies = [rest for keyword, rest in found if keyword == "COPY"]
    assert copies == [
        "requirements.lock /tmp/requirements.lock",
        "--from=spark /stage/spark /opt/spark",
        "log4j2.properties /opt/spark/conf/log4j2.properties",
        "entrypoint.sh /opt/spark-entrypoint.sh",
    ]
    env = " ".join(rest for keyword, rest in found if keyword == "ENV")
    assert "SPARK_HOME=/opt/spark" in env and "SPARK_NO_DAEMONIZE=1" in env
    users = [rest for keyword, rest in found if keyword == "USER"]
    assert users == ["10001"]  # privq's uid: one uid reads the lake
    assert not any(keyword == "VOLUME" for keyword, _ in found)
    entrypoint = (SPARK / "entrypoint.sh").read_text()
    for role in ("master)", "worker)", "connect)", "probe"):
        assert role in entrypoint, role
    assert "org.apache.spark.sql.connect.service.SparkConnectServer" in entrypoint
    # Nothing but the Connect server submits applications: no REST submission server.
    assert "-Dspark.master.rest.enabled=false" in entrypoint


def test_the_lake_is_read_only_at_one_path_wherever_it_is_read() -> None:
    found = services()
    # migrate too: the admin CLI (`privq datasets register`) runs in it and lists files.
    for name in ("migrate", "api", "worker", *SPARK_SERVICES):
        assert found[name]["volumes"] == [LAKE_MOUNT], name
    for name in ("postgres", "proxy"):
        assert LAKE_MOUNT not in (found[name].get("volumes") or []), name
    # privq may read what is mounted there, and only that.
    for name in ("migrate", "api", "worker"):
        roots = found[name]["environment"]["PRIVQ_SOURCE_ROOTS"]
        assert default(roots) == "file:///srv/lake/", name


def test_workers_count_through_the_connect_server_when_told() -> None:
    found = services()
    worker = found["worker"]["environment"]
    assert worker["PRIVQ_RECORD_ENGINE"] == "${PRIVQ_RECORD_ENGINE:-local}"
    assert default(worker["PRIVQ_SPARK_REMOTE"]) == "sc://spark-connect:15002"
    assert found["spark-connect"]["expose"] == ["15002"]
    assert "spark.connect.grpc.binding.port=15002" in (SPARK / "entrypoint.sh").read_text()
    # Workers wait for the Connect server when profile `spark` runs it, and not otherwise.
    waits = found["worker"]["depends_on"]["spark-connect"]
    assert waits == {"condition": "service_healthy", "required": False}
    # The image carries the Spark client exactly when it is built for the spark engine.
    args = found["migrate"]["build"]["args"]
    assert args["PRIVQ_RECORD_ENGINE"] == "${PRIVQ_RECORD_ENGINE:-local}"
    dockerfile = steps(REPO / "Dockerfile")
    spark_install = next(
        rest for keyword, rest in dockerfile if keyword == "RUN" and "requirements-spark" in rest
    )
    assert '"$PRIVQ_RECORD_ENGINE" = spark' in spark_install and "--require-hashes" in spark_install
    assert ("ARG", "PRIVQ_RECORD_ENGINE=local") in dockerfile
    assert "!deploy/requirements-spark.lock" in (REPO / ".dockerignore").read_text().split()


def test_spark_memory_fits_the_containers() -> None:
    found = services()
    limits = {name: found[name]["deploy"]["resources"]["limits"] for name in SPARK_SERVICES}
    master = found["spark-master"]["environment"]
    master_cap = size_mb(default(limits["spark-master"]["memory"]))
    assert size_mb(master["SPARK_DAEMON_MEMORY"]) * 2 <= master_cap
    # A worker container holds its daemon and its executor's heap, with room beside them.
    worker = found["spark-worker"]["environment"]
    executor = size_mb(default(worker["SPARK_WORKER_MEMORY"]))
    held = size_mb(worker["SPARK_DAEMON_MEMORY"]) + executor
    assert held * 1.3 <= size_mb(default(limits["spark-worker"]["memory"]))
    # Executors ask no more than a worker offers.
    command = found["spark-connect"]["command"]
    asked = next(c.split("=", 1)[1] for c in command if c.startswith("spark.executor.memory="))
    assert size_mb(default(asked)) <= executor
    driver = size_mb(default(found["spark-connect"]["environment"]["SPARK_DRIVER_MEMORY"]))
    assert driver * 1.5 <= size_mb(default(limits["spark-connect"]["memory"]))


def test_the_spark_client_lock_agrees_with_the_service_lock() -> None:
    service = pins(REPO / "deploy" / "requirements.lock")
    spark = pins(REPO / "deploy" / "requirements-spark.lock")
    assert "sh deploy/lock.sh" in (REPO / "deploy" / "requirements-spark.lock").read_text()[:400]
    shared = service.keys() & spark.keys()
    assert {name for name in shared if service[name] != spark[name]} == set()
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    for line in [*project["dependencies"], *project["optional-dependencies"]["spark"]]:
        requirement = Requirement(line)
        name = canonicalize_name(requirement.name)
        assert name in spark, f"{name} is not in deploy/requirements-spark.lock: sh deploy/lock.sh"
        assert requirement.specifier.contains(spark[name], prereleases=True), name
    # The workers' client is the release the cluster runs.
    assert spark["pyspark"] == pins(SPARK / "requirements.lock")["pyspark"]


def test_compose_renders_the_spark_profile_where_a_compose_cli_exists(tmp_path: Path) -> None:
    try:
        deploy_stack.run(["docker", "compose", "version"], timeout=30)
    except (RuntimeError, OSError, subprocess.TimeoutExpired):
        pytest.skip("no docker compose v2 CLI on this machine")
    env_file = tmp_path / "test.env"
    env_file.write_text(SECRETS + "PRIVQ_LAKE=/data/lake\nPRIVQ_RECORD_ENGINE=spark\n")
    base = ["docker", "compose", "--project-directory", str(REPO), "--env-file", str(env_file)]
    files = ["-f", str(COMPOSE), "-f", str(REPO / "deploy" / "compose.standin.yml")]
    listed = deploy_stack.run([*base, *files, "config", "--services"], timeout=60).split()
    assert not set(SPARK_SERVICES) & set(listed)  # off by default
    rendered = yaml.safe_load(
        deploy_stack.run([*base, *files, "--profile", "spark", "config"], timeout=60)
    )["services"]
    assert set(SPARK_SERVICES) <= rendered.keys()
    build = rendered["spark-master"]["build"]
    assert build["network"] == "host" and build["args"]["PYTHON_IMAGE"] == "python:3.11-slim"
    assert rendered["migrate"]["build"]["args"]["PRIVQ_RECORD_ENGINE"] == "spark"
    for name in ("migrate", "api", "worker", *SPARK_SERVICES):
        (mount,) = rendered[name]["volumes"]
        assert (mount["source"], mount["target"], mount["read_only"]) == (
            "/data/lake",
            "/srv/lake",
            True,
        ), name


def test_spark_image_builds_where_a_container_engine_answers() -> None:
    problem = deploy_stack.engine_problem()
    if problem is not None:
        pytest.skip(problem)
    command = ["docker", "build", "-q", "-t", "privq-spark:deploy-test"]
    if deploy_stack.needs_standins():  # no registry here: the local stand-in base image
        command += ["--network", "host", "--build-arg", "PYTHON_IMAGE=python:3.11-slim"]
    deploy_stack.run([*command, str(SPARK)], timeout=1800)
    probe = ["docker", "run", "--rm", "privq-spark:deploy-test"]
    versions = deploy_stack.run(
        [*probe, "sh", "-c", "spark-submit --version 2>&1; java -version 2>&1; id -u"],
        timeout=300,
    )
    assert f"version {pins(SPARK / 'requirements.lock')['pyspark']}" in versions
    assert 'openjdk version "17.' in versions
    assert versions.strip().splitlines()[-1] == "10001"
    # No privq code on the cluster.
    privq = subprocess.run(
        [*probe, "python3", "-c", "import app.records"],
        capture_output=True,
        text=True,
        timeout=120,
        env=deploy_stack.docker_env(),
    )
    assert privq.returncode != 0 and "No module named 'app'" in privq.stderr
