"""The dashboard's static files: the page, its script and styles, and the vendored charts.

`GET /dashboard` (`app.api.routers.dashboard`) serves `index.html` and every other
file of this folder under `/dashboard/assets/`. The files ship inside the package (the
wheel's package data), so the page works with no internet. Only the files found here
when the module is imported are served: a request names one of them or gets 404, so
no path can reach outside the folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from importlib.resources.abc import Traversable

URL = "/dashboard"
ASSETS_URL = f"{URL}/assets"
PAGE = "index.html"

MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".md": "text/markdown; charset=utf-8",
    ".svg": "image/svg+xml",
}
# Licences are plain text files without a suffix (LICENSE-vega).
PLAIN_TEXT = "text/plain; charset=utf-8"

# What the page may load and talk to: only this service. No inline script and no
# eval (Vega's expressions run in vega-interpreter); charts set styles from script.
CONTENT_SECURITY_POLICY = "; ".join(
    (
        "default-src 'none'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
)


@dataclass(frozen=True)
class Asset:
    body: bytes
    media_type: str


def _media_type(name: str) -> str:
    suffix = name[name.rfind(".") :] if "." in name else ""
    return MEDIA_TYPES.get(suffix, PLAIN_TEXT)


def _walk(folder: Traversable, prefix: str) -> dict[str, Traversable]:
    found: dict[str, Traversable] = {}
    for entry in folder.iterdir():
        if entry.name.startswith((".", "_")):
            continue  # __init__.py, __pycache__, editor files
        if entry.is_dir():
            found.update(_walk(entry, f"{prefix}{entry.name}/"))
        else:
            found[f"{prefix}{entry.name}"] = entry
    return found


@cache
def _catalogue() -> dict[str, Traversable]:
    return _walk(files(__name__), "")


def asset_names() -> list[str]:
    """Every file the dashboard serves, as paths relative to this folder."""
    return sorted(_catalogue())


def asset(name: str) -> Asset | None:
    """The file `name` (a path relative to this folder), or None if there is none."""
    if name not in _catalogue():
        return None  # not remembered: any name may be asked for
    return _read(name)


@cache
def _read(name: str) -> Asset:
    return Asset(_catalogue()[name].read_bytes(), _media_type(name))
