"""A small synthetic census table: the example data of the README's tour and `privq demo`.

Every person is made up: a seeded generator draws age, sex, education, occupation,
hours worked, region and an income class, with dependencies between them (education
with age, occupation with education, hours with occupation and sex, income with all
of those) so that a model has pairs to learn. Only `random.Random.random()` is used,
so a seed gives the same table on every Python version. The repository keeps one
such table, `examples/census.csv`, written by `examples/make_census.py`.
"""

from __future__ import annotations

import csv
import io
import json
import math
import random
from collections.abc import Sequence
from typing import Any

ROWS = 3000
SEED = 20240611

REGIONS = ("Northeast", "Midwest", "South", "West")
SEXES = ("Female", "Male")
EDUCATIONS = ("Dropout", "HS-grad", "Some-college", "Bachelors", "Masters", "Doctorate")
OCCUPATIONS = ("Admin", "Craft", "Sales", "Service", "Tech", "Professional", "Manager")
INCOMES = ("<=50K", ">50K")
AGE_BINS = (17, 25, 35, 45, 55, 65, 91)
HOURS_BINS = (1, 20, 35, 41, 50, 61, 100)

COLUMNS = ("age", "sex", "education", "occupation", "hours_per_week", "region", "income")

# Occupation weights by education (same order as EDUCATIONS, then OCCUPATIONS).
_OCCUPATION_WEIGHTS = (
    (10, 30, 12, 40, 3, 1, 4),
    (18, 28, 18, 24, 5, 2, 5),
    (22, 16, 20, 16, 12, 6, 8),
    (14, 4, 18, 5, 20, 24, 15),
    (8, 2, 8, 2, 18, 42, 20),
    (4, 1, 2, 1, 12, 65, 15),
)
# Hours worked: weekly hours band weights by occupation (bands of HOURS_BINS).
_HOURS_WEIGHTS = {
    "Admin": (4, 14, 70, 8, 3, 1),
    "Craft": (2, 6, 62, 18, 10, 2),
    "Sales": (8, 14, 44, 18, 13, 3),
    "Service": (16, 24, 44, 8, 6, 2),
    "Tech": (2, 6, 58, 20, 12, 2),
    "Professional": (3, 8, 40, 26, 19, 4),
    "Manager": (1, 3, 30, 30, 29, 7),
}


def schema() -> dict[str, Any]:
    """The table's public schema (the full form: categories and numeric bin edges)."""
    return {
        "attributes": [
            {"name": "age", "type": "numeric", "bins": list(AGE_BINS)},
            {"name": "sex", "type": "categorical", "values": list(SEXES)},
            {"name": "education", "type": "categorical", "values": list(EDUCATIONS)},
            {"name": "occupation", "type": "categorical", "values": list(OCCUPATIONS)},
            {"name": "hours_per_week", "type": "numeric", "bins": list(HOURS_BINS)},
            {"name": "region", "type": "categorical", "values": list(REGIONS)},
            {"name": "income", "type": "categorical", "values": list(INCOMES)},
        ]
    }


def _pick(rng: random.Random, values: Sequence[str], weights: Sequence[float]) -> str:
    point = rng.random() * sum(weights)
    for value, weight in zip(values, weights, strict=True):
        point -= weight
        if point < 0:
            return value
    return values[-1]


def _between(rng: random.Random, low: int, high: int) -> int:
    """An integer in [low, high), uniformly."""
    return low + min(int(rng.random() * (high - low)), high - low - 1)


def _person(rng: random.Random) -> tuple[int, str, str, str, int, str, str]:
    band = int(_pick(rng, "012345", (14, 22, 21, 19, 14, 10)))
    age = _between(rng, AGE_BINS[band], AGE_BINS[band + 1])
    sex = _pick(rng, SEXES, (51, 49))
    education_weights = [12.0, 32.0, 24.0, 20.0, 9.0, 3.0]
    if age < 25:  # too young for most graduate degrees
        education_weights = [16.0, 36.0, 34.0, 12.0, 1.5, 0.5]
    education = _pick(rng, EDUCATIONS, education_weights)
    occupation = _pick(rng, OCCUPATIONS, _OCCUPATION_WEIGHTS[EDUCATIONS.index(education)])
    hours_weights = [float(weight) for weight in _HOURS_WEIGHTS[occupation]]
    if sex == "Female":  # more part-time work
        hours_weights[0] *= 1.8
        hours_weights[1] *= 1.6
    hours_band = int(_pick(rng, "012345", hours_weights))
    hours = _between(rng, HOURS_BINS[hours_band], HOURS_BINS[hours_band + 1])
    region = _pick(rng, REGIONS, (18, 21, 38, 23))
    score = (
        -4.2
        + 0.55 * EDUCATIONS.index(education)
        + 0.9 * (occupation in ("Professional", "Manager"))
        + 0.035 * (min(age, 60) - 17)
        + 0.03 * (hours - 40)
        + 0.35 * (sex == "Male")
        + 0.25 * (region in ("Northeast", "West"))
    )
    income = INCOMES[1] if rng.random() < 1 / (1 + math.exp(-score)) else INCOMES[0]
    return age, sex, education, occupation, hours, region, income


def rows(count: int = ROWS, seed: int = SEED) -> list[tuple[int, str, str, str, int, str, str]]:
    """`count` made-up people, the same for the same seed."""
    rng = random.Random(seed)
    return [_person(rng) for _ in range(count)]


def csv_text(count: int = ROWS, seed: int = SEED) -> str:
    """The table as CSV text with a header row (newlines `\\n`)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(COLUMNS)
    writer.writerows(rows(count, seed))
    return out.getvalue()


def schema_text() -> str:
    """The schema as the JSON text of `examples/census-schema.json`."""
    return json.dumps(schema(), indent=2) + "\n"
