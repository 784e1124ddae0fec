"""The fast encoders of free answers write the JSON the standard library would, and
never a non-finite number."""

from __future__ import annotations

import json

import numpy as np
import orjson
import pytest

from app.services.answers.common import NonFiniteAnswer, cell_labels, labels_json, numbers_json


def test_counts_encode_to_the_same_numbers_as_the_json_module() -> None:
    rng = np.random.default_rng(3)
    counts = np.round(rng.random(2_000) * 10.0 ** rng.integers(0, 9, 2_000), 3)
    counts[:3] = [0.0, 1e-3, 2_000_000.0]
    encoded = numbers_json(counts.reshape(40, 50))
    assert json.loads(encoded) == counts.tolist()


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_count_is_refused_not_written_as_null(bad: float) -> None:
    counts = np.array([1.0, bad, 3.0])
    with pytest.raises(NonFiniteAnswer):
        numbers_json(counts)


def test_labels_are_one_list_per_cell_in_row_major_order() -> None:
    encoded = labels_json([["a", "b"], ["x", "ÿ", '"q"']])
    assert json.loads(encoded) == [
        ["a", "x"],
        ["a", "ÿ"],
        ["a", '"q"'],
        ["b", "x"],
        ["b", "ÿ"],
        ["b", '"q"'],
    ]


@pytest.mark.parametrize(
    "label_lists",
    [
        [],
        [["only"]],
        [["a", "b", "c"]],
        [["a", "b"], []],
        [["é", "\u2028", 'x"y'], ["\\", "tab\t", ""], ["😀", "\x01", "z"]],
        [[f"[{i}, {i + 1})" for i in range(7)], ["M", "F"], ["x", "y", "z"], ["0", "1"]],
    ],
)
def test_labels_are_the_bytes_the_generic_encoder_writes(label_lists) -> None:
    # Escapes, non-ASCII, empty axes and 0 to 4 axes: byte for byte what orjson writes
    # for the list of cells, which is the standard JSON of the cells.
    assert labels_json(label_lists) == orjson.dumps(cell_labels(label_lists))
    assert json.loads(labels_json(label_lists)) == [list(c) for c in cell_labels(label_lists)]
