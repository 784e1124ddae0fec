"""`privq demo`: the whole loop on a made-up census table, through the HTTP API, in one process.

A throw-away SQLite database, the API called in-process, and a worker run between
steps: create a tenant, upload the example table (`app.census`, the same as
`examples/census.csv`), grant ρ, measure one-way and a few two-way marginals, wait for
the model, then ask marginals, counts, a factored query and synthetic rows for free —
and show that the budget only moved for the measurement.
"""

from __future__ import annotations

import io
import json
import secrets
import tempfile
from typing import Any

from pydantic import SecretStr

from app import census
from app.config import Settings
from app.errors import LedgerInvariantViolated

TWO_WAY = [
    ["age", "income"],
    ["education", "income"],
    ["education", "occupation"],
    ["occupation", "hours_per_week"],
    ["sex", "hours_per_week"],
]


def _show(title: str, payload: Any) -> None:
    text = json.dumps(payload, indent=None, default=str)
    print(f"\n== {title}\n{text[:600]}{' …' if len(text) > 600 else ''}")


def run_demo(rho: float = 1.0) -> int:
    import warnings

    # Starlette nudges TestClient users towards httpx2 (a UserWarning subclass); the demo
    # calls the API in-process with the httpx it ships with, which works.
    warnings.filterwarnings("ignore", message="Using `httpx` with `starlette.testclient`")
    from fastapi.testclient import TestClient

    from app.api import create_app
    from app.db import Database
    from app.migrations import upgrade_to_head
    from app.worker import Worker

    schema = census.schema()
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
            table = io.BytesIO(census.csv_text().encode())
            dataset = client.post(
                "/v1/datasets",
                headers=admin,
                data={"name": "census", "schema": json.dumps(schema)},
                files={"file": ("census.csv", table, "text/csv")},
            ).json()
            _show(
                "curator uploaded the census table", {k: dataset[k] for k in ("id", "name", "rows")}
            )
            base = f"/v1/datasets/{dataset['id']}"
            client.post(
                f"{base}/grants", json={"tenant_id": tenant["id"], "rho": rho}, headers=admin
            )
            _show("analyst's budget", client.get(f"{base}/budget", headers=analyst).json())

            one_way = [[attribute["name"]] for attribute in schema["attributes"]]
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
                "marginal education × income (free)",
                client.get(
                    f"{base}/marginals", params={"attrs": "education,income"}, headers=analyst
                ).json(),
            )
            _show(
                "count of income >50K and age 35..55 (free)",
                client.get(
                    f"{base}/count",
                    params=[("where", "income:>50K"), ("where", "age:35..55")],
                    headers=analyst,
                ).json(),
            )
            _show(
                "factored query: CDF of hours_per_week by sex (free)",
                client.post(
                    f"{base}/queries",
                    headers=analyst,
                    json={"queries": [{"by": {"sex": "value", "hours_per_week": "cdf"}}]},
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
