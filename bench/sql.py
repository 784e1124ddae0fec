"""Benchmark: SQL over the model (POST /sql's service path) next to the same questions as
factored queries (POST /queries' service path), and the parse + compile overhead.

Two models, each held in memory as the service holds a loaded version:
- Adult: fitted from the engine benchmark's 24 fixed measurements
  (../shared/data/adult-measurements-sigma10.npz, σ = 10; 14 integer-coded attributes).
- The scale bench's table (bench/scale_data.py): `--scale-rows` records (default
  2,000,000) × 40 attributes drawn from its Bayesian network, every one-way marginal and
  every family measured with numpy Gaussian noise (σ = `--sigma`; a bench-only path,
  never a release), fitted with at most `--scale-iterations` iterations (inference time
  depends on the model's cliques, not on how far the fit converged).

For each model a handful of typical GROUP BY questions (counts, averages, a variance, a
disjunction, HAVING/ORDER BY/LIMIT) is answered repeatedly for `--seconds` each: once as
SQL (`answers.sql_answer`: parse, compile, factored queries, rows) and once as the same
question hand-written as factored queries (`answers.queries_answer`). Both are
in-process service calls, so the figures are what SQL adds to the engine, without HTTP.
The service keeps checked statements by text (app.sql.read, an LRU of 1,024), so a
repeated question — as here — skips the parse; `parse_ms` is the cold parse and check
(sqlglot, then the grammar), `compile_ms` the compile over the schema and the sizing of
the factored queries (`prepare_sql`), both per query.

Over HTTP (`--http-seconds`, 0 to skip): `privq serve` on loopback with the Adult model
(bench/queries.py's server and setup), one client on one keep-alive connection asking
the same two-attribute question for `--http-seconds` each, alternately in rounds of a
second: `GET /marginals?attrs=a,b` and `POST /sql` with `SELECT a, b, COUNT(*) FROM
adult GROUP BY a, b`. `sql_to_marginals` is the ratio of the two rates (the floor is
0.5). Rounds alternate so that both routes see the same shared machine.

Prints one JSON line.

    .venv/bin/python bench/sql.py [--seconds 2] [--scale-rows 2000000] [--skip-scale]
        [--http-seconds 5] [--http-pair education-num,occupation] [--skip-in-process]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scale_data import make_network

from app import sql
from app.pgm.domain import Domain
from app.pgm.estimation import fit
from app.pgm.measurement import Measurement
from app.pgm.model import GraphicalModel
from app.schema import parse_schema
from app.services import answers
from app.services.answers import Grouping, QuerySpec, ValueRange
from app.services.models import CoveredMeasurement, LoadedModel

DATA = Path(
    os.environ.get("PRIVQ_SHARED_DATA")
    or Path(__file__).resolve().parents[1].parent / "shared" / "data"
)
MAX_CELLS = 1_000_000

# (name, SQL, the same question as factored queries)
Question = tuple[str, str, list[QuerySpec]]

ADULT_QUESTIONS: list[Question] = [
    (
        "count_by_sex",
        "SELECT sex, COUNT(*) FROM adult GROUP BY sex",
        [QuerySpec(by={"sex": "value"})],
    ),
    (
        "avg_age_by_education_over_40h",
        'SELECT "education-num", COUNT(*), AVG(age) FROM adult '
        'WHERE "hours-per-week" > 40 GROUP BY "education-num"',
        [
            QuerySpec(where={"hours-per-week": ValueRange(ge=41)}, by={"education-num": "value"}),
            QuerySpec(
                where={"hours-per-week": ValueRange(ge=41)},
                by={"education-num": "value"},
                moments={"age": 1},
            ),
        ],
    ),
    (
        "var_hours_by_race_sex_where_in",
        'SELECT race, sex, AVG("hours-per-week"), VAR("hours-per-week") FROM adult '
        "WHERE workclass IN (1, 2, 3) GROUP BY race, sex",
        [
            QuerySpec(where={"workclass": [1, 2, 3]}, by={"race": "value", "sex": "value"}),
            QuerySpec(
                where={"workclass": [1, 2, 3]},
                by={"race": "value", "sex": "value"},
                moments={"hours-per-week": 2},
            ),
        ],
    ),
    (
        "disjunction_by_marital_status",
        'SELECT "marital-status", COUNT(*) FROM adult '
        'WHERE "income>50K" = 1 OR relationship = 0 GROUP BY "marital-status"',
        [  # inclusion–exclusion by hand: A + B − A∩B
            QuerySpec(where={"income>50K": [1]}, by={"marital-status": "value"}),
            QuerySpec(where={"relationship": [0]}, by={"marital-status": "value"}),
            QuerySpec(
                where={"income>50K": [1], "relationship": [0]}, by={"marital-status": "value"}
            ),
        ],
    ),
    (
        "top_occupations_having_order_limit",
        "SELECT occupation, COUNT(*) AS n, AVG(age) FROM adult WHERE sex = 0 "
        "GROUP BY occupation HAVING COUNT(*) > 100 ORDER BY n DESC LIMIT 5",
        [
            QuerySpec(where={"sex": [0]}, by={"occupation": "value"}),
            QuerySpec(where={"sex": [0]}, by={"occupation": "value"}, moments={"age": 1}),
        ],
    ),
]


def scale_questions(schema: Any) -> list[Question]:
    values = {a.name: a.labels() for a in schema.attributes}
    return [
        (
            "count_avg_by_one",
            "SELECT a03, COUNT(*), AVG(a01) FROM scale GROUP BY a03",
            [QuerySpec(by={"a03": "value"}), QuerySpec(by={"a03": "value"}, moments={"a01": 1})],
        ),
        (
            "two_way_where_in",
            f"SELECT a06, a09, COUNT(*) FROM scale WHERE a12 IN ('{values['a12'][0]}', "
            f"'{values['a12'][1]}') GROUP BY a06, a09",
            [QuerySpec(where={"a12": values["a12"][:2]}, by={"a06": "value", "a09": "value"})],
        ),
        (
            "variance_with_disjunction",
            f"SELECT a15, AVG(a04), VAR(a04) FROM scale WHERE a13 >= 1 OR a18 = "
            f"'{values['a18'][0]}' GROUP BY a15",
            [
                QuerySpec(where={"a13": ValueRange(ge=1)}, by={"a15": "value"}, moments={"a04": 2}),
                QuerySpec(
                    where={"a18": values["a18"][:1]}, by={"a15": "value"}, moments={"a04": 2}
                ),
                QuerySpec(
                    where={"a13": ValueRange(ge=1), "a18": values["a18"][:1]},
                    by={"a15": "value"},
                    moments={"a04": 2},
                ),
                QuerySpec(where={"a13": ValueRange(ge=1)}, by={"a15": "value"}),
                QuerySpec(where={"a18": values["a18"][:1]}, by={"a15": "value"}),
                QuerySpec(
                    where={"a13": ValueRange(ge=1), "a18": values["a18"][:1]}, by={"a15": "value"}
                ),
            ],
        ),
        (
            "far_apart_group_order_limit",
            f"SELECT a30, SUM(a31) FROM scale WHERE a36 = '{values['a36'][0]}' "
            "GROUP BY a30 ORDER BY 2 DESC LIMIT 3",
            [QuerySpec(where={"a36": values["a36"][:1]}, by={"a30": "value"}, moments={"a31": 1})],
        ),
        (
            "grouping_into_named_groups",
            f"SELECT a21, COUNT(*) FROM scale WHERE a24 IN ('{values['a24'][0]}') GROUP BY a21",
            [
                QuerySpec(
                    where={"a24": values["a24"][:1]},
                    by={"a21": Grouping({str(v): [v] for v in values["a21"]})},
                )
            ],
        ),
    ]


def loaded_model(
    dataset_id: str,
    schema: Any,
    model: GraphicalModel,
    measured: Sequence[tuple[str, ...]],
    sigma: float,
) -> LoadedModel:
    loaded = LoadedModel(
        dataset_id=dataset_id,
        version=1,
        model=model,
        schema=schema,
        fitted_at=datetime.now(UTC),
        solver="bench",
        iterations=0,
        loss=0.0,
        seconds=0.0,
        cliques=model.cliques,
        high_water=0,
        measurements=tuple(
            CoveredMeasurement(i, i + 1, tuple(a), "gaussian", sigma)
            for i, a in enumerate(measured)
        ),
    )
    loaded.model.calibrated_tree  # noqa: B018 — belief propagation once, as the service does
    return loaded


def adult_model() -> tuple[LoadedModel, float]:
    sizes = json.loads((DATA / "adult-domain.json").read_text())
    domain = Domain.from_sizes(sizes)
    with np.load(DATA / "adult-measurements-sigma10.npz", allow_pickle=False) as archive:
        sigma = float(archive["sigma"])
        measurements = [
            Measurement(tuple(k.split("|")), np.rint(archive[k]), "gaussian", sigma)
            for k in archive.files
            if k != "sigma"
        ]
    started = time.perf_counter()
    model, _ = fit(domain, measurements)
    seconds = time.perf_counter() - started
    schema = parse_schema(sizes)
    return loaded_model(
        "adult", schema, model, [m.attributes for m in measurements], sigma
    ), seconds


def scale_model(rows: int, sigma: float, iterations: int) -> tuple[LoadedModel, dict[str, float]]:
    network = make_network(40, seed=7)
    schema = parse_schema(network.schema())
    domain = schema.domain()
    rng = np.random.default_rng(3)
    started = time.perf_counter()
    codes = network.sample(rows, np.random.default_rng(12))
    sampled = time.perf_counter() - started
    marginals = [(a,) for a in network.names] + [tuple(f) for f in network.families() if len(f) > 1]
    measurements = []
    for attrs in marginals:
        index = [network.names.index(a) for a in attrs]
        shape = domain.shape(attrs)
        flat = np.ravel_multi_index(tuple(codes[:, i].astype(np.intp) for i in index), shape)
        truth = np.bincount(flat, minlength=int(np.prod(shape)))
        noisy = truth + np.rint(rng.normal(0, sigma, truth.size))
        measurements.append(Measurement(attrs, noisy, "gaussian", sigma))
    del codes
    started = time.perf_counter()
    model, _ = fit(domain, measurements, max_iterations=iterations)
    fitted = time.perf_counter() - started
    loaded = loaded_model("scale", schema, model, marginals, sigma)
    return loaded, {"sample_seconds": round(sampled, 1), "fit_seconds": round(fitted, 1)}


def paired_rates(
    first: Callable[[], object], second: Callable[[], object], seconds: float
) -> tuple[tuple[float, float], tuple[float, float]]:
    """(answers per second, median ms) of each call, the two alternated for about
    `seconds` so that both see the same machine (it may be shared)."""
    first()  # warm: plans cached, as a served model's are after its first queries
    second()
    times: tuple[list[float], list[float]] = ([], [])
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline or len(times[0]) < 3:
        for call, spent in zip((first, second), times, strict=True):
            started = time.perf_counter()
            call()
            spent.append(time.perf_counter() - started)
    return tuple(  # type: ignore[return-value]
        (len(spent) / sum(spent), statistics.median(spent) * 1000) for spent in times
    )


def overhead_ms(
    loaded: LoadedModel, text: str, names: tuple[str, str], repeats: int
) -> dict[str, float]:
    parse, compile_ = [], []
    for _ in range(repeats):
        started = time.perf_counter()
        statement = sql.read_statement(sql.parse(text))  # cold: no statement cache
        middle = time.perf_counter()
        answers.prepare_sql(loaded, statement, table_names=names, max_cells=MAX_CELLS)
        ended = time.perf_counter()
        parse.append(middle - started)
        compile_.append(ended - middle)
    return {
        "parse_ms": round(statistics.median(parse) * 1000, 3),
        "compile_ms": round(statistics.median(compile_) * 1000, 3),
    }


def run_questions(
    loaded: LoadedModel, questions: list[Question], names: tuple[str, str], seconds: float
) -> dict[str, Any]:
    results: dict[str, Any] = {}
    for name, text, specs in questions:
        sql_result = answers.sql_answer(loaded, text, table_names=names, max_cells=MAX_CELLS)
        (sql_rate, sql_ms), (queries_rate, queries_ms) = paired_rates(
            lambda t=text: answers.sql_answer(loaded, t, table_names=names, max_cells=MAX_CELLS),
            lambda s=specs: answers.queries_answer(loaded, s, max_cells=MAX_CELLS),
            seconds,
        )
        results[name] = {
            "sql_answers_per_s": round(sql_rate, 1),
            "queries_answers_per_s": round(queries_rate, 1),
            "sql_median_ms": round(sql_ms, 3),
            "queries_median_ms": round(queries_ms, 3),
            "factored_queries": sql_result["factored_queries"],
            "rows": len(sql_result["rows"]),
            **overhead_ms(loaded, text, names, 50),
        }
    sql_rates = [r["sql_answers_per_s"] for r in results.values()]
    query_rates = [r["queries_answers_per_s"] for r in results.values()]
    return {
        "questions": results,
        "sql_answers_per_s_median": round(statistics.median(sql_rates), 1),
        "queries_answers_per_s_median": round(statistics.median(query_rates), 1),
        "parse_plus_compile_ms_median": round(
            statistics.median(r["parse_ms"] + r["compile_ms"] for r in results.values()), 3
        ),
    }


async def _alternate_rounds(
    url: str, authorization: str, requests: dict[str, tuple[str, str, bytes]], seconds: float
) -> dict[str, dict[str, float]]:
    """Each request repeated in rounds of a second, alternately, on one connection, until
    each has had `seconds`: per request, answers per second and the median ms."""
    from queries import Connection  # bench/queries.py: a minimal keep-alive client

    parsed = httpx.URL(url)
    connection = Connection(parsed.host, parsed.port or 80, authorization)
    spent: dict[str, list[float]] = {name: [] for name in requests}
    for name, (method, target, body) in requests.items():  # warm: the plans, the model
        status, payload = await connection.request(method, target, body)
        if status != 200:
            raise RuntimeError(f"{name}: {status} {payload[:300]!r}")
    while min(sum(times) for times in spent.values()) < seconds:
        for name, (method, target, body) in requests.items():
            times = spent[name]
            round_end = time.perf_counter() + 1.0
            while time.perf_counter() < round_end:
                started = time.perf_counter()
                status, _ = await connection.request(method, target, body)
                times.append(time.perf_counter() - started)
                if status != 200:
                    raise RuntimeError(f"{name}: {status}")
    await connection.close()
    return {
        name: {
            "answers_per_s": round(len(times) / sum(times), 1),
            "median_ms": round(statistics.median(times) * 1000, 3),
        }
        for name, times in spent.items()
    }


def http_rates(pair: tuple[str, str], seconds: float) -> dict[str, Any]:
    """`GET /marginals` against `POST /sql` for one pair of Adult's attributes over HTTP."""
    import tempfile

    from queries import Server, seed_fixed_measurements, setup_over_api

    with tempfile.TemporaryDirectory() as workdir:
        server = Server(Path(workdir), embedded_worker=False)
        try:
            server.wait_ready()
            ids = setup_over_api(server, grant_rho=1.0)
            seed_fixed_measurements(server.database_url, ids["tenant_id"], ids["dataset_id"])
            prefix = f"/v1/datasets/{ids['dataset_id']}"
            a, b = pair
            text = f'SELECT "{a}", "{b}", COUNT(*) FROM adult GROUP BY "{a}", "{b}"'
            requests = {
                "marginals": ("GET", f"{prefix}/marginals?attrs={a},{b}", b""),
                "sql": ("POST", f"{prefix}/sql", json.dumps({"query": text}).encode()),
            }
            rates = asyncio.run(
                _alternate_rounds(server.url, f"Bearer {ids['api_key']}", requests, seconds)
            )
        finally:
            server.stop()
    return {
        "pair": list(pair),
        "sql": text,
        **{f"{name}_{key}": value for name, row in rates.items() for key, value in row.items()},
        "sql_to_marginals": round(
            rates["sql"]["answers_per_s"] / rates["marginals"]["answers_per_s"], 3
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0, help="per question and path")
    parser.add_argument("--scale-rows", type=int, default=2_000_000)
    parser.add_argument("--scale-iterations", type=int, default=200)
    parser.add_argument("--sigma", type=float, default=20.0, help="scale model's noise σ")
    parser.add_argument("--skip-scale", action="store_true")
    parser.add_argument("--skip-in-process", action="store_true")
    parser.add_argument("--http-seconds", type=float, default=5.0, help="per route; 0: skip")
    parser.add_argument("--http-pair", default="education-num,occupation")
    args = parser.parse_args()
    report: dict[str, Any] = {"path": "in-process service calls (no HTTP)"}
    if args.http_seconds > 0:
        first, second = args.http_pair.split(",")
        report["http"] = http_rates((first, second), args.http_seconds)
        print(f"http: {json.dumps(report['http'])}", file=sys.stderr, flush=True)
    if args.skip_in_process:
        print(json.dumps(report))
        return
    adult, adult_fit = adult_model()
    report["adult"] = {
        "fit_seconds": round(adult_fit, 1),
        "cliques": len(adult.model.cliques),
        **run_questions(adult, ADULT_QUESTIONS, ("adult", "adult"), args.seconds),
    }
    print(f"adult: {json.dumps(report['adult'])}", file=sys.stderr, flush=True)
    if not args.skip_scale:
        scale, timings = scale_model(args.scale_rows, args.sigma, args.scale_iterations)
        report["scale"] = {
            "rows": args.scale_rows,
            "attributes": 40,
            "fit_iterations_max": args.scale_iterations,
            "cliques": len(scale.model.cliques),
            **timings,
            **run_questions(scale, scale_questions(scale.schema), ("scale", "scale"), args.seconds),
        }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
