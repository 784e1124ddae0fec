"""GET /dashboard without a browser: the page, its assets from the package, its policy.

The page and every file it loads come from the service (nothing from another host),
scripts only from files (no inline script, no eval), only the dashboard's own files
are served (no path leaves its folder), each vendored build ships with its licence
and is package data of the wheel, and /docs links to the dashboard.
"""

from __future__ import annotations

import ast
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from app.api import dashboard

ROOT = Path(__file__).resolve().parents[2]
EXTERNAL = re.compile(r"(?:https?:)?//", re.IGNORECASE)
MODULE_IMPORT = re.compile(r"""^import .* from "(\./[^"]+)";$""", re.MULTILINE)


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.scripts: list[dict[str, str | None]] = []
        self.inline_scripts = 0
        self.urls: list[str] = []
        self._in_script = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        named = dict(attrs)
        if tag == "script":
            self.scripts.append(named)
            self._in_script = True
        self.urls += [value for name, value in attrs if name in ("src", "href") and value]
        if any(name.startswith("on") for name, _ in attrs):
            self.inline_scripts += 1  # an event handler attribute is inline script too

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False

    def handle_data(self, data: str) -> None:
        if self._in_script and data.strip():
            self.inline_scripts += 1


def parsed(html: str) -> Tags:
    tags = Tags()
    tags.feed(html)
    return tags


def test_the_page_loads_every_script_and_style_from_the_service(client) -> None:
    response = client.get("/dashboard")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    tags = parsed(response.text)
    assert tags.inline_scripts == 0
    sources = [script["src"] for script in tags.scripts]
    assert all(sources), "every script is a file"
    assert any(src.endswith("vendor/vega-lite.min.js") for src in sources)
    for url in tags.urls:
        if url.startswith(("#", "data:")):
            continue
        assert not EXTERNAL.match(url), url
        # Relative to the page (/dashboard): the API and the page share one root.
        fetched = client.get("/" + url)
        assert fetched.status_code == 200, url
        assert len(fetched.content) > 100, url


def test_the_page_forbids_inline_script_eval_and_other_hosts(client) -> None:
    policy = client.get("/dashboard").headers["content-security-policy"]
    directives = {}
    for part in policy.split(";"):
        name, _, value = part.strip().partition(" ")
        directives[name] = value
    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == "'self'"
    assert directives["connect-src"] == "'self'"
    assert "unsafe" not in policy and "http" not in policy


def test_every_module_the_scripts_import_is_served(client) -> None:
    names = dashboard.asset_names()
    scripts = [name for name in names if name.endswith(".js") and "/" not in name]
    assert {"app.js", "api.js", "charts.js"} <= set(scripts)
    for name in scripts:
        response = client.get(f"/dashboard/assets/{name}")
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/javascript")
        assert not re.search(r"https?://", response.text), name
        for imported in MODULE_IMPORT.findall(response.text):
            assert imported[2:] in names, (name, imported)


@pytest.mark.parametrize(
    "path",
    [
        "/dashboard/assets/__init__.py",
        "/dashboard/assets/../__init__.py",
        "/dashboard/assets/%2e%2e/docs.py",
        "/dashboard/assets/vendor/../../schemas.py",
        "/dashboard/assets/no-such.js",
        "/dashboard/assets/",
    ],
)
def test_only_the_dashboards_own_files_are_served(client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_each_vendored_build_ships_with_its_licence() -> None:
    names = dashboard.asset_names()
    builds = [name for name in names if name.startswith("vendor/") and name.endswith(".min.js")]
    assert {"vendor/vega.min.js", "vendor/vega-lite.min.js", "vendor/vega-embed.min.js"} == set(
        builds
    )
    for build in builds:
        package = build.removeprefix("vendor/").removesuffix(".min.js")
        licence = dashboard.asset(f"vendor/LICENSE-{package}")
        assert licence is not None and b"Redistribution" in licence.body, package


def test_the_wheel_carries_every_dashboard_file() -> None:
    """setup.py's package data for app.api.dashboard matches every file of the folder."""
    tree = ast.parse((ROOT / "setup.py").read_text())
    patterns: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "app.api.dashboard":
                    patterns = list(ast.literal_eval(value))
    assert patterns, "setup.py names no package data for app.api.dashboard"
    for name in dashboard.asset_names():
        assert any(glob_match(name, pattern) for pattern in patterns), name


def glob_match(name: str, pattern: str) -> bool:
    """setuptools' glob: `*` stays within one folder."""
    return re.fullmatch(re.escape(pattern).replace(r"\*", "[^/]*"), name) is not None


def test_docs_links_to_the_dashboard(client) -> None:
    tags = parsed(client.get("/docs").text)
    assert "/dashboard" in tags.urls
