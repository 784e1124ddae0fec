"""Answers that rest on attributes nothing measured: the service names them in the
`Privq-Unmeasured` response header, and the client turns that into a warning.

Along an unmeasured attribute the model knows nothing but the attribute's domain, so a
marginal, count, query or synthetic table spreads it uniformly (the maximum-entropy
estimate). That is a correct answer to what was measured, and easy to mistake for
data: `UnmeasuredAttributesWarning` says so once per call. Silence it with the
`warnings` module (`warnings.simplefilter("ignore", UnmeasuredAttributesWarning)`).
"""

from __future__ import annotations

import warnings
from urllib.parse import unquote

import httpx

UNMEASURED_HEADER = "Privq-Unmeasured"


class UnmeasuredAttributesWarning(UserWarning):
    """The answer involves attributes no measurement touched (spread uniformly)."""


def unmeasured_names(response: httpx.Response) -> list[str]:
    """The attributes the response's header names (none if it has no header)."""
    value = response.headers.get(UNMEASURED_HEADER, "")
    return [unquote(name) for name in value.split(",") if name]


def warn_unmeasured(response: httpx.Response, what: str, *, stacklevel: int = 3) -> list[str]:
    """Warn if `response` names unmeasured attributes (`stacklevel` 3: at the line that
    called the client's method); returns them."""
    return warn_names(unmeasured_names(response), what, stacklevel=stacklevel + 1)


def warn_names(names: list[str], what: str, *, stacklevel: int = 3) -> list[str]:
    """Warn if `names` (unmeasured attributes of an answer) is not empty; returns it."""
    if names:
        warnings.warn(
            f"{what}: no measurement touched {', '.join(names)}; the model spreads "
            f"{'it' if len(names) == 1 else 'them'} uniformly (its maximum-entropy "
            "estimate), so the answer says nothing about the data there. Measure a "
            "marginal with them to learn it.",
            UnmeasuredAttributesWarning,
            stacklevel=stacklevel,
        )
    return names
