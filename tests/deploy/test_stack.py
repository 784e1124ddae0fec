"""The deployment check, run: the compose stack built, scaled, used and redeployed.

bench/deploy.py does the work (its docstring lists every step): the image built once,
`--scale api=3 --scale worker=2`, tenant → upload → grant → measure → answer through
the published port, a rolling restart of every worker then a recreate of them all
during one AIM job (the job succeeds with `attempts` still 1), PostgreSQL restarted
under traffic (2xx or 503 only, no connection error), and every api replica recreated
under traffic (2xx only); and a Parquet lake registered by reference and counted by
the local engine. It takes about five minutes. The second test brings the stack up with
profile `spark` and has the lake counted through Spark Connect (about five minutes more,
plus the first build of the Spark image and of privq's with the Spark client).

It skips only where no container engine answers (CI without Docker); it never starts
one. With an engine but no `docker compose` plugin it fails and says how to get it.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        f"privq_bench_{name}", REPO / "bench" / f"{name}.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_compose_stack_survives_a_redeploy() -> None:
    deploy = load("deploy")  # puts bench/ on sys.path for its deploy_stack
    problem = deploy.engine_problem()
    if problem is not None:
        pytest.skip(problem)
    figures = deploy.run_check()
    print(json.dumps(figures, indent=1))
    assert figures["failures"] == []
    assert figures["aim_status"] == "succeeded" and figures["aim_attempts"] == 1
    assert all(restart["attempts"] == 1 for restart in figures["worker_restarts"])
    assert len(figures["worker_restarts"]) == 2  # every worker of --scale worker=2
    assert figures["workers_recreated"]["attempts"] == 1
    outcomes = figures["pg"]["outcomes"]
    assert set(outcomes) <= {"200", "503"}, outcomes
    assert figures["pg"]["measurement_after"] == "succeeded"
    assert set(figures["api_redeploy"]["outcomes"]) == {"200"}, figures["api_redeploy"]
    # The lake mounted at /srv/lake, registered by reference and counted by the local engine.
    assert figures["lake"]["engine"] == "local" and figures["lake"]["register_s"] > 0


def test_a_registered_source_is_counted_through_spark_in_the_stack() -> None:
    deploy = load("deploy")
    problem = deploy.engine_problem()
    if problem is not None:
        pytest.skip(problem)
    figures = deploy.run_check(spark=True, lake_only=True)
    print(json.dumps(figures, indent=1))
    assert figures["failures"] == []
    spark = [name for name in figures["containers"] if "-spark-" in name]
    assert len(spark) == 4  # the master, two workers and the Connect server, all healthy
    assert all(figures["containers"][name]["health"] == "healthy" for name in spark)
    lake = figures["lake"]
    assert lake["engine"] == "spark" and lake["spark_workers_cpu_s"] >= 1
    assert lake["marginals_measured"] == 12 and lake["aim_rounds"]
