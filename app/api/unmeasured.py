"""The `Privq-Unmeasured` response header: which attributes of an answer no measurement
touched, so the model spread them uniformly (its maximum-entropy estimate).

Synthetic data, marginals, counts and factored queries carry it when the list is not
empty: the names, comma-separated (a name has no comma: the schema forbids it), each
percent-encoded as UTF-8 where it is not printable ASCII (a header holds only that).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar
from urllib.parse import quote

from starlette.responses import Response

AnyResponse = TypeVar("AnyResponse", bound=Response)

UNMEASURED_HEADER = "Privq-Unmeasured"
# Printable ASCII stays as it is, but for the list's separator and the escape itself.
_PLAIN = "".join(chr(c) for c in range(0x20, 0x7F) if chr(c) not in ",%")


# The header in an answer's OpenAPI description.
DOCUMENTED = {
    UNMEASURED_HEADER: {
        "description": "Only when some are: the answer's attributes no measurement touched "
        "(the model spreads them uniformly), comma-separated, each percent-encoded where "
        "it is not printable ASCII. The Python client warns with them.",
        "schema": {"type": "string", "example": "age,region"},
    }
}


def header_value(names: Sequence[str]) -> str:
    return ",".join(quote(name, safe=_PLAIN) for name in names)


def unmeasured_headers(names: Sequence[str]) -> dict[str, str]:
    """The header for `names`, or none when every attribute was measured."""
    return {UNMEASURED_HEADER: header_value(names)} if names else {}


def mark_unmeasured(response: AnyResponse, names: Sequence[str]) -> AnyResponse:
    """`response` with the header added (when `names` is not empty)."""
    if names:
        response.headers[UNMEASURED_HEADER] = header_value(names)
    return response
