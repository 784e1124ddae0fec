"""Reading ahead: the next record batches are decoded while this one is counted.

Arrow decodes Parquet on its own threads and the engine encodes and counts on its
pool; read one after the other, each waits for the other. `read_ahead` runs the
reading in a thread of its own, at most `depth` batches ahead (so memory stays a few
batches), and hands over what it raised.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import TypeVar

T = TypeVar("T")

_DONE = object()
_POLL_SECONDS = 0.1


def read_ahead(batches: Iterator[T], depth: int = 2) -> Iterator[T]:
    """The same items as `batches`, produced by a background thread; closing the
    returned iterator early (or an error in the consumer) stops the thread."""
    ready: queue.Queue[object] = queue.Queue(maxsize=depth)
    stop = threading.Event()
    failure: list[BaseException] = []

    def produce() -> None:
        try:
            for item in batches:
                while not stop.is_set():
                    try:
                        ready.put(item, timeout=_POLL_SECONDS)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
        except BaseException as error:  # handed to the consumer, raised there
            failure.append(error)
        finally:
            while not stop.is_set():
                try:
                    ready.put(_DONE, timeout=_POLL_SECONDS)
                    break
                except queue.Full:
                    continue

    thread = threading.Thread(target=produce, name="privq-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item = ready.get()
            if item is _DONE:
                if failure:
                    raise failure[0]
                return
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        thread.join()
