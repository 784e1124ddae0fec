"""An analyst's commands, over HTTP: `privq measure|aim|budget|marginal|count|quantiles|
synthetic`,
and `privq datasets list|show` when a service is named (`jobs` and `sql` have theirs in
their own modules).

Each talks to a running service with the tenant's key (`app.commands.service`: `--url`
and `--key`, PRIVQ_URL and PRIVQ_KEY, or a profile) and prints what it answers as the
operator's commands print theirs (`app.commands.output`): a table or `field: value`
lines for people, `--json` for the API's JSON, `--csv` where the answer is a table.
DATASET is an id or a name that only one of the tenant's datasets has. Refusals are one
line on stderr (`privq: …`, with the API's code) and exit status 1.

Only `measure` and `aim` spend budget (`--dry-run` says what they would cost, charging
nothing); everything else is free.
"""

from __future__ import annotations

import argparse
import csv
import io
import sys
import time
from typing import Any

from app.commands.output import json_flag, render_record, render_table
from app.commands.service import (
    HttpCommand,
    Service,
    ServiceProblem,
    call,
    next_cursor,
    over_http,
    print_json,
    resolve_dataset,
    segment,
)

TERMINAL_STATUSES = ("succeeded", "failed", "cancelled")
WAIT_POLL_SECONDS = 0.5


def _dataset_path(service: Service, args: argparse.Namespace, tail: str) -> str:
    return f"/v1/datasets/{segment(resolve_dataset(service, args.dataset))}{tail}"


# ---- spending: measure and aim ----------------------------------------------------------


def _privacy_amount(args: argparse.Namespace) -> dict[str, Any]:
    amount = {
        "rho": args.rho,
        "epsilon": args.epsilon,
        "delta": args.delta,
        "sigma": getattr(args, "sigma", None),
        "scale": getattr(args, "scale", None),
    }
    return {name: value for name, value in amount.items() if value is not None}


def _marginals(texts: list[str], flag: str) -> list[list[str]]:
    marginals = [[name.strip() for name in text.split(",") if name.strip()] for text in texts]
    if not all(marginals):
        raise ServiceProblem(f"{flag}: name at least one attribute in each (e.g. age,sex)")
    return marginals


def _submit(args: argparse.Namespace, service: Service, tail: str, body: dict[str, Any]) -> int:
    path = _dataset_path(service, args, tail)
    headers = {"Idempotency-Key": args.idempotency_key} if args.idempotency_key else None
    params = {"dry_run": "true", "delta": args.delta} if args.dry_run else None
    answer = call(service, "POST", path, params=params, json_body=body, headers=headers).json()
    if args.dry_run or not args.wait:
        print_json(answer) if args.json else print(render_record(answer))
        if args.dry_run and not args.json:
            print("(a dry run: nothing was charged)")
        return 0
    print(f"privq: job {answer['job_id']} queued; waiting for it", file=sys.stderr)
    return _wait_for(service, str(answer["job_id"]), as_json=args.json)


def _wait_for(service: Service, job_id: str, *, as_json: bool) -> int:
    """Poll the job until it ends, showing its stage on stderr; exit 1 unless it succeeded."""
    shown = None
    while True:
        job = call(service, "GET", f"/v1/jobs/{segment(job_id)}").json()
        progress = job.get("progress") or {}
        stage = progress.get("stage")
        if stage and stage != shown and not as_json:
            print(f"privq: {job['status']}: {stage}", file=sys.stderr)
            shown = stage
        if job["status"] in TERMINAL_STATUSES:
            break
        time.sleep(WAIT_POLL_SECONDS)
    print_json(job) if as_json else print(render_record(job))
    return 0 if job["status"] == "succeeded" else 1


def measure(args: argparse.Namespace, service: Service) -> int:
    if args.within_bin_means and args.marginals:
        raise ServiceProblem("give marginals or --within-bin-means, not both")
    body: dict[str, Any]
    if args.within_bin_means:
        names = [name.strip() for name in args.within_bin_means]
        body = {"within_bin_means": names, "noise": args.noise}
    else:
        if not args.marginals:
            raise ServiceProblem("name at least one MARGINAL (or --within-bin-means ATTRIBUTE)")
        body = {"marginals": _marginals(args.marginals, "MARGINAL"), "noise": args.noise}
    return _submit(args, service, "/measurements", body | _privacy_amount(args))


def aim(args: argparse.Namespace, service: Service) -> int:
    body = _privacy_amount(args)
    if args.workload:
        body["workload"] = _marginals(args.workload, "--workload")
    if args.max_model_cells is not None:
        body["max_model_cells"] = args.max_model_cells
    return _submit(args, service, "/mechanisms/aim", body)


# ---- free: budget, marginal, count, quantiles, synthetic, sql --------------------------


def budget(args: argparse.Namespace, service: Service) -> int:
    answer = call(
        service, "GET", _dataset_path(service, args, "/budget"), params={"delta": args.delta}
    )
    body = answer.json()
    print_json(body) if args.json else print(render_record(body))
    return 0


def _number(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def marginal(args: argparse.Namespace, service: Service) -> int:
    names = ",".join(args.attributes)
    response = call(
        service, "GET", _dataset_path(service, args, "/marginals"), params={"attrs": names}
    )
    body = response.json()
    rows = [[*labels, count] for labels, count in zip(body["values"], body["counts"], strict=True)]
    columns = [*body["attributes"], "count"]
    if args.json:
        print_json(body)
    elif args.csv:
        print(_csv(columns, rows), end="")
    else:
        cells = [dict(zip(columns, [*row[:-1], _number(row[-1])], strict=True)) for row in rows]
        print(render_table(cells, columns))
        error = body.get("standard_error")
        footer = f"(model version {body['model_version']}; "
        footer += f"standard error {_number(error)})" if error is not None else "not measured)"
        print(footer)
    return 0


def count(args: argparse.Namespace, service: Service) -> int:
    params = [("where", condition) for condition in args.where]
    body = call(service, "GET", _dataset_path(service, args, "/count"), params=params).json()
    print_json(body) if args.json else print(render_record(body))
    return 0


def quantiles(args: argparse.Namespace, service: Service) -> int:
    params = {"attr": args.attribute, "p": args.p}
    body = call(service, "GET", _dataset_path(service, args, "/quantiles"), params=params).json()
    columns = ["p", "value", "bin"]
    rows = [
        [item["p"], item["value"], "" if item["bin"] is None else _interval(item["bin"])]
        for item in body["quantiles"]
    ]
    for name in ("min", "max"):
        if body[name] is not None:
            rows.append([name, body[name]["value"], _interval(body[name]["bin"])])
    if args.json:
        print_json(body)
    elif args.csv:
        print(_csv(columns, rows), end="")
    else:
        cells = [dict(zip(columns, [str(r[0]), _number(r[1]), r[2]], strict=True)) for r in rows]
        print(render_table(cells, columns))
        print(f"(model version {body['model_version']}; each value lies in its bin)")
    return 0


def _interval(ends: list[Any]) -> str:
    return f"[{_number(ends[0])}, {_number(ends[1])}]"


def synthetic(args: argparse.Namespace, service: Service) -> int:
    """The API's CSV as it is (a header row, then the records) to stdout or `--output`."""
    params = {"rows": args.rows, "method": args.method, "seed": args.seed}
    response = call(service, "GET", _dataset_path(service, args, "/synthetic"), params=params)
    if args.output:
        with open(args.output, "wb") as target:
            target.write(response.content)
        print(f"privq: wrote {args.output}", file=sys.stderr)
    else:
        sys.stdout.write(response.text)
    return 0


def _csv(columns: list[str], rows: list[list[Any]]) -> str:
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    writer.writerow(columns)
    writer.writerows(rows)
    return text.getvalue()


# ---- datasets (when a service is named; else the database: app.commands.datasets) -------

TENANT_DATASET_COLUMNS = ("id", "name", "created_at")


def list_datasets(args: argparse.Namespace, service: Service) -> int:
    params = {"limit": args.limit, "cursor": args.cursor}
    response = call(service, "GET", "/v1/datasets", params=params)
    datasets = response.json()
    print_json(datasets) if args.json else print(render_table(datasets, TENANT_DATASET_COLUMNS))
    cursor = next_cursor(response)
    if cursor is not None:
        print(f"privq: more results: add --cursor {cursor}", file=sys.stderr)
    return 0


def show_dataset(args: argparse.Namespace, service: Service) -> int:
    dataset_id = resolve_dataset(service, args.dataset_id)
    body = call(service, "GET", f"/v1/datasets/{segment(dataset_id)}").json()
    print_json(body) if args.json else print(render_record(body))
    return 0


# ---- the parsers ---------------------------------------------------------------------------


def _command(
    commands: argparse._SubParsersAction[Any], name: str, command: HttpCommand, help: str
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = commands.add_parser(name, help=help, description=help)
    parser.add_argument("dataset", metavar="DATASET", help="the dataset's id or unique name")
    parser.set_defaults(handler=None)  # no database form: a service is required
    over_http(parser, command)
    return parser


def _amount_flags(parser: argparse.ArgumentParser, *, noise: bool) -> None:
    parser.add_argument("--rho", type=float, default=None, help="ρ to spend (zCDP)")
    parser.add_argument("--epsilon", type=float, default=None, help="instead: ε at --delta")
    parser.add_argument("--delta", type=float, default=None, help="the δ of --epsilon")
    if noise:
        parser.add_argument("--sigma", type=float, default=None, help="instead: Gaussian σ")
        parser.add_argument("--scale", type=float, default=None, help="instead: Laplace scale")
    parser.add_argument(
        "--dry-run", action="store_true", help="say what it would cost and how accurate; free"
    )
    parser.add_argument("--wait", action="store_true", help="wait for the job to end")
    parser.add_argument(
        "--idempotency-key", default=None, help="a retry with the same key is charged once"
    )
    json_flag(parser)


def _format_flags(parser: argparse.ArgumentParser) -> None:
    formats = parser.add_mutually_exclusive_group()
    formats.add_argument("--json", action="store_true", help="print the HTTP API's JSON")
    formats.add_argument("--csv", action="store_true", help="print CSV")


def register(commands: argparse._SubParsersAction[Any]) -> None:
    """The analyst's HTTP-only commands (jobs and sql register their own parsers)."""
    measuring = _command(
        commands, "measure", measure, "measure noisy marginals (spends ρ; --dry-run is free)"
    )
    measuring.add_argument(
        "marginals", nargs="*", metavar="MARGINAL", help="attributes, comma-separated: age,sex"
    )
    measuring.add_argument(
        "--within-bin-means",
        action="append",
        default=[],
        metavar="ATTRIBUTE",
        help="instead: noisy sums of where values lie within a numeric attribute's bins, "
        "which answers then use instead of midpoints (repeatable)",
    )
    measuring.add_argument("--noise", choices=("gaussian", "laplace"), default="gaussian")
    _amount_flags(measuring, noise=True)

    aiming = _command(commands, "aim", aim, "AIM: spend ρ on marginals it chooses for a workload")
    aiming.add_argument(
        "--workload",
        action="append",
        default=[],
        metavar="MARGINAL",
        help="a marginal you will ask about (repeatable; default all 2-way)",
    )
    aiming.add_argument("--max-model-cells", type=int, default=None, metavar="N")
    _amount_flags(aiming, noise=False)

    budgeting = _command(commands, "budget", budget, "this key's grant: limit, spent, remaining")
    budgeting.add_argument("--delta", type=float, default=None, help="δ for the ε shown")
    json_flag(budgeting)

    marginal_parser = _command(commands, "marginal", marginal, "a marginal from the model (free)")
    marginal_parser.add_argument(
        "attributes", nargs="+", metavar="ATTRIBUTE", help="one or more attributes"
    )
    _format_flags(marginal_parser)

    counting = _command(commands, "count", count, "the model's count of matching records (free)")
    counting.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="FILTER",
        help="sex:F,M (values) or age:30..45 (a half-open range); repeatable",
    )
    json_flag(counting)

    quantile_parser = _command(
        commands, "quantiles", quantiles, "quantiles, min and max of one attribute (free)"
    )
    quantile_parser.add_argument("attribute", metavar="ATTRIBUTE", help="numeric or integer")
    quantile_parser.add_argument(
        "--p", default=None, metavar="P,P", help="fractions 0 to 1 (default 0.25,0.5,0.75)"
    )
    _format_flags(quantile_parser)

    drawing = _command(
        commands, "synthetic", synthetic, "synthetic records from the model, as CSV (free)"
    )
    drawing.add_argument("--rows", type=int, default=None, help="default: the model's total")
    drawing.add_argument("--method", choices=("round", "sample"), default=None)
    drawing.add_argument("--seed", type=int, default=None, help="the same seed, the same rows")
    drawing.add_argument("--output", default=None, metavar="FILE", help="write here, not stdout")
