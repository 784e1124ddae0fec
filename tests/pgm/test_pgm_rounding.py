"""Synthetic records by rounding: clique marginals within the rounding bound, sampling error
as theory says for i.i.d. draws, determinism, and memory flat in the number of rows."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from app.pgm.calibrated_tree import CalibratedTree
from app.pgm.domain import Domain
from app.pgm.estimation import fit
from app.pgm.measurement import Measurement
from app.pgm.model import GraphicalModel
from app.pgm.rounding import allocate, error_bounds, largest_remainder, rounded_chunks

DOMAIN = Domain(("a", "b", "c", "d", "e", "f"), (3, 4, 2, 5, 3, 2))


def _table(records: np.ndarray, attrs: tuple[str, ...], domain: Domain = DOMAIN) -> np.ndarray:
    flat = np.ravel_multi_index(
        tuple(records[:, domain.index(a)] for a in attrs), domain.shape(attrs)
    )
    return np.bincount(flat, minlength=domain.cells(attrs)).reshape(domain.shape(attrs))


@pytest.fixture(scope="module")
def model() -> GraphicalModel:
    """A model fitted to noisy measurements of correlated data: a cycle (so a chordal
    clique), a chain, and an attribute (f) no measurement touches."""
    rng = np.random.default_rng(11)
    data = rng.integers(0, DOMAIN.sizes, size=(4000, len(DOMAIN)))
    data[:2000, 1] = data[:2000, 0]
    data[:2500, 3] = (data[:2500, 2] + data[:2500, 1]) % 5
    data[1000:3000, 4] = data[1000:3000, 3] % 3
    sets = [("a", "b"), ("b", "c", "d"), ("d", "e"), ("a", "e")]
    measurements = [
        Measurement(
            s,
            _table(data, s).ravel() + rng.laplace(0, 3.0, DOMAIN.cells(s)),
            "laplace",
            3.0,
        )
        for s in sets
    ]
    fitted, _ = fit(DOMAIN, measurements)
    return fitted


def _records(tree: CalibratedTree, rows: int, seed: int, chunk_rows: int = 997) -> np.ndarray:
    return np.concatenate(list(rounded_chunks(tree, rows, seed, chunk_rows=chunk_rows)))


def test_every_clique_marginal_is_the_models_within_the_rounding_bound(
    model: GraphicalModel,
) -> None:
    tree = model.calibrated_tree
    rows = 12_345
    records = _records(tree, rows, seed=5)
    assert records.shape == (rows, len(DOMAIN))
    bounds = error_bounds(tree)
    for clique in tree.cliques:
        error = np.abs(_table(records, clique) - rows * model.probabilities(clique))
        assert (error <= bounds[clique] + 1e-9).all(), clique
        assert error.max() < 3.0, clique  # and in practice about one record
    # The unmeasured attribute and the chord's marginals are the model's too.
    for attrs in [("f",), ("a", "d"), ("c", "e")]:
        in_clique = any(set(attrs) <= set(c) for c in tree.cliques)
        error = np.abs(_table(records, attrs) - rows * model.probabilities(attrs)).max()
        assert error < (3.0 if in_clique else 0.05 * rows), attrs


def test_records_realise_the_allocation_exactly_and_each_step_rounds_its_share(
    model: GraphicalModel,
) -> None:
    tree = model.calibrated_tree
    rows = 5000
    families = allocate(tree, rows, np.random.default_rng(9))
    assert sorted(f.attribute for f in families) == sorted(DOMAIN.attributes)
    records = _records(tree, rows, seed=9)
    for family in families:
        attrs = (*family.parents, family.attribute)
        realised = _table(records, attrs).reshape(family.counts.shape)
        assert (realised == family.counts).all(), attrs
        joint = model.probabilities(attrs).reshape(family.counts.shape)
        n_parent = family.counts.sum(axis=1)
        mass = joint.sum(axis=1)
        share = n_parent[:, None] * joint / np.where(mass > 0, mass, 1.0)[:, None]
        rows_with_mass = mass > 0
        assert (np.abs(family.counts - share)[rows_with_mass] < 1.0).all(), attrs


def _chi_square(counts: np.ndarray, expected: np.ndarray) -> float:
    keep = expected > 0
    return float((((counts - expected) ** 2)[keep] / expected[keep]).sum())


def test_sample_differs_as_sampling_theory_says_and_round_does_not(
    model: GraphicalModel,
) -> None:
    tree = model.calibrated_tree
    rows = 20_000
    rounded = _records(tree, rows, seed=1)
    sampled = model.sample(rows, seed=1)
    for clique in tree.cliques:
        expected = rows * model.probabilities(clique)
        cells = int((expected > 0).sum())
        # Pearson's statistic of an i.i.d. sample is χ² with cells − 1 degrees of freedom:
        # mean k, standard deviation √(2k). Rounding leaves it near zero.
        k = cells - 1
        assert abs(_chi_square(_table(sampled, clique), expected) - k) < 6 * np.sqrt(2 * k)
        assert _chi_square(_table(rounded, clique), expected) < 0.05 * k
        # Total variation: sampling's is about ½ Σ √(2 p (1 − p) / (π n)); rounding's is
        # at most half the cells over n.
        p = expected / rows
        sampling_tv = 0.5 * float(np.sqrt(2 * p * (1 - p) / (np.pi * rows)).sum())
        tv_sampled = 0.5 * float(np.abs(_table(sampled, clique) / rows - p).sum())
        tv_rounded = 0.5 * float(np.abs(_table(rounded, clique) / rows - p).sum())
        assert 0.6 * sampling_tv < tv_sampled < 1.6 * sampling_tv, clique
        assert tv_rounded <= 0.5 * p.size / rows


def test_pairs_no_clique_holds_follow_the_model_closer_than_a_sample(
    model: GraphicalModel,
) -> None:
    """Even dealing keeps the model's conditional independence across cliques."""
    tree = model.calibrated_tree
    rows = 20_000
    rounded = _records(tree, rows, seed=3, chunk_rows=4096)
    sampled = model.sample(rows, seed=3)
    pairs = [
        (x, y)
        for i, x in enumerate(DOMAIN.attributes)
        for y in DOMAIN.attributes[i + 1 :]
        if not any({x, y} <= set(c) for c in tree.cliques)
    ]
    assert len(pairs) >= 5

    def mean_tv(records: np.ndarray) -> float:
        return float(
            np.mean(
                [
                    0.5 * np.abs(_table(records, p) / rows - model.probabilities(p)).sum()
                    for p in pairs
                ]
            )
        )

    assert mean_tv(rounded) < 0.3 * mean_tv(sampled)


def test_same_seed_same_records_other_seed_other_records(model: GraphicalModel) -> None:
    tree = model.calibrated_tree
    first = _records(tree, 3000, seed=42)
    assert (first == _records(tree, 3000, seed=42)).all()
    other = _records(tree, 3000, seed=43)
    assert not (first == other).all()
    # Another seed: the same counts in every clique up to rounding, dealt otherwise.
    for clique in tree.cliques:
        assert np.abs(_table(first, clique) - _table(other, clique)).max() <= 2


def test_chunks_are_bounded_and_memory_does_not_grow_with_rows(model: GraphicalModel) -> None:
    tree = model.calibrated_tree
    sizes = [len(chunk) for chunk in rounded_chunks(tree, 10_001, 0, chunk_rows=1000)]
    assert sizes == [1000] * 10 + [1]
    assert list(rounded_chunks(tree, 0, 0)) == []
    # The allocation is over the model's cells, not over rows.
    small = sum(f.counts.size for f in allocate(tree, 10, np.random.default_rng(0)))
    large = sum(f.counts.size for f in allocate(tree, 10**9, np.random.default_rng(0)))
    # Each placement's table is at most its clique's size; sizes ≥ 2 halve each prefix.
    assert small == large <= 2 * sum(tree.clique_cells)
    # Peak memory, chunks dropped as they come (as the CSV stream does): the same for
    # fifty chunks as for one, and far below a table of all rows.
    chunk_rows = 4096

    def peak(rows: int) -> int:
        tracemalloc.start()
        try:
            total = 0
            for chunk in rounded_chunks(tree, rows, 0, chunk_rows=chunk_rows):
                total += len(chunk)
                del chunk
            assert total == rows
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    one, many = peak(chunk_rows), peak(50 * chunk_rows)
    assert many < 1.25 * one  # 1.05 today; anything per row would be ~50 times
    assert many < 50 * chunk_rows * len(DOMAIN) * 8 / 10


def test_largest_remainder_rounds_each_row_to_its_total() -> None:
    rng = np.random.default_rng(3)
    totals = np.array([0, 1, 7, 10, 1000])
    conditional = rng.dirichlet(np.ones(6), size=totals.size)
    conditional[3] = 1.0 / 6  # all fractions tie: which cells get the ceiling is random
    counts = largest_remainder(totals, conditional, rng)
    assert (counts.sum(axis=1) == totals).all()
    shares = totals[:, None] * conditional
    assert (np.abs(counts - shares) < 1.0).all()
    winners = {tuple(largest_remainder(totals, conditional, rng)[3]) for _ in range(20)}
    assert len(winners) > 1


def test_rows_must_be_a_non_negative_integer(model: GraphicalModel) -> None:
    with pytest.raises(ValueError, match="non-negative"):
        list(rounded_chunks(model.calibrated_tree, -1, 0))
    with pytest.raises(ValueError, match="positive"):
        list(rounded_chunks(model.calibrated_tree, 10, 0, chunk_rows=0))
