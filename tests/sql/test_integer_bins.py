"""Integer attributes whose codes are bins of integers (`"width"`): quantiles are one of
a bin's integers, a cut spreads a bin over its integers. Checked on an attribute that
only has the interface the schema gives binned attributes (`is_binned`,
`bin_interval(code) -> (low, high, closed_high)`)."""

from __future__ import annotations

import numpy as np
import pytest

from app.schema import Attribute
from app.services.answers.values import range_shares
from app.sql.pieces import cut_points, split
from app.sql.quantiles import code_intervals, extreme, quantile

# days 1–5, 6–10, 11–15
DAY = Attribute.integer("day", min=1, max=15, width=5)  # 1–5, 6–10, 11–15


def test_quantiles_of_integer_bins_are_integers_of_their_bin():
    intervals = code_intervals(DAY)
    assert intervals.integer and intervals.low.tolist() == [1, 6, 11]
    counts = np.array([5.0, 10.0, 5.0])
    # 10 of 20: 5 lie in 1–5, then 5 of the 10 spread over 6–10 (2 a day) → day 8.
    median = quantile(counts, intervals, 0.5)
    assert (median.value, median.low, median.high) == (8, 6, 10)
    assert quantile(counts, intervals, 1.0).value == 15
    assert quantile(counts, intervals, 0.0).value == 1
    assert extreme(counts, intervals, highest=True).value == 15


def test_a_cut_spreads_an_integer_bin_over_its_integers():
    intervals = code_intervals(DAY)
    assert cut_points(">", 7, integer=True) == (7.5,)
    assert cut_points("<", 7.2, integer=True) == (7.5,)
    assert cut_points("=", 7, integer=True) == (6.5, 7.5)
    pieces = split(intervals, 3, cut_points(">", 7, integer=True))
    # day 6–7 and day 8–10 of the middle bin
    assert pieces.share.tolist() == pytest.approx([1, 0.4, 0.6, 1])
    above = sum(1 << i for i, point in enumerate(pieces.point.tolist()) if point > 7)
    assert pieces.weights(above).tolist() == pytest.approx([0, 0.6, 1])


def test_a_range_keeps_the_share_of_each_bins_integers():
    shares = range_shares(DAY, 7, 12, "where")  # days 7–11
    assert shares.weights.tolist() == pytest.approx([0, 4 / 5, 1 / 5])
    assert shares.lower.tolist() == [] and shares.upper.tolist() == [1, 2]
    assert shares.approximate
    whole = range_shares(DAY, 6, 11, "where")
    assert whole.weights.tolist() == [0, 1, 0] and not whole.approximate
    open_ended = range_shares(DAY, None, 8, "where")
    assert open_ended.weights.tolist() == pytest.approx([1, 2 / 5, 0])
