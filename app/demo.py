"""`privq demo`: the whole loop on the Adult data, through the HTTP API, in one process.

A throw-away SQLite database, the API called in-process, and a worker run between
steps: create a tenant, upload Adult, grant ρ, measure one-way and a few two-way
marginals, wait for the model, then ask marginals, counts, a factored query and
synthetic rows for free — and show that the budget only moved for the measurement.
"""

from __future__ import annotations

import json
import secrets
import tempfile
from pathlib import Path
from typing import Any

from pydantic import SecretStr

from app.config import Settings
from app.errors import LedgerInvariantViolated

TWO_WAY = [
    ["age", "income>50K"],
    ["education-num", "occupation"],
    ["sex", "relationship"],
    ["marital-status", "relationship"],
    ["occupation", "income>50K"],
]


def default_data_dir() -> Path:
    return Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _show(title: str, payload: Any) -> None:
    text = json.dumps(payload, indent=None, default=str)
    print(f"\n== {title}\n{text[:600]}{' …' if len(text) > 600 else ''}")


def run_demo(data_dir: Path, rho: float = 1.0) -> int:
    import warnings

    warnings.filterwarnings("ignore", message=".*httpx.*", category=DeprecationWarning)
    from fastapi.testclient import TestClient

    from app.api import create_app
    from app.db import Database
    from app.migrations import upgrade_to_head
    from app.worker import Worker

    csv_path, domain_path = data_dir / "adult.csv", data_dir / "adult-domain.json"
    if not csv_path.exists() or not domain_path.exists():
        print(f"privq demo: {csv_path} and {domain_path} are needed (use --data-dir)")
        return 2
    with tempfile.TemporaryDirectory(prefix="privq-demo-") as tmp:
        url = f"sqlite:///{tmp}/demo.db"
        upgrade_to_head(url)
        # A fresh key each run: a key written in the source would be everyone's.
        admin_key = secrets.token_urlsafe(32)
        settings = Settings(
            database_url=url,
            admin_key=SecretStr(admin_key),
            env="development",
            workers_in_process=0,
            auto_migrate=False,
            log_level="WARNING",
        )
        database = Database.from_settings(settings)
        admin = {"Authorization": f"Bearer {admin_key}"}
        with TestClient(create_app(settings, database=database)) as client:
            tenant = client.post("/v1/tenants", json={"name": "demo-analyst"}, headers=admin).json()
            analyst = {"Authorization": f"Bearer {tenant['api_key']}"}
            with csv_path.open("rb") as csv_file:
                dataset = client.post(
                    "/v1/datasets",
                    headers=admin,
                    data={"name": "adult", "schema": domain_path.read_text()},
                    files={"file": ("adult.csv", csv_file, "text/csv")},
                ).json()
            _show("curator uploaded Adult", {k: dataset[k] for k in ("id", "name", "rows")})
            base = f"/v1/datasets/{dataset['id']}"
            client.post(
                f"{base}/grants", json={"tenant_id": tenant["id"], "rho": rho}, headers=admin
            )
            _show("analyst's budget", client.get(f"{base}/budget", headers=analyst).json())

            one_way = [[name] for name in json.loads(domain_path.read_text())]
            accepted = client.post(
                f"{base}/measurements",
                headers=analyst,
                json={"marginals": one_way + TWO_WAY, "noise": "gaussian", "rho": rho / 2},
            ).json()
            _show("measurement job accepted (ρ charged now)", accepted)
            Worker(database, settings, poll_seconds=0.05).run_until_idle()
            _show("job", client.get(f"/v1/jobs/{accepted['job_id']}", headers=analyst).json())
            _show("model", client.get(f"{base}/model", headers=analyst).json())

            spent_before = client.get(f"{base}/budget", headers=analyst).json()["rho_spent"]
            _show(
                "marginal sex × income>50K (free)",
                client.get(
                    f"{base}/marginals", params={"attrs": "sex,income>50K"}, headers=analyst
                ).json(),
            )
            _show(
                "count of income>50K = 1 and age 30..45 (free)",
                client.get(
                    f"{base}/count",
                    params=[("where", "income>50K:1"), ("where", "age:30..45")],
                    headers=analyst,
                ).json(),
            )
            _show(
                "factored query: CDF of hours-per-week by sex (free)",
                client.post(
                    f"{base}/queries",
                    headers=analyst,
                    json={"queries": [{"by": {"sex": "value", "hours-per-week": "cdf"}}]},
                ).json(),
            )
            synthetic = client.get(
                f"{base}/synthetic", params={"rows": 5, "seed": 1}, headers=analyst
            )
            print("\n== 5 synthetic records (free)\n" + synthetic.text.strip())
            spent_after = client.get(f"{base}/budget", headers=analyst).json()
            _show("budget after the free queries (unchanged)", spent_after)
            if spent_after["rho_spent"] != spent_before:  # free answers never charge
                raise LedgerInvariantViolated("a free answer moved the budget in the demo")
        database.dispose()
    return 0
