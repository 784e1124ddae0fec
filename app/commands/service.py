"""Which running service an analyst's command talks to, and how it talks to it (HTTP).

A command finds the service's URL and the tenant's API key, each on its own, in the
first of these that gives it:

1. the flags `--url` and `--key` (a key on the command line is visible to other users
   of the machine in the process list: prefer the next two);
2. the environment: PRIVQ_URL and PRIVQ_KEY;
3. a profile file: `--profile FILE`, else PRIVQ_PROFILE, else
   `$XDG_CONFIG_HOME/privq/profile.toml` (default `~/.config/privq/profile.toml`), else
   `profile.json` beside it. TOML (`url = "…"`, `key = "…"`) or, for a `.json` file, a
   JSON object with the same two fields. Nothing else is read from it.

No URL anywhere: no service (`find_service` gives None), and a command that can also
read the database (`jobs`, `sql`) does so; the others say what to give. A URL without a
key is refused: every analyst's route needs one.

`call` sends one request with the key as a bearer token and turns the API's error JSON
(`{"error": {"code", "message"}}`), a refused connection or a timeout into a
`ServiceProblem` whose text is the one line to print. This module imports httpx only
inside `call`, so that `privq --help` stays fast.

`over_http(parser, command)` gives a command its HTTP form: the three flags above, and
`command` for `app.cli.main` to run (through `run_over_http`) when a service is named.
`resolve_dataset` turns a dataset's unique name into its id, as the operator's commands
do on the database.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from app.commands.output import fail

if TYPE_CHECKING:
    import httpx

URL_VARIABLE = "PRIVQ_URL"
KEY_VARIABLE = "PRIVQ_KEY"
PROFILE_VARIABLE = "PRIVQ_PROFILE"
PROFILE_FIELDS = ("url", "key")
TIMEOUT_SECONDS = 60.0


class ServiceProblem(Exception):
    """Why a command cannot talk to the service, as the one line `privq: …` prints."""


@dataclass(frozen=True)
class Service:
    """A running privq service and the tenant's API key for it."""

    url: str
    key: str

    def __repr__(self) -> str:  # never the key, should a Service reach a log line
        return f"Service(url={self.url!r})"


def default_profile_files() -> tuple[Path, Path]:
    config_home = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    folder = Path(config_home) / "privq"
    return folder / "profile.toml", folder / "profile.json"


def read_profile(path: Path) -> dict[str, str]:
    """The profile's `url` and `key` (those it has); a file that cannot be read or parsed,
    or a field that is not text, is a `ServiceProblem` naming the file."""
    try:
        raw = path.read_bytes()
    except OSError as error:
        raise ServiceProblem(f"cannot read the profile {path}: {error.strerror}") from None
    try:
        if path.suffix == ".json":
            data = json.loads(raw)
        else:
            import tomllib

            data = tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as error:  # JSON, TOML and UTF-8 errors
        raise ServiceProblem(f"the profile {path} is not valid: {error}") from None
    if not isinstance(data, dict):
        raise ServiceProblem(f"the profile {path} must hold url and key fields")
    found: dict[str, str] = {}
    for name in PROFILE_FIELDS:
        value = data.get(name)
        if value is None:
            continue
        if not isinstance(value, str) or not value.strip():
            raise ServiceProblem(f"the profile {path}: {name} must be non-empty text")
        found[name] = value.strip()
    return found


def _profile(args: argparse.Namespace) -> dict[str, str]:
    named = getattr(args, "profile", None) or os.environ.get(PROFILE_VARIABLE)
    if named:
        return read_profile(Path(named).expanduser())
    for path in default_profile_files():
        if path.is_file():
            return read_profile(path)
    return {}


def find_service(args: argparse.Namespace) -> Service | None:
    """The service the command names (flags, environment, profile), or None if it names
    no URL at all."""
    url = getattr(args, "url", None) or os.environ.get(URL_VARIABLE)
    key = getattr(args, "key", None) or os.environ.get(KEY_VARIABLE)
    if not url or not key:
        profile = _profile(args)
        url = url or profile.get("url")
        key = key or profile.get("key")
    if not url:
        return None
    if not url.startswith(("http://", "https://")):
        raise ServiceProblem(f"the service URL must start with http:// or https://: {url!r}")
    if not key:
        raise ServiceProblem(
            f"no API key for {url}: give --key, set {KEY_VARIABLE}, or put key in the profile"
        )
    return Service(url=url.rstrip("/"), key=key.strip())


def service_flags(parser: argparse.ArgumentParser) -> None:
    """`--url`, `--key` and `--profile`, as every analyst's command takes them."""
    group = parser.add_argument_group("service (else PRIVQ_URL/PRIVQ_KEY, else the profile)")
    group.add_argument("--url", default=None, help="the service, e.g. http://127.0.0.1:8000")
    group.add_argument(
        "--key", default=None, help="the tenant's API key (visible in `ps`: prefer PRIVQ_KEY)"
    )
    group.add_argument(
        "--profile",
        default=None,
        metavar="FILE",
        help="a TOML or JSON file with url and key (default ~/.config/privq/profile.toml)",
    )


def segment(value: str) -> str:
    """One path segment, escaped (an id or name never reaches another route)."""
    return quote(value, safe="")


def _problem(response: httpx.Response) -> ServiceProblem:
    try:
        error = response.json().get("error") or {}
        message, code = str(error.get("message") or ""), str(error.get("code") or "")
    except (ValueError, AttributeError):
        message, code = "", ""
    if not message:
        message = response.reason_phrase or "no message"
    label = f"HTTP {response.status_code}" + (f" {code}" if code else "")
    return ServiceProblem(f"{' '.join(message.split())} ({label})")


def call(
    service: Service,
    method: str,
    path: str,
    *,
    params: dict[str, Any] | list[tuple[str, Any]] | None = None,
    json_body: Any = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """One request to the service; any answer but 2xx is a `ServiceProblem`."""
    import httpx

    if isinstance(params, dict):
        params = {k: v for k, v in params.items() if v is not None}
    try:
        response = httpx.request(
            method,
            service.url + path,
            params=params,
            json=json_body,
            headers={"Authorization": f"Bearer {service.key}", **(headers or {})},
            timeout=TIMEOUT_SECONDS,
        )
    except httpx.TimeoutException:
        raise ServiceProblem(f"{service.url} did not answer within {TIMEOUT_SECONDS:g} s") from None
    except httpx.HTTPError as error:
        raise ServiceProblem(
            f"cannot reach {service.url} ({type(error).__name__}); is the service running?"
        ) from None
    if response.is_error:
        raise _problem(response)
    return response


def next_cursor(response: httpx.Response) -> str | None:
    """The cursor of the next page, from the `Link: <…>; rel="next"` header."""
    from urllib.parse import parse_qs, urlsplit

    target = response.links.get("next", {}).get("url")
    if not target:
        return None
    cursors = parse_qs(urlsplit(target).query).get("cursor")
    return cursors[0] if cursors else None


# ---- running a command over HTTP ------------------------------------------------------

HttpCommand = Callable[[argparse.Namespace, Service], int]


def run_over_http(command: HttpCommand, args: argparse.Namespace, service: Service | None) -> int:
    """Run an HTTP command; no service named, or any refusal, is one line."""
    if service is None:
        return fail(
            f"`privq {args.command}` asks a running service: give --url and --key, set "
            "PRIVQ_URL and PRIVQ_KEY, or write them to ~/.config/privq/profile.toml"
        )
    try:
        return command(args, service)
    except ServiceProblem as problem:
        return fail(str(problem))


def over_http(parser: argparse.ArgumentParser, command: HttpCommand) -> None:
    """Let `parser`'s command run over HTTP when a service is named (`app.cli.main`)."""
    service_flags(parser)
    parser.set_defaults(over_http=partial(run_over_http, command))


def resolve_dataset(service: Service, reference: str) -> str:
    """The id of the tenant's dataset that `reference` names: its id, or a name that only
    one of the datasets this key sees has. Unknown: passed on, for the API to refuse."""
    datasets: list[dict[str, Any]] = []
    cursor: str | None = None
    while True:
        response = call(service, "GET", "/v1/datasets", params={"limit": 1000, "cursor": cursor})
        datasets += response.json()
        cursor = next_cursor(response)
        if cursor is None:
            break
    if any(d.get("id") == reference for d in datasets):
        return reference
    named = [str(d["id"]) for d in datasets if d.get("name") == reference]
    if len(named) > 1:
        raise ServiceProblem(
            f"{len(named)} datasets are named {reference!r}: give an id ({', '.join(named)})"
        )
    return named[0] if named else reference


def print_json(data: Any) -> None:
    print(json.dumps(data, allow_nan=False))
