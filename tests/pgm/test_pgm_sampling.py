"""Exact sampling along the junction tree: frequencies, seeding, chunking, zeros."""

from __future__ import annotations

import numpy as np
import pytest
from pgm_inference_fixtures import KINDS, random_model
from scipy.stats import chisquare

from app.pgm.domain import Domain
from app.pgm.junction_tree import build_junction_tree
from app.pgm.model import GraphicalModel


def joint_frequencies(model: GraphicalModel, records: np.ndarray) -> np.ndarray:
    cells = np.ravel_multi_index(records.T, model.domain.sizes)
    return np.bincount(cells, minlength=model.domain.cells()).astype(float)


@pytest.mark.parametrize("kind", KINDS)
def test_sample_frequencies_follow_the_joint(kind: str) -> None:
    # Few cells (≤ 4 attributes of ≤ 3 values), many rows: a chi-square test has power.
    model = random_model(kind, seed=21, attributes=4, max_size=3)
    records = model.sample(rows=20_000, seed=1234)
    assert records.shape == (20_000, 4)
    assert np.issubdtype(records.dtype, np.integer)
    observed = joint_frequencies(model, records)
    expected = model.joint_probabilities().ravel() * 20_000
    assert chisquare(observed, expected).pvalue > 0.001


def test_sample_frequencies_catch_a_wrong_model() -> None:
    # The same test rejects samples of a different model: it is not vacuous.
    model = random_model("cyclic", seed=21, attributes=4, max_size=3)
    flipped = {c: -v for c, v in model.log_potentials.items()}
    other = GraphicalModel(model.domain, model.cliques, flipped, model.total)
    observed = joint_frequencies(model, other.sample(rows=20_000, seed=1234))
    expected = model.joint_probabilities().ravel() * 20_000
    assert chisquare(observed, expected).pvalue < 1e-6


def test_seeding_is_reproducible() -> None:
    model = random_model("tree", seed=3)
    first = model.sample(rows=500, seed=7)
    np.testing.assert_array_equal(first, model.sample(rows=500, seed=7))
    assert not np.array_equal(first, model.sample(rows=500, seed=8))


def test_default_rows_is_the_rounded_total_and_zero_rows_is_empty() -> None:
    model = random_model("cyclic", seed=5)
    noisy = GraphicalModel(model.domain, model.cliques, model.log_potentials, total=1234.6)
    assert noisy.sample(seed=0).shape == (1235, len(model.domain))
    assert noisy.sample(rows=0, seed=0).shape == (0, len(model.domain))
    with pytest.raises(ValueError):
        noisy.sample(rows=-1)


def test_streamed_chunks_concatenate_to_the_sample() -> None:
    model = random_model("cyclic", seed=6)
    chunks = list(model.sample_chunks(rows=1_000, seed=11, chunk_rows=300))
    assert [len(c) for c in chunks] == [300, 300, 300, 100]
    np.testing.assert_array_equal(
        np.concatenate(chunks), model.sample(rows=1_000, seed=11, chunk_rows=300)
    )


def test_codes_stay_in_range_and_zero_probability_cells_never_appear() -> None:
    domain = Domain(("a", "b", "c"), (3, 4, 2))
    tree = build_junction_tree(domain, [("a", "b"), ("b", "c")])
    rng = np.random.default_rng(0)
    potentials = {cl: rng.normal(size=domain.shape(cl)) for cl in tree.cliques}
    # Structural zeros: a=1 never occurs with b=2, and c=0 never with b=3.
    potentials[("a", "b")][1, 2] = -np.inf
    potentials[("b", "c")][3, 0] = -np.inf
    model = GraphicalModel(domain, tree.cliques, potentials, total=10_000.0)
    records = model.sample(seed=3)
    assert records.min() >= 0 and np.all(records.max(axis=0) < np.array(domain.sizes))
    assert not np.any((records[:, 0] == 1) & (records[:, 1] == 2))
    assert not np.any((records[:, 1] == 3) & (records[:, 2] == 0))
    joint = model.joint_probabilities()
    seen = joint_frequencies(model, records).reshape(domain.sizes)
    assert np.all(seen[joint == 0] == 0)
    # Cells expected at least ~10 times do appear.
    assert np.all(seen[joint * len(records) > 10] > 0)
