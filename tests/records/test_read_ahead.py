"""`read_ahead` yields what the reader yields, in order, hands over the reader's error,
and stops its thread when the consumer stops early."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from app.records.prefetch import read_ahead


def test_items_in_order_and_the_readers_error() -> None:
    assert list(read_ahead(iter(range(50)), depth=2)) == list(range(50))

    def failing() -> Iterator[int]:
        yield 1
        yield 2
        raise OSError("the file went away")

    seen = []
    with pytest.raises(OSError, match="went away"):
        for item in read_ahead(failing()):
            seen.append(item)
    assert seen == [1, 2]


def test_stopping_early_stops_the_thread() -> None:
    produced = []

    def endless() -> Iterator[int]:
        n = 0
        while True:
            produced.append(n)
            yield n
            n += 1

    before = threading.active_count()
    items = read_ahead(endless(), depth=1)
    assert next(items) == 0
    items.close()  # what a consumer's error or return does to the generator
    assert threading.active_count() == before
    assert len(produced) <= 4  # it read at most a few items ahead
