"""Prometheus metrics: what each process observes, and how `/metrics` gathers them.

Events are counted in the process where they happen, in one registry object
(`REGISTRY`) owned by this module, so tests and several app instances in one
process do not collide with prometheus-client's global default registry:

- API: requests and latency by route template and status, 5xx responses;
- ledger (API and workers): ρ charged and refunded by dataset, counted when the
  transaction that wrote the entry commits (a rolled-back charge never happened);
- worker: job duration by kind and outcome, queue wait (creation → first claim), fit
  duration and iterations, measurements released by dataset.

State that belongs to the whole deployment (jobs queued/running, the oldest queued
job's age, each dataset's model size) is read from the database when `/metrics` is
scraped (`app.services.gauges`), so every replica reports the same truth.

Worker processes started by `privq serve` write their metrics to a private
directory (prometheus-client's multiprocess mode, switched on for the children
only); the API's `/metrics` merges them into its own. A standalone `privq worker`
serves its metrics itself (`--metrics-port`).

Names follow Prometheus conventions: `privq_` prefix, base units (seconds), `_total`
on counters only.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector
from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

# No `*_created` series: in the text format each is one more line per label set, and
# Prometheus ignores them (it knows when a counter reset from its value dropping).
disable_created_metrics()  # type: ignore[no-untyped-call]

REGISTRY = CollectorRegistry(auto_describe=True)

HTTP_REQUESTS = Counter(
    "privq_http_requests_total",
    "HTTP requests served, by method, route template and status code.",
    ["method", "route", "status"],
    registry=REGISTRY,
)
HTTP_LATENCY = Histogram(
    "privq_http_request_duration_seconds",
    "HTTP request latency, by method and route template.",
    ["method", "route"],
    registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
)
HTTP_SERVER_ERRORS = Counter(
    "privq_http_server_errors_total",
    "HTTP responses with a 5xx status, by method and route template.",
    ["method", "route"],
    registry=REGISTRY,
)
RHO_CHARGED = Counter(
    "privq_rho_charged_total",
    "Privacy budget ρ charged in committed ledger entries, by dataset (refunds not subtracted).",
    ["dataset_id"],
    registry=REGISTRY,
)
RHO_REFUNDED = Counter(
    "privq_rho_refunded_total",
    "Privacy budget ρ given back by committed refund entries, by dataset.",
    ["dataset_id"],
    registry=REGISTRY,
)
LEDGER_CHARGES = Counter(
    "privq_ledger_entries_total",
    "Committed ledger entries, by kind (charge or refund).",
    ["kind"],
    registry=REGISTRY,
)
MEASUREMENTS = Counter(
    "privq_measurements_total",
    "Noisy marginals released (stored) by workers, by dataset and noise.",
    ["dataset_id", "noise"],
    registry=REGISTRY,
)
JOB_DURATION = Histogram(
    "privq_job_duration_seconds",
    "Time from a job's first claim to its end, by kind and outcome.",
    ["kind", "status"],
    registry=REGISTRY,
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600),
)
JOB_QUEUE_WAIT = Histogram(
    "privq_job_queue_wait_seconds",
    "Time a job waited in the queue before a worker first claimed it, by kind.",
    ["kind"],
    registry=REGISTRY,
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600),
)
FIT_DURATION = Histogram(
    "privq_fit_duration_seconds",
    "Wall time of a Private-PGM model fit, by solver.",
    ["solver"],
    registry=REGISTRY,
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900),
)
FIT_ITERATIONS = Histogram(
    "privq_fit_iterations",
    "Iterations of a Private-PGM model fit, by solver.",
    ["solver"],
    registry=REGISTRY,
    buckets=(5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000),
)

CONTENT_TYPE = CONTENT_TYPE_LATEST

# Key in Session.info under which committed-only observations wait for the commit.
PENDING_KEY = "privq_pending_metrics"


def record_pending_ledger_entry(session: Session, kind: str, rho: float, dataset_id: str) -> None:
    """Called by the ledger after flushing an entry; counted once the session commits."""
    session.info.setdefault(PENDING_KEY, []).append(("ledger", kind, rho, dataset_id))


def record_pending_measurement(session: Session, dataset_id: str, noise: str) -> None:
    """Called when a measurement row is flushed; counted once the session commits."""
    session.info.setdefault(PENDING_KEY, []).append(("measurement", noise, 0.0, dataset_id))


def _count_committed(session: Session) -> None:
    for what, kind, rho, dataset_id in session.info.pop(PENDING_KEY, []):
        if what == "measurement":
            MEASUREMENTS.labels(dataset_id=dataset_id, noise=kind).inc()
            continue
        LEDGER_CHARGES.labels(kind=kind).inc()
        if rho > 0:
            RHO_CHARGED.labels(dataset_id=dataset_id).inc(rho)
        elif rho < 0:
            RHO_REFUNDED.labels(dataset_id=dataset_id).inc(-rho)


def _forget_rolled_back(session: Session, *_args: Any) -> None:
    session.info.pop(PENDING_KEY, None)


def install_session_hooks(factory: sessionmaker[Session]) -> None:
    """Count ledger entries and measurements when sessions made by `factory` commit."""
    if not event.contains(factory, "after_commit", _count_committed):
        event.listen(factory, "after_commit", _count_committed)
        event.listen(factory, "after_rollback", _forget_rolled_back)


def observe_job_claimed(kind: str, queued_seconds: float) -> None:
    JOB_QUEUE_WAIT.labels(kind=kind).observe(max(0.0, queued_seconds))


def observe_job_finished(kind: str, status: str, seconds: float) -> None:
    JOB_DURATION.labels(kind=kind, status=status).observe(max(0.0, seconds))


def observe_fit(solver: str, seconds: float, iterations: int) -> None:
    FIT_DURATION.labels(solver=solver).observe(max(0.0, seconds))
    FIT_ITERATIONS.labels(solver=solver).observe(max(0, iterations))


# -- gathering ----------------------------------------------------------------------------

# Directories where this process's embedded worker children write their metrics.
_child_directories: list[str] = []


def add_child_directory(path: str) -> None:
    _child_directories.append(path)


def remove_child_directory(path: str) -> None:
    if path in _child_directories:
        _child_directories.remove(path)


def _child_metrics() -> Iterator[Metric]:
    from prometheus_client.multiprocess import MultiProcessCollector

    for path in list(_child_directories):
        if os.path.isdir(path):
            collector = MultiProcessCollector(None, path=path)  # type: ignore[no-untyped-call]
            yield from collector.collect()  # type: ignore[no-untyped-call]


def _merge(families: Iterable[Metric]) -> list[Metric]:
    """One family per name: samples with the same name and labels are added up.

    A worker child's counters and histograms carry the same names as the parent's;
    the exposition format allows each family once, so their samples are summed.
    """
    merged: dict[str, Metric] = {}
    for family in families:
        known = merged.get(family.name)
        if known is None:
            copy = Metric(family.name, family.documentation, family.type, family.unit)
            copy.samples = list(family.samples)
            merged[family.name] = copy
            continue
        index = {(s.name, tuple(sorted(s.labels.items()))): i for i, s in enumerate(known.samples)}
        for sample in family.samples:
            key = (sample.name, tuple(sorted(sample.labels.items())))
            if sample.name.endswith("_created"):
                continue  # creation times do not add up
            at = index.get(key)
            if at is None:
                known.samples.append(sample)
            else:
                old = known.samples[at]
                known.samples[at] = old._replace(value=old.value + sample.value)
    return list(merged.values())


class _Exposition:
    """What `generate_latest` reads: this process's metrics, its children's, and extras."""

    def __init__(self, extra: Iterable[Collector]) -> None:
        self.extra = list(extra)

    def collect(self) -> Iterator[Metric]:
        yield from _merge([*REGISTRY.collect(), *_child_metrics()])
        for collector in self.extra:
            yield from collector.collect()


def render_latest(*extra: Collector) -> bytes:
    """The text exposition of everything this process knows, plus `extra` collectors."""
    return generate_latest(_Exposition(extra))
