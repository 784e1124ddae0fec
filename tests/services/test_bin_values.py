"""Representative values per code: midpoints, exact integers, measured means kept in bins."""

from __future__ import annotations

import numpy as np
import pytest

from app.schema import Attribute, SchemaError
from app.services.answers.bin_values import attribute_bin_values, is_binned


def test_numeric_midpoints_and_missing_code() -> None:
    attribute = Attribute.numeric("wage", [0, 10, 30], missing=True)
    values = attribute_bin_values(attribute)
    assert values.method == "midpoint" and is_binned(attribute)
    assert values.values[:2].tolist() == [5.0, 20.0] and np.isnan(values.values[2])
    assert values.low[:2].tolist() == [0.0, 10.0] and values.high[:2].tolist() == [10.0, 30.0]
    assert values.has_value.tolist() == [True, True, False]


def test_integer_codes_are_exact() -> None:
    values = attribute_bin_values(Attribute.integer("children", 4))
    assert values.method == "exact" and values.exact
    assert values.values.tolist() == values.low.tolist() == values.high.tolist()


def test_measured_means_stay_inside_their_bins() -> None:
    attribute = Attribute.numeric("wage", [0, 10, 30])
    values = attribute_bin_values(attribute, np.array([12.0, np.nan]))
    assert values.method == "within-bin means"
    # 12 is outside [0, 10]: kept at the edge; the unmeasured bin keeps its midpoint
    assert values.values.tolist() == [10.0, 20.0]
    with pytest.raises(ValueError):
        attribute_bin_values(attribute, np.array([1.0]))


def test_categorical_has_no_values() -> None:
    with pytest.raises(SchemaError):
        attribute_bin_values(Attribute.categorical("sex", ["f", "m"]))
