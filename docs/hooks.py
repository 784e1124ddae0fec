"""MkDocs hooks: the reference pages written from the code at build time.

A page asks for a generated section with a marker on a line of its own:

- `<!-- generated:openapi -->` — every route of the OpenAPI document of `app.api`;
- `<!-- generated:settings -->` — every field of `app.config.Settings` (`PRIVQ_*`);
- `<!-- generated:metrics -->` — every Prometheus metric a privq process exports: the
  registry of `app.metrics` and the database gauges of `app.services.gauges`.

So the reference never drifts from the code: a new route, setting or metric appears
in the next build. `tests/docs/test_docs_site.py` renders each section too.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

MARKER = "<!-- generated:{} -->"
HTTP_METHODS = ("get", "post", "put", "patch", "delete")


def _cell(text: object) -> str:
    """Text for one table cell: one line, pipes escaped."""
    return " ".join(str(text).split()).replace("|", "\\|")


# ---- the HTTP API ---------------------------------------------------------------------


def openapi_document() -> dict[str, Any]:
    """The service's OpenAPI document, as `/openapi.json` serves it."""
    from app.api import create_app
    from app.config import Settings

    with tempfile.TemporaryDirectory(prefix="privq-docs-") as folder:
        settings = Settings(
            database_url=f"sqlite:///{folder}/docs.db",
            admin_key="docs-build-admin-key-" + "x" * 32,
            env="test",
            workers_in_process=0,
            auto_migrate=False,
            log_level="WARNING",
        )
        document: dict[str, Any] = create_app(settings).openapi()
    return document


def _schema_name(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return f"`{schema['$ref'].rsplit('/', 1)[-1]}`"
    if schema.get("type") == "array" and "items" in schema:
        return f"array of {_schema_name(schema['items'])}"
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return " or ".join(_schema_name(option) for option in schema[key])
    return f"`{schema.get('type', 'object')}`"


def _body_name(schema: dict[str, Any]) -> str:
    """A whole body's schema: a model inlined in place (a hidden route's, documented on
    another operation) by its title."""
    if schema.get("type") == "object" and "title" in schema:
        return f"`{schema['title']}`"
    return _schema_name(schema)


def _parameters(operation: dict[str, Any]) -> list[str]:
    rows = []
    for parameter in operation.get("parameters", []):
        schema = parameter.get("schema", {})
        rows.append(
            f"| `{parameter['name']}` | {parameter['in']} | "
            f"{'yes' if parameter.get('required') else 'no'} | "
            f"{_cell(parameter.get('description') or schema.get('description') or '')} |"
        )
    if not rows:
        return []
    return ["| parameter | in | required | meaning |", "|---|---|---|---|", *rows, ""]


def _request_body(operation: dict[str, Any]) -> list[str]:
    body = operation.get("requestBody")
    if not body:
        return []
    lines = []
    for media, content in body.get("content", {}).items():
        lines.append(f"Body ({media}): {_body_name(content.get('schema', {}))}.")
    return [*lines, ""]


def _responses(operation: dict[str, Any]) -> list[str]:
    rows = []
    for status, response in sorted(operation.get("responses", {}).items()):
        codes = []
        for content in response.get("content", {}).values():
            examples = [
                example.get("value") for example in (content.get("examples") or {}).values()
            ]
            for example in [*examples, content.get("example")]:
                code = example.get("error", {}).get("code") if isinstance(example, dict) else None
                if code and code not in codes:
                    codes.append(code)
        what = _cell(response.get("description", ""))
        missing = [code for code in codes if f"`{code}`" not in what]
        if missing:
            what += " — " + ", ".join(f"`{code}`" for code in missing)
        if status.startswith("2"):
            shapes = {
                _body_name(content["schema"])
                for content in response.get("content", {}).values()
                if content.get("schema")
            }
            if shapes:
                what += ": " + " or ".join(sorted(shapes))
        rows.append(f"| {status} | {what} |")
    return ["| status | meaning |", "|---|---|", *rows, ""]


def render_openapi(document: dict[str, Any] | None = None) -> str:
    """Markdown for every operation, grouped by tag, in the document's order."""
    document = document or openapi_document()
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, item in document["paths"].items():
        for method in HTTP_METHODS:
            if method in item:
                operation = item[method]
                tag = (operation.get("tags") or ["other"])[0]
                by_tag.setdefault(tag, []).append((method.upper(), path, operation))
    lines = [
        f"OpenAPI {document.get('openapi', '')}, {document['info']['title']} "
        f"{document['info'].get('version', '')}: {sum(map(len, by_tag.values()))} operations.",
        "",
    ]
    for tag, operations in by_tag.items():
        lines += [f"## {tag}", ""]
        for method, path, operation in operations:
            lines += [f"### `{method} {path}`", ""]
            summary = operation.get("summary")
            if summary:
                lines += [f"**{_cell(summary)}**", ""]
            description = (operation.get("description") or "").strip()
            if description and description.rstrip(".") != (summary or "").rstrip("."):
                lines += [description, ""]
            lines += _parameters(operation) + _request_body(operation) + _responses(operation)
    schemas = document.get("components", {}).get("schemas", {})
    if schemas:
        lines += ["## Schemas", ""]
        for name, schema in sorted(schemas.items()):
            lines += [f"### `{name}`", ""]
            if schema.get("description"):
                lines += [_cell(schema["description"]), ""]
            properties = schema.get("properties", {})
            required = set(schema.get("required", []))
            if properties:
                lines += ["| field | type | required | meaning |", "|---|---|---|---|"]
                for field, spec in properties.items():
                    lines.append(
                        f"| `{field}` | {_schema_name(spec)} | "
                        f"{'yes' if field in required else 'no'} | "
                        f"{_cell(spec.get('description', ''))} |"
                    )
                lines.append("")
    return "\n".join(lines)


# ---- configuration --------------------------------------------------------------------


def _default(field: Any) -> str:
    from pydantic_core import PydanticUndefined

    default = field.default
    if default is PydanticUndefined or default is None:
        return "unset"
    if isinstance(default, bool):
        return f"`{str(default).lower()}`"
    if isinstance(default, int) and default >= 1024**2 and default % 1024**2 == 0:
        mib = default // 1024**2
        return f"`{default}` ({mib // 1024} GiB)" if mib % 1024 == 0 else f"`{default}` ({mib} MiB)"
    return f"`{default}`"


def _type_name(annotation: Any) -> str:
    """A settings field's type in words: `integer`, `one of a, b`, `…, or unset`."""
    import types
    import typing

    from pydantic import SecretStr

    words = {str: "text", int: "integer", float: "number", bool: "true or false"}
    if annotation is SecretStr:
        return "secret text"
    if annotation in words:
        return words[annotation]
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{value}`" for value in arguments)
    if origin in (typing.Union, types.UnionType):
        named = [_type_name(argument) for argument in arguments if argument is not type(None)]
        optional = len(named) < len(arguments)
        return " or ".join(named) + (", or unset" if optional else "")
    return _cell(annotation)


def render_settings() -> str:
    """Every `PRIVQ_*` variable: its type, default and meaning, one entry each."""
    from app.config import Settings

    prefix = Settings.model_config.get("env_prefix", "")
    entries = []
    for name, field in Settings.model_fields.items():
        variable = f"{prefix}{name}".upper()
        entries.append(
            f"`{variable}`\n"
            f":   {_type_name(field.annotation)}; default {_default(field)}. "
            f"{' '.join((field.description or '').split())}\n"
        )
    return "\n".join(entries)


# ---- metrics --------------------------------------------------------------------------


def _families() -> Iterable[Any]:
    from app import metrics
    from app.config import Settings
    from app.db import Database
    from app.migrations import upgrade_to_head
    from app.services.gauges import DatabaseGauges

    yield from metrics.REGISTRY.collect()
    with tempfile.TemporaryDirectory(prefix="privq-docs-") as folder:
        url = f"sqlite:///{folder}/metrics.db"
        upgrade_to_head(url)
        database = Database.from_settings(
            Settings(database_url=url, admin_key="docs-build-admin-key-" + "x" * 32, env="test")
        )
        try:
            yield from DatabaseGauges(database).collect()
        finally:
            database.dispose()


def _label_names() -> dict[str, tuple[str, ...]]:
    """Label names of the registry's metrics (a family without samples shows none)."""
    from app import metrics

    names: dict[str, tuple[str, ...]] = {}
    for value in vars(metrics).values():
        labels = getattr(value, "_labelnames", None)
        name = getattr(value, "_name", None)
        if isinstance(labels, tuple) and isinstance(name, str):
            names[name] = labels
    return names


DATABASE_GAUGE_LABELS = {"privq_jobs": ("status",), "privq_model_cells": ("dataset_id",)}


def render_metrics() -> str:
    """A table of every metric: name, type, labels, meaning."""
    labels = {**DATABASE_GAUGE_LABELS, **_label_names()}
    rows = {}
    for family in _families():
        name = family.name + ("_total" if family.type == "counter" else "")
        sample_labels = {key for sample in family.samples for key in sample.labels}
        names = labels.get(family.name) or labels.get(name) or tuple(sorted(sample_labels - {"le"}))
        shown = ", ".join(f"`{label}`" for label in names) or "—"
        rows[name] = f"| `{name}` | {family.type} | {shown} | {_cell(family.documentation)} |"
    lines = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    return "\n".join([*lines, *(rows[name] for name in sorted(rows))]) + "\n"


# ---- the hook -------------------------------------------------------------------------

RENDERERS: dict[str, Callable[[], str]] = {
    "openapi": render_openapi,
    "settings": render_settings,
    "metrics": render_metrics,
}


def on_page_markdown(markdown: str, **_kwargs: Any) -> str:
    for name, render in RENDERERS.items():
        marker = MARKER.format(name)
        if marker in markdown:
            markdown = markdown.replace(marker, render())
    return markdown


if __name__ == "__main__":  # print a section: python docs/hooks.py metrics
    import sys

    print(RENDERERS[sys.argv[1]]())
    _ = Path  # keep the import for readers running this by hand
