"""Prometheus metrics: HTTP requests by route template and status, and ρ charged.

Metrics live in one registry object (`REGISTRY`) owned by this module so that tests
and several app instances in one process do not collide with prometheus-client's
global default registry.

ρ is counted when the transaction that wrote the charge commits, not when the charge
is flushed: a rolled-back charge never happened.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

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
RHO_CHARGED = Counter(
    "privq_rho_charged_total",
    "Privacy budget ρ charged in committed ledger entries (refunds not subtracted).",
    registry=REGISTRY,
)
RHO_REFUNDED = Counter(
    "privq_rho_refunded_total",
    "Privacy budget ρ given back by committed refund entries.",
    registry=REGISTRY,
)
LEDGER_CHARGES = Counter(
    "privq_ledger_entries_total",
    "Committed ledger entries, by kind (charge or refund).",
    ["kind"],
    registry=REGISTRY,
)

CONTENT_TYPE = CONTENT_TYPE_LATEST

# Key in Session.info under which the ledger records (kind, rho) pending commit.
PENDING_LEDGER_KEY = "privq_pending_ledger"


def record_pending_ledger_entry(session: Session, kind: str, rho: float) -> None:
    """Called by the ledger after flushing an entry; counted once the session commits."""
    session.info.setdefault(PENDING_LEDGER_KEY, []).append((kind, rho))


def _count_committed(session: Session) -> None:
    for kind, rho in session.info.pop(PENDING_LEDGER_KEY, []):
        LEDGER_CHARGES.labels(kind=kind).inc()
        if rho > 0:
            RHO_CHARGED.inc(rho)
        elif rho < 0:
            RHO_REFUNDED.inc(-rho)


def _forget_rolled_back(session: Session, *_args: Any) -> None:
    session.info.pop(PENDING_LEDGER_KEY, None)


def install_session_hooks(factory: sessionmaker[Session]) -> None:
    """Count ledger entries when sessions made by `factory` commit."""
    if not event.contains(factory, "after_commit", _count_committed):
        event.listen(factory, "after_commit", _count_committed)
        event.listen(factory, "after_rollback", _forget_rolled_back)


def render_latest() -> bytes:
    return generate_latest(REGISTRY)
