"""Deployment check: docker-compose.yml built, scaled, used and redeployed under load.

    .venv/bin/python bench/deploy.py [--spark] [--lake-only] [--keep]

Needs a container engine with the compose v2 plugin (on machines without a registry:
../shared/tools/containers/setup.sh, whose stand-in base images are then used through
deploy/compose.standin.yml). In a compose project of its own (its own secrets, a free
port on 127.0.0.1, image privq:deploy-check) it:

1. builds the image once (`migrate`'s build) and brings the stack up with
   `--scale api=3 --scale worker=2`; checks every api and worker container runs that
   one image, is healthy by its role's check, has a memory cap and rotated logs and
   no volume, and that the one published port listens on 127.0.0.1 only;
2. walks tenant → upload (tests/data: 6,000 rows of Adult) → grant → measure →
   answer through the published port;
3. starts an AIM job and restarts every worker in turn while it runs (the worker
   holding the job first), each with `docker restart` and the service's grace period,
   then recreates both at once (`up -d --force-recreate worker`, as a redeploy does):
   the job must succeed with `attempts` still 1;
2b. writes a generated Parquet lake (200,000 rows, a unit column) into the folder the
   stack mounts at /srv/lake, registers it by reference, grants it, measures every
   one-way marginal and four pairs, runs AIM and answers (bench/deploy_lake.py),
   counted by the local engine, or with `--spark` by profile `spark` of the compose file
   (a Spark master, two Spark workers, a Spark Connect server) that the workers count
   through; `--lake-only` stops after this step;
4. restarts PostgreSQL under 4 clients of free answers and budget reads: every
   answer must be a 2xx, or a 503 while the database is away — no other 5xx and no
   connection error — and a measurement afterwards must succeed;
5. recreates every api replica under the same traffic (`up -d --force-recreate api`,
   a redeploy): every answer must be a 2xx.

Prints one JSON line of figures (and `failures`) with the command and the build (commit,
image sizes); exit status 1 if anything failed. `--keep` leaves the stack running and
prints how to reach and remove it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from deploy_lake import lake_step
from deploy_stack import (
    REPO,
    Stack,
    compose_problem,
    engine_problem,
    needs_standins,
    run,
)

DATA = REPO / "tests" / "data"
HEX64 = re.compile(r"^[0-9a-f]{64}$")
MEASURE = {"marginals": [["age", "sex"], ["sex", "income>50K"]], "noise": "gaussian", "rho": 0.05}
# Every pair of Adult's eight attributes with small domains: tens of rounds, each
# a fit of a small model: the job runs long enough for three handovers, not much more.
SMALL = [
    "workclass",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "income>50K",
]
AIM = {"rho": 0.5, "workload": [[a, b] for i, a in enumerate(SMALL) for b in SMALL[i + 1 :]]}


class Http:
    """Requests through the published port, every outcome counted."""

    def __init__(self, base_url: str) -> None:
        self.client = httpx.Client(base_url=base_url, timeout=120)
        self.outcomes: Counter[str] = Counter()

    def call(self, method: str, path: str, expect: int, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self.client.request(method, path, **kwargs)
        except httpx.TransportError as error:
            self.outcomes["connection_error"] += 1
            raise RuntimeError(f"{method} {path}: {type(error).__name__}: {error}") from None
        self.outcomes[str(response.status_code)] += 1
        if response.status_code != expect:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text[:300]}")
        return response.json() if response.content else {}  # type: ignore[no-any-return]


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def wait_job(
    http: Http, job_id: str, headers: dict[str, str], timeout: float = 600
) -> dict[str, Any]:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        job = http.call("GET", f"/v1/jobs/{job_id}", 200, headers=headers)
        if job["status"] not in ("queued", "running"):
            return job
        time.sleep(0.5)
    raise RuntimeError(f"job {job_id} not finished after {timeout:.0f} s")


def check_containers(stack: Stack, failures: list[str]) -> dict[str, Any]:
    migrate = stack.containers("migrate")
    image = stack.inspect(migrate[0])["Image"] if migrate else None
    seen: dict[str, Any] = {}
    for service in ("api", "worker", "postgres", "proxy", *stack.spark_services):
        for container in stack.containers(service):
            info = stack.inspect(container)
            name = info["Name"].lstrip("/")
            host = info["HostConfig"]
            if service in ("api", "worker") and info["Image"] != image:
                failures.append(f"{name} runs another image than migrate built")
            if service in ("api", "worker") and not host.get("Init"):
                failures.append(f"{name} runs privq as process 1 (no init)")
            # No anonymous volume (an image's VOLUME): one would be left per container.
            anonymous = [
                m for m in info["Mounts"] if m["Type"] == "volume" and HEX64.match(m["Name"])
            ]
            # privq's containers mount the curator's lake, read-only, and nothing else.
            mounts = [(m["Destination"], m["RW"]) for m in info["Mounts"]]
            if anonymous or (mounts != [("/srv/lake", False)] and service in ("api", "worker")):
                failures.append(f"{name} mounts {mounts}")
            if not host.get("Memory"):
                failures.append(f"{name} has no memory limit")
            log = host["LogConfig"]
            if log["Type"] != "json-file" or "max-size" not in log.get("Config", {}):
                failures.append(f"{name} logs are not rotated: {log}")
            seen[name] = {
                "health": stack.health(container),
                "memory_mb": host["Memory"] // 2**20,
                "stop_timeout_s": info["Config"].get("StopTimeout"),
            }
    bindings = stack.inspect(stack.containers("proxy")[0])["HostConfig"]["PortBindings"]
    hosts = sorted({b["HostIp"] for entries in bindings.values() for b in entries})
    if hosts != ["127.0.0.1"]:
        failures.append(f"the proxy publishes on {hosts}, not 127.0.0.1 only")
    return {"image_built_once": bool(image), "published_on": hosts, "containers": seen}


def walk(http: Http, admin: dict[str, str]) -> tuple[dict[str, Any], str, dict[str, str]]:
    """tenant → upload → grant → measure → answer; returns figures, dataset id, tenant auth."""
    started = time.monotonic()
    tenant = http.call("POST", "/v1/tenants", 201, json={"name": "deploy-check"}, headers=admin)
    auth = bearer(tenant["api_key"])
    dataset = http.call(
        "POST",
        "/v1/datasets",
        201,
        data={"name": "adult-6k", "schema": (DATA / "adult-domain.json").read_text()},
        files={"file": ("adult.csv", (DATA / "adult.csv").read_bytes(), "text/csv")},
        headers=admin,
    )
    grant = {"tenant_id": tenant["id"], "rho": 2}
    http.call("POST", f"/v1/datasets/{dataset['id']}/grants", 201, json=grant, headers=admin)
    job = http.call(
        "POST", f"/v1/datasets/{dataset['id']}/measurements", 202, json=MEASURE, headers=auth
    )
    done = wait_job(http, job["job_id"], auth)
    if done["status"] != "succeeded":
        raise RuntimeError(f"the measurement job ended {done['status']}: {done['error']}")
    marginal = http.call(
        "GET",
        f"/v1/datasets/{dataset['id']}/marginals",
        200,
        params={"attrs": "sex,income>50K"},
        headers=auth,
    )
    if len(marginal["counts"]) != 4:
        raise RuntimeError(f"a 2×2 marginal has {len(marginal['counts'])} counts")
    return (
        {"walk_s": round(time.monotonic() - started, 1), "rows": dataset["rows"]},
        dataset["id"],
        auth,
    )


def lease_owner(stack: Stack, job_id: str) -> str:
    """The job's lease owner (`hostname:pid:nonce`, hostname = container id), or ''."""
    return stack.psql(f"select coalesce(lease_owner, '') from jobs where id = '{job_id}'")


def wait_handed_over(
    stack: Stack, http: Http, job_id: str, auth: dict[str, str], previous: str
) -> dict[str, Any]:
    """The job once it runs again under a new lease (or has ended)."""
    while True:
        job = http.call("GET", f"/v1/jobs/{job_id}", 200, headers=auth)
        if job["status"] not in ("queued", "running"):
            return job
        owner = lease_owner(stack, job_id)
        if job["status"] == "running" and owner and owner != previous:
            return job
        time.sleep(0.2)


def rolling_restart(
    stack: Stack, http: Http, dataset_id: str, auth: dict[str, str], failures: list[str]
) -> dict[str, Any]:
    """Restart every worker in turn during one AIM job; the job keeps its one attempt.

    Each restart waits for a round done since the last one, then restarts the worker
    holding the job if it is still to be restarted (else the next one in line).
    """
    started = time.monotonic()
    job_id = http.call(
        "POST", f"/v1/datasets/{dataset_id}/mechanisms/aim", 202, json=AIM, headers=auth
    )["job_id"]
    restarts: list[dict[str, Any]] = []
    pending = stack.containers("worker")
    rounds_seen = -1
    while pending:
        job = http.call("GET", f"/v1/jobs/{job_id}", 200, headers=auth)
        rounds = int((job.get("progress") or {}).get("rounds_done", -1))
        if job["status"] not in ("queued", "running"):
            failures.append(
                f"the AIM job ended before every worker was restarted ({len(pending)} left)"
            )
            break
        if job["status"] != "running" or rounds <= rounds_seen:
            time.sleep(0.3)
            continue
        owner = lease_owner(stack, job_id)
        held_by = stack.container_of_hostname(owner.split(":")[0]) if owner else None
        target = held_by if held_by in pending else pending[0]
        pending.remove(target)
        began = time.monotonic()
        # `docker restart` stops with the service's stop_grace_period (its StopTimeout).
        run(["docker", "restart", target], timeout=300)
        restarted_s = time.monotonic() - began
        job = wait_handed_over(stack, http, job_id, auth, owner)
        restarts.append(
            {
                "held_the_job": target == held_by,
                "at_round": rounds,
                "restart_s": round(restarted_s, 1),
                "running_again_after_s": round(time.monotonic() - began, 1),
                "attempts": job["attempts"],
            }
        )
        rounds_seen = rounds
    recreated = recreate_workers(stack, http, job_id, auth, rounds_seen, failures)
    done = wait_job(http, job_id, auth)
    if done["status"] != "succeeded":
        failures.append(f"the AIM job ended {done['status']}: {done['error']}")
    if done["attempts"] != 1:
        failures.append(f"the AIM job used {done['attempts']} attempts, not 1")
    if not any(r["held_the_job"] for r in restarts):
        failures.append("no restart hit the worker holding the AIM job")
    stack.wait_healthy(["worker"])
    return {
        "aim_job_s": round(time.monotonic() - started, 1),
        "aim_status": done["status"],
        "aim_attempts": done["attempts"],
        "aim_rounds": (done.get("progress") or {}).get("rounds_done"),
        "worker_restarts": restarts,
        "workers_recreated": recreated,
    }


def recreate_workers(
    stack: Stack,
    http: Http,
    job_id: str,
    auth: dict[str, str],
    rounds_seen: int,
    failures: list[str],
) -> dict[str, Any] | None:
    """A redeploy of the workers (`up -d --force-recreate`: all stop at once) mid-job."""
    while True:
        job = http.call("GET", f"/v1/jobs/{job_id}", 200, headers=auth)
        if job["status"] not in ("queued", "running"):
            failures.append("the AIM job ended before the workers were recreated")
            return None
        if int((job.get("progress") or {}).get("rounds_done", -1)) > rounds_seen:
            break
        time.sleep(0.3)
    owner = lease_owner(stack, job_id)
    at_round = (job.get("progress") or {}).get("rounds_done")
    since = int(time.time())
    began = time.monotonic()
    stack.compose(
        "up", "-d", "--no-deps", "--force-recreate", "--scale", "worker=2", "worker", timeout=300
    )
    recreated_s = time.monotonic() - began
    job = wait_handed_over(stack, http, job_id, auth, owner)
    # How each old worker ended: 0, a clean stop; 143, SIGTERM before its handler was set
    # (still starting: it held no job); 137, killed at the end of the stop grace period.
    ended = stack.events(since, ("die",))
    if any(event.get("exitCode") not in ("0", "143") for event in ended):
        failures.append(f"a worker did not stop cleanly when recreated: {ended}")
    return {
        "at_round": at_round,
        "recreate_s": round(recreated_s, 1),
        "running_again_after_s": round(time.monotonic() - began, 1),
        "attempts": job["attempts"],
        "stopped": ended,
    }


class Traffic:
    """Clients reading free answers and the budget through the proxy, every outcome
    counted (a status code, or `connection_error:<kind>` when no answer came)."""

    def __init__(self, stack: Stack, dataset_id: str, auth: dict[str, str], clients: int = 4):
        self.stack, self.auth = stack, auth
        self.outcomes: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.paths = [
            (f"/v1/datasets/{dataset_id}/marginals", {"attrs": "age,sex"}),
            (f"/v1/datasets/{dataset_id}/budget", {}),
            (f"/v1/datasets/{dataset_id}/count", {}),
        ]
        self.threads = [threading.Thread(target=self._client, daemon=True) for _ in range(clients)]

    def _client(self) -> None:
        with httpx.Client(base_url=self.stack.base_url, timeout=60, headers=self.auth) as session:
            index = 0
            while not self.stop.is_set():
                path, params = self.paths[index % len(self.paths)]
                index += 1
                try:
                    status = str(session.get(path, params=params).status_code)
                except httpx.TransportError as error:
                    status = f"connection_error:{type(error).__name__}"
                with self.lock:
                    self.outcomes[status] += 1
                time.sleep(0.02)

    def __enter__(self) -> Traffic:
        for thread in self.threads:
            thread.start()
        time.sleep(3)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=70)

    def count(self, status: str) -> int:
        with self.lock:
            return self.outcomes[status]

    def settled_after(self, began: float, status: str, timeout: float = 120) -> float | None:
        """Seconds from `began` until 3 s pass with no answer of `status`; None on timeout."""
        while time.monotonic() - began < timeout:
            before = self.count(status)
            time.sleep(3)
            if self.count(status) == before:
                return round(time.monotonic() - began - 3, 1)
        return None

    def report(self, allowed: set[str], what: str, failures: list[str]) -> dict[str, Any]:
        bad = {k: v for k, v in self.outcomes.items() if not (k.startswith("2") or k in allowed)}
        if bad:
            failures.append(f"during {what}: {bad}")
        return {
            "requests": sum(self.outcomes.values()),
            "outcomes": dict(sorted(self.outcomes.items())),
        }


def postgres_restart(
    stack: Stack, http: Http, dataset_id: str, auth: dict[str, str], failures: list[str]
) -> dict[str, Any]:
    """Restart PostgreSQL under read traffic: 2xx or 503 only, never a broken connection."""
    with Traffic(stack, dataset_id, auth) as traffic:
        began = time.monotonic()
        stack.compose("restart", "postgres", timeout=180)
        restarted_s = time.monotonic() - began
        healthy_s = stack.wait_healthy(["postgres"])
        recovered_s = traffic.settled_after(began, "503")
    figures = traffic.report({"503"}, "the PostgreSQL restart", failures)
    if recovered_s is None:
        failures.append("503s went on for 2 minutes after PostgreSQL restarted")
    job = http.call(
        "POST", f"/v1/datasets/{dataset_id}/measurements", 202, json=MEASURE, headers=auth
    )
    after = wait_job(http, job["job_id"], auth)
    if after["status"] != "succeeded":
        failures.append(f"a measurement after the restart ended {after['status']}")
    return {
        "pg_restart_s": round(restarted_s, 1),
        "pg_healthy_after_s": round(healthy_s, 1),
        "answers_recovered_after_s": recovered_s,
        **figures,
        "measurement_after": after["status"],
    }


def api_redeploy(
    stack: Stack, dataset_id: str, auth: dict[str, str], failures: list[str]
) -> dict[str, Any]:
    """Recreate every api replica under read traffic (a redeploy): every answer a 2xx."""
    with Traffic(stack, dataset_id, auth) as traffic:
        began = time.monotonic()
        stack.compose(
            "up", "-d", "--no-deps", "--force-recreate", "--scale", "api=3", "api", timeout=300
        )
        recreated_s = time.monotonic() - began
        healthy_s = stack.wait_healthy(["api"])
        time.sleep(5)
    return {
        "recreate_s": round(recreated_s, 1),
        "healthy_after_s": round(time.monotonic() - began - 5, 1),
        "replicas_healthy_s": round(healthy_s, 1),
        **traffic.report(set(), "the api redeploy", failures),
    }


def run_check(
    *, keep: bool = False, spark: bool = False, lake_only: bool = False
) -> dict[str, Any]:
    problem = engine_problem() or compose_problem()
    if problem is not None:
        raise RuntimeError(problem)
    standins = needs_standins()
    stack = Stack(standins=standins, spark=spark)
    failures: list[str] = []
    figures: dict[str, Any] = {"project": stack.project, "standin_images": standins}
    try:
        began = time.monotonic()
        stack.compose("build", timeout=1800)
        figures["build_s"] = round(time.monotonic() - began, 1)
        figures["build"] = stack.build_figures()
        began = time.monotonic()
        if spark:  # the JVMs first: started beside privq's processes, both starve on 2 cores
            stack.compose("up", "-d", *stack.spark_services, timeout=900)
            figures["spark_up_s"] = round(stack.wait_healthy(stack.spark_services, 600), 1)
        api = "api=1" if lake_only else "api=3"  # the replicas matter to the redeploys only
        stack.compose("up", "-d", "--scale", api, "--scale", "worker=2", timeout=600)
        stack.wait_healthy(["api", "worker", "postgres", *stack.spark_services])
        figures["up_s"] = round(time.monotonic() - began, 1)
        figures.update(check_containers(stack, failures))
        http = Http(stack.base_url)
        walked, dataset_id, auth = walk(http, bearer(stack.admin_key))
        figures.update(walked)
        spark_cpu = (lambda: stack.cpu_seconds("spark-worker")) if spark else None
        admin = bearer(stack.admin_key)
        figures["lake"] = lake_step(http, admin, stack.lake, stack.engine, spark_cpu, failures)
        if not lake_only:
            figures.update(rolling_restart(stack, http, dataset_id, auth, failures))
            figures["pg"] = postgres_restart(stack, http, dataset_id, auth, failures)
            figures["api_redeploy"] = api_redeploy(stack, dataset_id, auth, failures)
        figures["walk_outcomes"] = dict(sorted(http.outcomes.items()))
        if any(not k.startswith("2") for k in http.outcomes):
            failures.append(f"requests of the walk failed: {dict(http.outcomes)}")
    except Exception as error:
        failures.append(f"{type(error).__name__}: {error}")
        for service in ("api", "worker", "migrate", *stack.spark_services):
            figures.setdefault("logs", {})[service] = stack.logs(service)[-3000:]
    finally:
        if keep:
            figures["kept"] = f"{stack.base_url} (docker compose -p {stack.project} down -v)"
        else:
            stack.down()
    figures["failures"] = failures
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", action="store_true", help="leave the stack running")
    parser.add_argument("--spark", action="store_true", help="count the lake with Spark")
    parser.add_argument("--lake-only", action="store_true", help="stop after the lake step")
    args = parser.parse_args()
    figures = run_check(keep=args.keep, spark=args.spark, lake_only=args.lake_only)
    figures["command"] = " ".join(["python", "bench/deploy.py", *sys.argv[1:]])
    print(json.dumps(figures))
    return 1 if figures["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
