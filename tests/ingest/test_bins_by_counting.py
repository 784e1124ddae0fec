"""`ColumnEncoder.bin_numbers` counts the edges a number reaches; it gives exactly the
codes of a binary search over the edges (the last bin closed, clip, NaN, ±inf, -0.0 and
numbers next to every edge)."""

from __future__ import annotations

import numpy as np
import pytest

from app.ingest.columns import ColumnEncoder
from app.schema import Attribute


@pytest.mark.parametrize("clip", [False, True])
@pytest.mark.parametrize(
    "edges", [[0, 1], [0, 18, 65, 120], [-5, -1, 0, 0.5, 3, 1e9], list(range(40))]
)
def test_counting_edges_equals_the_binary_search(edges: list[float], clip: bool) -> None:
    encoder = ColumnEncoder(Attribute.numeric("x", edges, clip))
    rng = np.random.default_rng(len(edges))
    at = np.asarray(edges, dtype=np.float64)
    x = np.concatenate(
        [
            rng.uniform(at[0] - 3, at[-1] + 3, 5000),
            at,
            np.nextafter(at, np.inf),
            np.nextafter(at, -np.inf),
            [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e300, -1e300],
        ]
    )
    fast = encoder.bin_numbers(x)
    np.testing.assert_array_equal(fast, encoder._search_bins(x))
    assert fast[-7] == -1  # NaN has no bin, clipped or not
    assert fast[5000 + len(edges) - 1] == len(edges) - 2  # e_k is in the last bin
