"""Keyset pagination: one page of a query and an opaque cursor for the next.

Every list the API serves is ordered by a unique key (an integer id, or
`(created_at, id)`); a page is the first `limit` rows after the cursor's key, so a
page is as cheap deep in a long list as at its start, and rows added meanwhile
never shift later pages. The cursor is the last row's key, JSON in URL-safe base64:
opaque to clients, and a tampered one is refused (422), never trusted into SQL
other than as bound values.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import ColumnElement, Select, and_, or_
from sqlalchemy.orm import InstrumentedAttribute, Session

from app.errors import InvalidRequest

Row = TypeVar("Row")

DEFAULT_LIMIT = 100
MAX_LIMIT = 1000


@dataclass(frozen=True)
class Page(Generic[Row]):
    items: list[Row]
    next_cursor: str | None


def _encode(values: Sequence[Any]) -> str:
    plain = [v.isoformat() if isinstance(v, datetime) else v for v in values]
    raw = json.dumps(plain, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode(cursor: str, kinds: Sequence[type]) -> list[Any]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        plain = json.loads(raw)
        if not isinstance(plain, list) or len(plain) != len(kinds):
            raise ValueError("wrong shape")
        values: list[Any] = []
        for value, kind in zip(plain, kinds, strict=True):
            if kind is datetime:
                parsed = datetime.fromisoformat(value)
                if parsed.tzinfo is None:
                    raise ValueError("naive time")
                values.append(parsed)
            elif isinstance(value, kind) and not isinstance(value, bool):
                values.append(value)
            else:
                raise ValueError("wrong type")
        return values
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise InvalidRequest(
            "cursor is not valid: pass the one from the previous page's Link header",
            parameter="cursor",
        ) from None


def _after(
    keys: Sequence[InstrumentedAttribute[Any]], values: Sequence[Any], descending: bool
) -> ColumnElement[bool]:
    """Rows strictly after `values` in the order of `keys` (lexicographic, no row values)."""
    clauses = []
    for i, key in enumerate(keys):
        equal = [keys[j] == values[j] for j in range(i)]
        beyond = key < values[i] if descending else key > values[i]
        clauses.append(and_(*equal, beyond))
    return or_(*clauses)


def page(
    session: Session,
    query: Select[Any],
    *,
    keys: Sequence[InstrumentedAttribute[Any]],
    kinds: Sequence[type],
    limit: int,
    cursor: str | None,
    descending: bool = False,
    key_of: Callable[[Any], Sequence[Any]],
) -> Page[Any]:
    """The first `limit` rows of `query` after `cursor`, ordered by `keys` (unique together).

    `kinds` gives each key's Python type (datetime, int or str) to read the cursor back;
    `key_of(row)` gives a row's key values.
    """
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidRequest(f"limit must be between 1 and {MAX_LIMIT}", parameter="limit")
    if cursor is not None:
        query = query.where(_after(keys, _decode(cursor, kinds), descending))
    order = [key.desc() if descending else key.asc() for key in keys]
    rows = list(session.scalars(query.order_by(*order).limit(limit + 1)))
    if len(rows) <= limit:
        return Page(rows, None)
    rows = rows[:limit]
    return Page(rows, _encode(list(key_of(rows[-1]))))
