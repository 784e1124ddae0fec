"""The dashboard in a real browser: headless Debian Chromium against a real `privq serve`.

Signed in as the admin and as a tenant, every number the page shows is checked
against what the API answers the same key; the charts are drawn (Vega renders SVG);
the marginal explorer shows the model's counts and error bounds; a tenant's page
never holds another tenant's datasets, jobs or ledger lines; a job submitted while the
page is open appears and finishes without a reload. Every request the browser makes,
in every test, goes to the service on 127.0.0.1, and the page logs no error but the
API refusals it handles (a CSP violation would be one).

Screenshots of each view go to a temporary folder, or to `PRIVQ_DASHBOARD_SCREENSHOTS`
(`docs/images` refreshes the documentation's pictures).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from dashboard_site import Site, chromium, measure, screenshot_folder, seeded_site, wait_for_job

VIEWPORT = {"width": 1366, "height": 900}
VIEW_TIMEOUT_MS = 20_000


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:  # skips, naming what is missing, where none can run
        yield launched


@pytest.fixture(scope="module")
def site(browser: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with seeded_site(tmp_path_factory.mktemp("dashboard")) as running:
        yield running


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return screenshot_folder(tmp_path_factory.mktemp("screenshots"))


@dataclass
class Watched:
    """A page and everything it asked for and complained about."""

    page: Any
    requests: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def assert_clean(self) -> None:
        hosts = {urlsplit(url).hostname for url in self.requests if not url.startswith("data:")}
        assert hosts == {"127.0.0.1"}, sorted(self.requests)
        assert self.problems == []


@pytest.fixture
def watched(browser: Any) -> Iterator[Watched]:
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.set_default_timeout(VIEW_TIMEOUT_MS)
    seen = Watched(page)
    page.on("request", lambda request: seen.requests.append(request.url))

    def on_console(message: Any) -> None:
        # An API refusal the page handles (a tenant key's 403 on /v1/tenants, 404 before
        # a model) is logged by Chromium as a failed load: not a problem of the page.
        if message.type == "error" and not message.text.startswith("Failed to load resource"):
            seen.problems.append(f"console: {message.text}")

    page.on("console", on_console)
    page.on("pageerror", lambda error: seen.problems.append(f"page error: {error}"))
    try:
        yield seen
        seen.assert_clean()
    finally:
        context.close()


# ---- helpers -------------------------------------------------------------------------


def sign_in(page: Any, site: Site, key: str) -> None:
    page.goto(f"{site.url}/dashboard")
    page.get_by_label("API key").fill(key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_selector('body[data-ready="overview"]')


def open_dataset(page: Any, name: str) -> None:
    page.get_by_role("link", name=name, exact=True).click()
    page.wait_for_selector('body[data-ready="dataset"]')


def table_rows(page: Any, selector: str, key: str) -> dict[str, list[str]]:
    """Each body row's cell texts, by the row's `data-<key>` attribute."""
    rows: list[list[str]] = page.eval_on_selector_all(
        f"{selector} tbody tr[data-{key}]",
        f"""rows => rows.map(row => [row.dataset.{camel(key)},
                ...[...row.cells].map(cell => cell.textContent.trim())])""",
    )
    return {row[0]: row[1:] for row in rows}


def camel(name: str) -> str:
    head, *rest = name.split("-")
    return head + "".join(part.title() for part in rest)


def number(text: str) -> float:
    return float(text.replace(",", ""))


def same(text: str, value: float) -> bool:
    """The page's rounded number (6 significant digits) is the API's value."""
    return number(text) == pytest.approx(value, rel=1e-5, abs=1e-12)


def get(site: Site, key: str | None, path: str, **params: Any) -> Any:
    with site.http(key) as http:
        return http.get(path, params=params).raise_for_status().json()


def model_version(site: Site, key: str | None, dataset_id: str) -> str:
    with site.http(key) as http:
        response = http.get(f"/v1/datasets/{dataset_id}/model")
    return str(response.json()["version"]) if response.status_code == 200 else "none"


def wait_drawn(page: Any, chart: str) -> None:
    page.wait_for_selector(f"#{chart}[data-drawn] svg")


# ---- the admin ----------------------------------------------------------------------


def test_the_admin_sees_every_dataset_with_the_apis_numbers(
    watched: Watched, site: Site, shots: Path
) -> None:
    page = watched.page
    sign_in(page, site, site.admin_key)
    assert page.locator("#who").inner_text() == "Signed in as the admin"
    shown = table_rows(page, "#datasets-table", "dataset-id")
    datasets = get(site, None, "/v1/datasets")
    assert set(shown) == {dataset["id"] for dataset in datasets} == set(site.datasets.values())
    for dataset in datasets:
        name, rows, rho_total, granted, spent, version, records = shown[dataset["id"]]
        grants = get(site, None, f"/v1/datasets/{dataset['id']}/grants")
        assert name == dataset["name"]
        assert number(rows) == dataset["rows"]
        assert same(rho_total, dataset["rho_total"])
        assert same(granted, sum(grant["rho_limit"] for grant in grants))
        assert same(spent, sum(grant["rho_spent"] for grant in grants))
        assert version == model_version(site, None, dataset["id"])
        assert records == "kept"
    wait_drawn(page, "overview-budget-chart")
    page.screenshot(path=shots / "dashboard-admin-overview.png", full_page=True)


def test_the_admin_opens_a_dataset_its_grants_ledger_jobs_and_measured_sets(
    watched: Watched, site: Site, shots: Path
) -> None:
    page = watched.page
    dataset_id = site.datasets["adult"]
    sign_in(page, site, site.admin_key)
    open_dataset(page, "adult")
    assert page.get_by_role("heading", level=2).inner_text() == "adult"

    names = {tenant["id"]: tenant["name"] for tenant in get(site, None, "/v1/tenants")}
    grants = get(site, None, f"/v1/datasets/{dataset_id}/grants")
    shown = table_rows(page, "#budgets-table", "grant-id")
    assert set(shown) == {grant["id"] for grant in grants}
    for grant in grants:
        tenant, limit, spent, remaining, _granted, state = shown[grant["id"]]
        assert tenant == names[grant["tenant_id"]]
        assert same(limit, grant["rho_limit"]) and same(spent, grant["rho_spent"])
        assert same(remaining, grant["rho_remaining"]) and state == "active"
    wait_drawn(page, "budget-chart")

    ledger = get(site, None, f"/v1/datasets/{dataset_id}/ledger")
    wait_drawn(page, "ledger-chart")
    # One line per series (charged, refunded, net spent), each a step through every entry.
    assert page.locator("#ledger-chart svg path[aria-roledescription='line mark']").count() == 3
    lines = table_rows(page, "#ledger-table", "ledger-id")
    assert set(lines) == {str(entry["id"]) for entry in ledger}
    net = float(page.locator("#ledger-caption").get_attribute("data-net"))
    assert net == pytest.approx(sum(entry["rho"] for entry in ledger))
    assert same(
        re.search(r"ρ (\S+) spent net", page.locator("#ledger-caption").inner_text())[1],
        sum(entry["rho"] for entry in ledger),
    )

    jobs = get(site, None, "/v1/jobs", dataset_id=dataset_id)
    shown_jobs = table_rows(page, "#jobs-table", "job-id")
    assert set(shown_jobs) == {job["id"] for job in jobs}
    for job in jobs:
        assert shown_jobs[job["id"]][2] == job["status"]

    model = get(site, None, f"/v1/datasets/{dataset_id}/model")
    attributes = [a["name"] for a in get(site, None, f"/v1/datasets/{dataset_id}")["attributes"]]
    wait_drawn(page, "graph-chart")
    labels = page.locator("#graph-chart svg text").all_text_contents()
    assert set(attributes) <= set(labels)
    measured = {name for m in model["measurements"] for name in m["attributes"]}
    caption = page.locator("#graph-caption").inner_text()
    assert f"Model version {model['version']}" in caption
    unmeasured = re.search(r"Nothing measured (.*): the model", caption)
    assert unmeasured is not None and measured < set(attributes)
    assert set(unmeasured[1].split(", ")) == set(attributes) - measured
    sets = page.locator("#graph-sets li").all_text_contents()
    for m in model["measurements"]:
        assert any(item.startswith(" × ".join(m["attributes"])) for item in sets)
    page.screenshot(path=shots / "dashboard-admin-dataset.png", full_page=True)
    page.locator("#ledger-chart").screenshot(path=shots / "dashboard-ledger.png")
    page.locator("#graph-chart").screenshot(path=shots / "dashboard-graph.png")


# ---- a tenant -----------------------------------------------------------------------


def test_a_tenant_sees_its_budgets_and_jobs(watched: Watched, site: Site, shots: Path) -> None:
    page = watched.page
    key = site.key("alice")
    sign_in(page, site, key)
    assert page.locator("#who").inner_text() == "Signed in as a tenant"
    shown = table_rows(page, "#datasets-table", "dataset-id")
    assert list(shown) == [site.datasets["adult"]]
    budget = get(site, key, f"/v1/datasets/{site.datasets['adult']}/budget")
    name, limit, spent, remaining, epsilon, version, _records = shown[site.datasets["adult"]]
    assert name == "adult"
    assert same(limit, budget["rho_limit"]) and same(spent, budget["rho_spent"])
    assert same(remaining, budget["rho_remaining"]) and same(epsilon, budget["epsilon"])
    assert version == model_version(site, key, site.datasets["adult"])
    jobs = table_rows(page, "#overview-jobs-table", "job-id")
    assert set(jobs) == {job["id"] for job in get(site, key, "/v1/jobs")}
    assert set(jobs) == set(site.jobs["alice"])
    wait_drawn(page, "overview-budget-chart")
    page.screenshot(path=shots / "dashboard-tenant-overview.png", full_page=True)


def explore(page: Any, first: str, second: str | None = None) -> None:
    page.get_by_label("First attribute").select_option(first)
    page.get_by_label("Second attribute (optional)").select_option(second or "")
    page.get_by_role("button", name="Show marginal").click()
    attrs = first if second is None else f"{first},{second}"
    page.wait_for_selector(f'#explorer-chart[data-drawn][data-attrs="{attrs}"] svg')


def explorer_cells(page: Any) -> list[list[str]]:
    rows: list[list[str]] = page.eval_on_selector_all(
        "#explorer-table tbody tr",
        "rows => rows.map(row => [...row.cells].map(cell => cell.textContent.trim()))",
    )
    return rows


def test_a_tenant_explores_marginals_as_bars_and_heat_maps(
    watched: Watched, site: Site, shots: Path
) -> None:
    page = watched.page
    key = site.key("alice")
    dataset_id = site.datasets["adult"]
    sign_in(page, site, key)
    open_dataset(page, "adult")
    # Its own budget on the dataset, as the API gives it.
    budget = get(site, key, f"/v1/datasets/{dataset_id}/budget")
    (row,) = page.eval_on_selector_all(
        "#budgets-table tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
    )
    assert same(row[1], budget["rho_limit"]) and same(row[2], budget["rho_spent"])

    # One attribute: a bar per cell, with error bars where a measurement covers it.
    explore(page, "age")
    marginal = get(site, key, f"/v1/datasets/{dataset_id}/marginals", attrs="age")
    assert marginal["standard_error"] is not None
    bars = page.locator("#explorer-chart svg path[aria-roledescription='bar']")
    assert bars.count() == len(marginal["counts"])
    rules = page.locator("#explorer-chart svg line[aria-roledescription='rule mark']")
    assert rules.count() == len(marginal["counts"])
    cells = explorer_cells(page)
    assert [cell[0] for cell in cells] == [str(v[0]) for v in marginal["values"]]
    for cell, count in zip(cells, marginal["counts"], strict=True):
        assert same(cell[1], count)
        assert same(cell[2], 1.96 * marginal["standard_error"])
    page.locator("#explorer-chart").screenshot(path=shots / "dashboard-marginal-bars.png")
    # A number: its average from POST /queries moments, with its bounds and method.
    ((label, average, bounds),) = page.eval_on_selector_all(
        "#explorer-averages-table tbody tr",
        "rows => rows.map(row => [...row.cells].map(cell => cell.textContent.trim()))",
    )
    weighted = sum(
        int(v[0]) * c for v, c in zip(marginal["values"], marginal["counts"], strict=True)
    )
    expected = weighted / sum(marginal["counts"])
    assert label == "all records" and same(average, expected)
    low, high = bounds.split(" … ")
    assert same(low, expected) and same(high, expected)  # integer codes: exact
    assert "Estimate: exact" in page.locator("#explorer-averages-caption").inner_text()

    # Two attributes: a heat map, one rectangle per cell.
    explore(page, "education-num", "income>50K")
    marginal = get(
        site, key, f"/v1/datasets/{dataset_id}/marginals", attrs="education-num,income>50K"
    )
    rects = page.locator("#explorer-chart svg path[aria-roledescription='rect mark']")
    assert rects.count() == len(marginal["counts"])
    cells = explorer_cells(page)
    assert [cell[:2] for cell in cells] == [[str(a) for a in v] for v in marginal["values"]]
    for cell, count in zip(cells, marginal["counts"], strict=True):
        assert same(cell[2], count)
    assert "Measured by 1 measurement(s)" in page.locator("#explorer-caption").inner_text()
    page.screenshot(path=shots / "dashboard-tenant-dataset.png", full_page=True)
    page.locator("#explorer-chart").screenshot(path=shots / "dashboard-marginal-heatmap.png")

    # A pair nothing measured together: the model's guess, said so, no error bars.
    explore(page, "age", "race")
    assert "No measurement covers" in page.locator("#explorer-caption").inner_text()


def test_a_tenants_page_never_shows_another_tenants_data(watched: Watched, site: Site) -> None:
    page = watched.page
    key = site.key("alice")
    bob = site.tenants["bob"]["id"]
    foreign = [bob, site.datasets["bob-private"], "bob-private", *site.jobs["bob"]]
    sign_in(page, site, key)
    assert not [text for text in foreign if text in page.content()]
    open_dataset(page, "adult")
    wait_drawn(page, "ledger-chart")
    html = page.content()
    assert not [text for text in foreign if text in html]
    own_lines = get(site, key, f"/v1/datasets/{site.datasets['adult']}/ledger")
    assert {entry["tenant_id"] for entry in own_lines} == {site.tenants["alice"]["id"]}
    assert set(table_rows(page, "#ledger-table", "ledger-id")) == {
        str(entry["id"]) for entry in own_lines
    }
    assert set(table_rows(page, "#jobs-table", "job-id")) == set(site.jobs["alice"])
    # Bob's dataset by its address: the API says 404, the page shows nothing of it.
    page.goto(f"{site.url}/dashboard#/datasets/{site.datasets['bob-private']}")
    page.wait_for_selector("#status:has-text('Could not load')")
    assert "bob-private" not in page.content()


def test_a_job_submitted_while_the_page_is_open_shows_up_and_finishes(
    watched: Watched, site: Site
) -> None:
    page = watched.page
    key = site.key("alice")
    dataset_id = site.datasets["adult"]
    sign_in(page, site, key)
    open_dataset(page, "adult")
    lines_before = len(table_rows(page, "#ledger-table", "ledger-id"))
    with site.http(key) as http:
        job_id = measure(http, dataset_id, [["marital-status", "sex"]], 0.02)
        finished = wait_for_job(http, job_id)
    assert finished["status"] == "succeeded"
    # No reload: the jobs poll finds it, and the change re-reads the ledger and model.
    page.wait_for_selector(f'#jobs-table tr[data-job-id="{job_id}"][data-status="succeeded"]')
    # (Polled through selectors: the page's CSP forbids the eval a JS predicate needs.)
    lines = page.locator("#ledger-table tbody tr[data-ledger-id]")
    lines.nth(lines_before).wait_for(state="attached")
    assert lines.count() == lines_before + 1
    page.wait_for_selector(f"#graph-caption:has-text('Model version {finished['model_version']} ')")


def test_the_dashboard_is_used_with_the_keyboard_alone(watched: Watched, site: Site) -> None:
    page = watched.page
    page.goto(f"{site.url}/dashboard")
    # The key field has the focus on arrival; Enter signs in.
    assert page.evaluate("document.activeElement.id") == "api-key"
    page.keyboard.type(site.key("alice"))
    page.keyboard.press("Enter")
    page.wait_for_selector('body[data-ready="overview"]')
    for _ in range(30):  # Tab through the page to the dataset's link, then follow it
        page.keyboard.press("Tab")
        if page.evaluate("document.activeElement.textContent") == "adult":
            break
    assert page.evaluate("document.activeElement.tagName") == "A"
    page.keyboard.press("Enter")
    page.wait_for_selector('body[data-ready="dataset"]')
    # The view's heading takes the focus, so a screen reader announces where it is.
    assert page.evaluate("document.activeElement.id") == "dataset-title"
    page.get_by_label("First attribute").focus()
    page.keyboard.press("End")  # the last attribute
    page.get_by_role("button", name="Show marginal").focus()
    page.keyboard.press("Enter")
    page.wait_for_selector('#explorer-chart[data-drawn][data-attrs="income>50K"] svg')
