"""The cheap request log: same JSON line and fields, no work when the logger is off."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from app.api import observability
from app.logs import JsonFormatter, utc_timestamp


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def collected() -> Iterator[tuple[Collect, logging.Logger]]:
    logger = logging.getLogger("privq.request")
    handler = Collect()
    logger.addHandler(handler)
    level = logger.level
    try:
        yield handler, logger
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


@pytest.mark.parametrize(
    "created",
    [
        0.0,
        1.0005,
        1768921920.4339998,
        1700000000.9995,
        1700000000.9999996,
        1799999999.0004999,
        1234567890.123456,
    ],
)
def test_timestamps_are_written_as_datetime_writes_them(created: float) -> None:
    expected = datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds")
    assert utc_timestamp(created) == expected
    assert utc_timestamp(created) == expected  # again, from the cached second


def test_a_request_record_carries_its_fields_and_formats_as_before(collected) -> None:
    handler, logger = collected
    logger.setLevel(logging.INFO)
    observability.log_request("GET", "/v1/datasets/{dataset_id}/count", 200, 0.0012345)
    (record,) = handler.records
    assert (record.method, record.route, record.status, record.ms) == (
        "GET",
        "/v1/datasets/{dataset_id}/count",
        200,
        1.23,
    )
    line = json.loads(JsonFormatter().format(record))
    assert line == {
        "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
        "level": "info",
        "logger": "privq.request",
        "msg": "request",
        "method": "GET",
        "route": "/v1/datasets/{dataset_id}/count",
        "status": 200,
        "ms": 1.23,
    }


def test_no_record_is_made_when_request_logging_is_off(collected, monkeypatch) -> None:
    handler, logger = collected
    logger.setLevel(logging.WARNING)

    def refuse(*_args, **_kwargs):
        raise AssertionError("a record was built although the logger is off")

    monkeypatch.setattr(logger, "makeRecord", refuse)
    observability.log_request("GET", "/healthz", 200, 0.001)
    assert handler.records == []


def test_metric_children_are_looked_up_once_per_label_set() -> None:
    first = observability._children("GET", "/test/route/{x}", 204)
    assert observability._children("GET", "/test/route/{x}", 204) is first
    requests, latency = first
    before = requests._value.get()
    requests.inc()
    from app.metrics import HTTP_REQUESTS

    assert HTTP_REQUESTS.labels(method="GET", route="/test/route/{x}", status="204") is requests
    assert requests._value.get() == before + 1
    assert latency is not None
