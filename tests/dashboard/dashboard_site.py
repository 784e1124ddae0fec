"""A running privq with two tenants' worth of history, and a headless Chromium to view it.

- `seeded_site(folder)`: `privq serve` (SQLite, embedded worker; `tests/client/
  privq_service.py`) with seven columns of the Adult extract in `tests/data` uploaded
  twice: "adult" (6,000 rows), granted to alice and bob, and "bob-private" (1,000
  rows), granted to bob only. Alice measures two
  jobs' worth of marginals on "adult" and tries to cancel a third (a refund when it
  was still queued); bob measures on both datasets. Everything through the public API.
- `chromium()`: Debian's `/usr/bin/chromium` driven by Playwright (never a browser
  Playwright downloads), or a skip naming what is missing.
"""

from __future__ import annotations

import csv
import importlib.util
import io
import json
import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
import pytest

TESTS = Path(__file__).resolve().parents[1]
DATA = TESTS / "data"
ADMIN_KEY = "dashboard-admin-key-0123456789abcdef"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
JOB_SECONDS = 60.0


def _service_module() -> ModuleType:
    """tests/client/privq_service.py, loaded by path (tests/client is not a package)."""
    name = "dashboard_privq_service"
    if name in sys.modules:
        return sys.modules[name]
    path = TESTS / "client" / "privq_service.py"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


@dataclass
class Site:
    url: str
    admin_key: str
    tenants: dict[str, dict[str, Any]] = field(default_factory=dict)  # name → {id, api_key}
    datasets: dict[str, str] = field(default_factory=dict)  # name → id
    jobs: dict[str, list[str]] = field(default_factory=dict)  # tenant name → job ids

    def http(self, key: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {key or self.admin_key}"}
        return httpx.Client(base_url=self.url, headers=headers, timeout=30)

    def key(self, tenant: str) -> str:
        return str(self.tenants[tenant]["api_key"])


def wait_for_job(http: httpx.Client, job_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + JOB_SECONDS
    while time.monotonic() < deadline:
        job: dict[str, Any] = http.get(f"/v1/jobs/{job_id}").raise_for_status().json()
        if job["status"] not in ("queued", "running"):
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} did not finish in {JOB_SECONDS} s")


def measure(http: httpx.Client, dataset_id: str, marginals: list[list[str]], rho: float) -> str:
    body = {"marginals": marginals, "noise": "gaussian", "rho": rho}
    response = http.post(f"/v1/datasets/{dataset_id}/measurements", json=body)
    return str(response.raise_for_status().json()["job_id"])


# The dashboard needs a model with a few measured sets and some attributes nothing
# measured, not all 14 attributes of the extract: fewer and smaller ones fit faster.
COLUMNS = ("age", "workclass", "education-num", "marital-status", "race", "sex", "income>50K")


def _extract(rows: int) -> tuple[bytes, str]:
    """The first `rows` records of tests/data/adult.csv over COLUMNS, and their schema."""
    sizes = json.loads((DATA / "adult-domain.json").read_text())
    with open(DATA / "adult.csv", newline="") as source:
        reader = csv.DictReader(source)
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=COLUMNS, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        for _, record in zip(range(rows), reader, strict=False):
            writer.writerow(record)
    return out.getvalue().encode(), json.dumps({name: sizes[name] for name in COLUMNS})


def _upload(admin: httpx.Client, name: str, rows: int, rho_total: float) -> str:
    table, schema = _extract(rows)
    response = admin.post(
        "/v1/datasets",
        files={"file": ("adult.csv", table, "text/csv")},
        data={"schema": schema, "name": name, "rho_total": str(rho_total)},
    )
    return str(response.raise_for_status().json()["id"])


def seed(site: Site) -> None:
    with site.http() as admin:
        for name in ("alice", "bob"):
            made = admin.post("/v1/tenants", json={"name": name}).raise_for_status().json()
            site.tenants[name] = {"id": made["id"], "api_key": made["api_key"]}
        site.datasets["adult"] = _upload(admin, "adult", 6000, 2.0)
        site.datasets["bob-private"] = _upload(admin, "bob-private", 1000, 1.0)
        grants = [("adult", "alice", 1.0), ("adult", "bob", 0.5), ("bob-private", "bob", 0.4)]
        for dataset, tenant, rho in grants:
            admin.post(
                f"/v1/datasets/{site.datasets[dataset]}/grants",
                json={"tenant_id": site.tenants[tenant]["id"], "rho": rho},
            ).raise_for_status()
    adult = site.datasets["adult"]
    with site.http(site.key("alice")) as alice:
        first = measure(alice, adult, [["age", "sex"], ["sex", "income>50K"]], 0.2)
        second = measure(alice, adult, [["education-num", "income>50K"]], 0.1)
        third = measure(alice, adult, [["race"]], 0.05)
        # Refunded whole if the worker had not claimed it yet; otherwise it just runs.
        alice.post(f"/v1/jobs/{third}/cancel")
        site.jobs["alice"] = [first, second, third]
        for job_id in site.jobs["alice"]:
            wait_for_job(alice, job_id)
    with site.http(site.key("bob")) as bob:
        site.jobs["bob"] = [
            measure(bob, adult, [["workclass", "race"]], 0.05),
            measure(bob, site.datasets["bob-private"], [["marital-status"]], 0.1),
        ]
        for job_id in site.jobs["bob"]:
            wait_for_job(bob, job_id)


@contextmanager
def seeded_site(folder: Path) -> Iterator[Site]:
    service_module = _service_module()
    url = f"sqlite:///{folder / 'privq.db'}"
    with service_module.running_service("sqlite", url, folder, ADMIN_KEY) as service:
        site = Site(url=service.url, admin_key=service.admin_key)
        seed(site)
        yield site


def browser_unavailable() -> str | None:
    """Why no browser test can run here, or None if one can."""
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (pip install -e '.[test]')"
    if not CHROMIUM.exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)"
    return None


@contextmanager
def chromium() -> Iterator[Any]:
    reason = browser_unavailable()
    if reason is not None:
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def screenshot_folder(default: Path) -> Path:
    """Where the views' screenshots go: `PRIVQ_DASHBOARD_SCREENSHOTS` (e.g. docs/images,
    to refresh the documentation's pictures) or a temporary folder."""
    chosen = os.environ.get("PRIVQ_DASHBOARD_SCREENSHOTS")
    folder = Path(chosen) if chosen else default
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def as_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True)
