"""`PrivateBins`: a schema's record of the ρ its draft spent on private bin edges.

A schema drafted with `privq schema draft --private-bins RHO` carries
``"private_bins": {"rho": RHO, "attributes": [...]}``: the draft released the edges of
those attributes with a differentially private quantile mechanism, spending at most
RHO (zCDP) on the curator's table. The upload (or registration) with that schema
charges RHO against the dataset's `rho_total` (`app.services.private_bins`).

`rho` is a positive finite number at most `MAX_RHO`; `attributes` (optional) lists
distinct attribute names. They need not all be in the schema: the ρ stays spent when
the curator drops a column after drafting.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from app.limits import MAX_RHO
from app.schema.rules import SchemaError, check_name, is_real_number, quote

_KEYS = frozenset({"rho", "attributes"})


@dataclass(frozen=True)
class PrivateBins:
    """What a schema's draft spent on private bin edges."""

    rho: float
    attributes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"rho": self.rho, "attributes": list(self.attributes)}


def parse_private_bins(value: object) -> PrivateBins:
    """The schema's `private_bins` field, read strictly (SchemaError naming what is wrong)."""
    where = "private_bins"
    if not isinstance(value, Mapping):
        raise SchemaError(f'{where} must be an object {{"rho": …, "attributes": [...]}}')
    unknown = sorted(set(value) - _KEYS)
    if unknown:
        raise SchemaError(
            f"{where}: unknown key(s) {', '.join(quote(str(k)) for k in unknown)} "
            "(allowed: attributes, rho)"
        )
    if "rho" not in value:
        raise SchemaError(f"{where} needs rho, the ρ its draft spent")
    rho = value["rho"]
    if not is_real_number(rho) or not math.isfinite(float(rho)) or float(rho) <= 0:
        raise SchemaError(f"{where}: rho must be a positive finite number, got {rho!r}")
    if float(rho) > MAX_RHO:
        raise SchemaError(f"{where}: rho must be at most {MAX_RHO:g}, got {rho!r}")
    names = value.get("attributes", [])
    if not isinstance(names, list):
        raise SchemaError(f"{where}: attributes must be a list of attribute names")
    checked = tuple(check_name(name) for name in names)
    if len(set(checked)) != len(checked):
        raise SchemaError(f"{where}: attributes must not repeat a name")
    return PrivateBins(float(rho), checked)
