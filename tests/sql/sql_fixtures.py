"""A small random model over four attributes (one with a "no value" code) and brute force
over its full joint: what every SQL answer is checked against."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import numpy as np

from app.pgm.domain import Domain
from app.pgm.model import GraphicalModel
from app.schema import SchemaError, parse_schema
from app.services.answers import sql_answer
from app.services.models import CoveredMeasurement, LoadedModel

SCHEMA = {
    "attributes": [
        {"name": "sex", "type": "categorical", "values": ["F", "M"]},
        {"name": "age", "type": "numeric", "bins": [0, 18, 30, 45, 65, 120]},
        {"name": "race", "type": "categorical", "values": ["asian", "black", "white"]},
        {"name": "hours", "type": "integer", "size": 4},
        {"name": "region", "type": "categorical", "values": ["north", "south", "east"]},
    ]
}
AGE_MIDPOINTS = np.array([9.0, 24.0, 37.5, 55.0, 92.5])
NAMES = ("people", "ds-1")
TOTAL = 1000.0


MISSING = {"region": 3, "hours": 4}  # attribute → its "no value" code (the last)


def small_schema() -> Any:
    """The schema, with `region` and `hours` admitting missing values (each one more code,
    the last, for "no value"): the schema's own `"missing": true` where it has it, else
    the same attribute flag set on the parsed attributes."""
    with_missing = {
        "attributes": [
            {**a, "missing": True} if a["name"] in MISSING else a for a in SCHEMA["attributes"]
        ]
    }
    try:
        return parse_schema(with_missing)
    except SchemaError:
        schema = parse_schema(SCHEMA)
    for name in MISSING:
        object.__setattr__(schema.attribute(name), "missing", True)
    return schema


def small_domain(schema: Any) -> Domain:
    sizes = {a.name: a.size for a in schema.attributes}
    for name, null_code in MISSING.items():
        sizes[name] = null_code + 1
    return Domain(schema.names, tuple(sizes[name] for name in schema.names))


def random_model(seed: int = 0, total: float = TOTAL) -> tuple[Any, GraphicalModel]:
    schema = small_schema()
    domain = small_domain(schema)
    rng = np.random.default_rng(seed)
    cliques = (("sex", "age"), ("age", "race"), ("race", "hours"), ("hours", "region"))
    potentials = {c: rng.normal(scale=1.0, size=domain.shape(c)) for c in cliques}
    return schema, GraphicalModel(domain, cliques, potentials, total)


def loaded(
    schema: Any, model: GraphicalModel, measured: tuple[tuple[str, ...], ...] = ()
) -> LoadedModel:
    return LoadedModel(
        dataset_id="ds-1",
        version=3,
        model=model,
        schema=schema,
        fitted_at=datetime.now(UTC),
        solver="test",
        iterations=0,
        loss=0.0,
        seconds=0.0,
        cliques=model.cliques,
        high_water=0,
        measurements=tuple(
            CoveredMeasurement(i, i + 1, attrs, "gaussian", 2.0) for i, attrs in enumerate(measured)
        ),
    )


def answer(loaded_model: LoadedModel, text: str) -> dict[str, Any]:
    return sql_answer(loaded_model, text, table_names=NAMES, max_cells=1_000_000)


# ---- brute force over the joint ---------------------------------------------------------


class Joint:
    """N̂·p over every cell, with each attribute's code grid: SQL by numpy masks."""

    def __init__(self, model: GraphicalModel) -> None:
        self.counts = model.joint_probabilities() * model.total
        self.domain = model.domain
        grids = np.meshgrid(*[np.arange(s) for s in self.domain.sizes], indexing="ij")
        self.codes = dict(zip(self.domain.attributes, grids, strict=True))

    def code(self, name: str) -> np.ndarray:
        return self.codes[name]

    def value(self, name: str) -> np.ndarray:
        """The number each cell stands for (midpoints for age), NaN where no value."""
        codes = self.codes[name].astype(float)
        if name == "age":
            return AGE_MIDPOINTS[self.codes[name]]
        if name in MISSING:
            return np.where(codes == MISSING[name], np.nan, codes)
        return codes

    def count(self, where: np.ndarray) -> float:
        return float((self.counts * where).sum())

    def total(self, where: np.ndarray, values: np.ndarray) -> float:
        return float((self.counts * where * np.nan_to_num(values)).sum())

    def moments(self, where: np.ndarray, name: str) -> tuple[float, float, float]:
        values = self.value(name)
        present = where & ~np.isnan(values)
        return (
            self.count(present),
            self.total(present, values),
            self.total(present, np.nan_to_num(values) ** 2),
        )


def var_samp(n: float, s1: float, s2: float) -> float:
    return (s2 - s1 * s1 / n) / (n - 1)
