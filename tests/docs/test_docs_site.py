"""The documentation site: its navigation names pages that exist, and the reference
sections `docs/hooks.py` writes at build time cover every route, setting and metric.

The strict build itself (`mkdocs build --strict`: every link and anchor) runs in
.ci/run; these tests need no MkDocs.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from app import metrics
from app.config import Settings

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def _nav_files(entries: Any) -> Iterator[str]:
    """Every file the nav names, at any depth (`- Title: page.md` or `- page.md`)."""
    if isinstance(entries, str):
        yield entries
    elif isinstance(entries, list):
        for entry in entries:
            yield from _nav_files(entry)
    elif isinstance(entries, dict):
        for value in entries.values():
            yield from _nav_files(value)


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    return loaded


@pytest.fixture(scope="module")
def hooks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("privq_docs_hooks", DOCS / "hooks.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_nav_entry_is_a_page_and_every_page_is_in_the_nav(config: dict[str, Any]) -> None:
    named = list(_nav_files(config["nav"]))
    assert named, "mkdocs.yml has no nav"
    missing = [name for name in named if not (DOCS / name).is_file()]
    assert not missing, f"mkdocs.yml names pages docs/ does not have: {missing}"
    assert len(named) == len(set(named)), "a page is in the nav twice"
    pages = {str(path.relative_to(DOCS)) for path in DOCS.rglob("*.md")}
    assert not pages - set(named), f"pages left out of the nav: {sorted(pages - set(named))}"
    assert [str(hook) for hook in config["hooks"]] == ["docs/hooks.py"]


def test_the_site_is_not_committed() -> None:
    ignored = (ROOT / ".gitignore").read_text(encoding="utf-8").split()
    assert "site/" in ignored


def test_no_page_leans_on_files_outside_the_repository() -> None:
    for path in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        text = path.read_text(encoding="utf-8")
        assert "../shared" not in text, path
        assert "/work/" not in text, path


def test_the_configuration_reference_has_every_setting(hooks: ModuleType) -> None:
    table = hooks.render_settings()
    for name, field in Settings.model_fields.items():
        variable = f"PRIVQ_{name.upper()}"
        assert f"`{variable}`\n:   " in table, f"{variable} missing from the reference"
        assert field.description, f"Settings.{name} has no description for the reference"
    assert "(2 GiB)" in table  # byte sizes are shown readably


def test_the_metrics_reference_has_every_metric(hooks: ModuleType) -> None:
    table = hooks.render_metrics()
    listed = set(re.findall(r"^\| `(privq_[a-z_]+)`", table, re.MULTILINE))
    registered = {
        family.name + ("_total" if family.type == "counter" else "")
        for family in metrics.REGISTRY.collect()
    }
    assert registered <= listed
    # The gauges read from the database at scrape time are listed too.
    assert {"privq_jobs", "privq_job_queue_oldest_age_seconds", "privq_model_cells"} <= listed
    assert "| `privq_http_requests_total` | counter | `method`, `route`, `status` |" in table


def test_the_api_reference_has_every_operation(hooks: ModuleType) -> None:
    document = hooks.openapi_document()
    page = hooks.render_openapi(document)
    for path, item in document["paths"].items():
        for method in hooks.HTTP_METHODS:
            if method in item:
                assert f"### `{method.upper()} {path}`" in page
    assert "`records_purged`" in page and "`unauthorized`" in page  # refusals, with codes
    assert "### `MarginalOut`" in page  # and the response schemas


def test_the_hook_fills_the_markers_and_leaves_other_pages_alone(hooks: ModuleType) -> None:
    page = hooks.on_page_markdown("# Settings\n\n<!-- generated:settings -->\n")
    assert "<!-- generated" not in page and "`PRIVQ_DATABASE_URL`" in page
    assert hooks.on_page_markdown("# Plain\n") == "# Plain\n"
    for marker, page_name in [
        ("openapi", "api.md"),
        ("settings", "configuration.md"),
        ("metrics", "monitoring.md"),
    ]:
        assert hooks.MARKER.format(marker) in (DOCS / page_name).read_text(encoding="utf-8")
