"""The cancel attack, tried against a running privq: a selection learnt for free?

The attack: a one-round MWEM over a tiny marginal (4 cells) and a huge one (~300,000
cells), cancelled as soon as it runs. If a cancel could refund a round whose selection
had already scored the true marginals, the time from cancel to finish (a huge draw
takes seconds, a tiny one milliseconds) would tell the tenant which marginal the
mechanism chose, for nothing.

This starts `privq serve` on a scratch SQLite file (`--backend postgres`: scratch
database and a separate worker), then for each of `--runs` runs submits the job,
waits until a worker runs it, waits a random 0–`--jitter-ms`, cancels, and waits for
the end. From the service's own database (the operator's view) it reads what each job
recorded at the gate. Prints one JSON line:

- runs where a selection ran (an access recorded): how many, and how many of them
  stay charged for it (must be all);
- fully refunded runs: how many, and how many of them recorded any access (must be
  none: their timing cannot depend on a selection that never ran), with their cancel →
  finish times beside those of runs that drew;
- which marginal the drawn runs measured.

    .venv/bin/python bench/cancel_attack.py [--runs 20] [--backend sqlite|postgres]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from datetime import datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent))
from scale_service import Api, Service  # the sibling bench's processes

WIDE = 548  # 548 × 548 = 300,304 cells
UNITS_PER_RHO = 10**12


def attack_table(path: Path) -> dict[str, Any]:
    schema = {
        "attributes": [
            {"name": "s", "type": "categorical", "values": ["a", "b"]},
            {"name": "t", "type": "categorical", "values": ["a", "b"]},
            {"name": "x", "type": "categorical", "values": [f"x{i}" for i in range(WIDE)]},
            {"name": "y", "type": "categorical", "values": [f"y{i}" for i in range(WIDE)]},
        ]
    }
    rows = ["s,t,x,y"]
    rng = random.Random(7)
    for _ in range(5000):
        rows.append(
            f"{rng.choice('ab')},{rng.choice('ab')},x{rng.randrange(WIDE)},y{rng.randrange(WIDE)}"
        )
    path.write_text("\n".join(rows) + "\n")
    return schema


def seconds_between(start: str, end: str) -> float:
    def parse(value: str) -> datetime:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))

    return (parse(end) - parse(start)).total_seconds()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--rho", type=float, default=0.01)
    parser.add_argument("--jitter-ms", type=float, default=30.0)
    parser.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--port", type=int, default=8471)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="privq-cancel-"))
    service = Service(args.backend, workdir, args.port, workers=1)
    try:
        service.wait_ready()
        api = Api(service)
        schema = attack_table(workdir / "attack.csv")
        dataset = api.upload("attack", workdir / "attack.csv", schema, args.rho * args.runs + 1)
        runs = []
        rng = random.Random()
        for _ in range(args.runs):
            job_id = api.submit(
                dataset,
                "/mechanisms/mwem",
                {"rho": args.rho, "rounds": 1, "workload": [["s", "t"], ["x", "y"]]},
            )
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if api.tenant.get(f"/v1/jobs/{job_id}").json()["status"] != "queued":
                    break
                time.sleep(0.002)
            time.sleep(rng.uniform(0, args.jitter_ms) / 1000)
            api.tenant.post(f"/v1/jobs/{job_id}/cancel")
            while True:
                job = api.tenant.get(f"/v1/jobs/{job_id}").json()
                if job["status"] in ("succeeded", "failed", "cancelled"):
                    break
                time.sleep(0.01)
            runs.append(job)

        engine = create_engine(service.database_url)
        with engine.connect() as connection:
            results = []
            for job in runs:
                accesses = connection.execute(
                    text("SELECT exact_rho FROM record_accesses WHERE job_id = :j"),
                    {"j": job["id"]},
                ).all()
                kept = connection.execute(
                    text(
                        "SELECT COALESCE(SUM(rho_units), 0) FROM ledger_entries WHERE job_id = :j"
                    ),
                    {"j": job["id"]},
                ).scalar_one()
                measured = connection.execute(
                    text("SELECT attributes FROM measurements WHERE job_id = :j"),
                    {"j": job["id"]},
                ).all()
                accessed = sum((Fraction(row[0]) for row in accesses), Fraction(0))
                results.append(
                    {
                        "status": job["status"],
                        "accessed": accessed,
                        "kept": Fraction(int(kept), UNITS_PER_RHO),
                        "cancel_to_finish": seconds_between(
                            job["cancel_requested_at"], job["finished_at"]
                        )
                        if job.get("cancel_requested_at") and job.get("finished_at")
                        else None,
                        "measured": [
                            json.loads(r[0]) if isinstance(r[0], str) else r[0] for r in measured
                        ],
                    }
                )
        engine.dispose()
    finally:
        service.stop()

    selected = [r for r in results if r["accessed"] > 0]
    refunded = [r for r in results if r["kept"] == 0]
    drawn_times = [r["cancel_to_finish"] for r in selected if r["cancel_to_finish"] is not None]
    refunded_times = [r["cancel_to_finish"] for r in refunded if r["cancel_to_finish"] is not None]
    chosen: dict[str, int] = {}
    for r in selected:
        for attrs in r["measured"]:
            key = "+".join(attrs)
            chosen[key] = chosen.get(key, 0) + 1

    def summary(values: list[float]) -> dict[str, float | None]:
        return {
            "median_s": round(statistics.median(values), 4) if values else None,
            "max_s": round(max(values), 4) if values else None,
        }

    print(
        json.dumps(
            {
                "bench": "cancel_attack",
                "backend": args.backend,
                "runs": len(results),
                "statuses": {
                    s: sum(r["status"] == s for r in results)
                    for s in sorted({r["status"] for r in results})
                },
                "selection_ran": len(selected),
                "selection_ran_and_charged_for_it": sum(
                    r["kept"] >= r["accessed"] for r in selected
                ),
                "fully_refunded": len(refunded),
                "fully_refunded_with_an_access": sum(r["accessed"] > 0 for r in refunded),
                "cancel_to_finish_drawn": summary(drawn_times),
                "cancel_to_finish_refunded": summary(refunded_times),
                "chosen_marginals": chosen,
            }
        )
    )


if __name__ == "__main__":
    main()
