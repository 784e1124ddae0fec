"""AIM decides nothing by the clock: with the same noise and selections (a seeded stand-in for
OpenDP's samplers, which cannot be seeded), a run on a slow machine is the same run."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import count

import numpy as np
import pytest
from privacy_fixtures import ALL_PAIRS, DOMAIN, FAST, synthetic

from app.pgm import estimation
from app.privacy import noise, selection
from app.privacy.mechanisms import MechanismOptions, Round, fitting, run_aim

REAL_FIT = fitting.fit


def seeded_samplers(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """Noise and selections from numpy's generator seeded with `seed` (tests only)."""
    rng = np.random.default_rng(seed)

    def gaussian(values: np.ndarray, sigma: float) -> np.ndarray:
        counts = np.asarray(values, dtype=np.int64)
        return counts + np.rint(rng.normal(0.0, sigma, counts.shape)).astype(np.int64)

    def exponential(scores: np.ndarray, epsilon: float, sensitivity: float) -> int:
        logits = epsilon * np.asarray(scores, dtype=float) / (2.0 * sensitivity)
        weights = np.exp(logits - logits.max())
        return int(rng.choice(weights.size, p=weights / weights.sum()))

    monkeypatch.setattr(noise, "discrete_gaussian", gaussian)
    monkeypatch.setattr(selection, "exponential_mechanism", exponential)


def slow_clock() -> Iterator[float]:
    """A clock on which every reading is 100 s after the last: each fit looks minutes long."""
    return (100.0 * step for step in count())


def run(
    monkeypatch: pytest.MonkeyPatch, seed: int, options: MechanismOptions
) -> tuple[list[Round], list[tuple[str, int]]]:
    """AIM's rounds, and (solver, iterations) of each of its fits."""
    seeded_samplers(monkeypatch, seed)
    fits: list[tuple[str, int]] = []

    def recorded(*args: object, **kwargs: object) -> object:
        model, record = REAL_FIT(*args, **kwargs)  # type: ignore[arg-type]
        fits.append((record.solver, record.iterations))
        return model, record

    monkeypatch.setattr(fitting, "fit", recorded)
    result = run_aim(DOMAIN, synthetic(11), 0.5, ALL_PAIRS, options=options)
    return result.rounds, fits


def same_rounds(a: list[Round], b: list[Round]) -> bool:
    return len(a) == len(b) and all(
        (x.kind, x.attributes, x.sigma, x.epsilon, x.final)
        == (y.kind, y.attributes, y.sigma, y.epsilon, y.final)
        and np.array_equal(x.values, y.values)
        for x, y in zip(a, b, strict=True)
    )


def test_the_same_seed_gives_the_same_run_on_a_quiet_or_a_busy_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Small enough that ADMM is the between-round solver by the public-size rule.
    options = MechanismOptions(rounds=12, **FAST)  # type: ignore[arg-type]
    quiet_rounds, quiet_fits = run(monkeypatch, 3, options)
    clock = slow_clock()
    monkeypatch.setattr(estimation.time, "perf_counter", lambda: next(clock))
    busy_rounds, busy_fits = run(monkeypatch, 3, options)
    # The busy run's fits were timed minutes long (the old rule left ADMM after 2 s) ...
    assert len(quiet_fits) > 2 and "admm" in {solver for solver, _ in quiet_fits[:-1]}
    # ... and it made every choice the same: solvers, iterations, rounds, noise.
    assert busy_fits == quiet_fits
    assert same_rounds(busy_rounds, quiet_rounds)
    assert len([r for r in quiet_rounds if r.kind == "select+measure"]) >= 3


def test_another_seed_gives_another_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """The comparison above can fail: different draws make a different run."""
    options = MechanismOptions(rounds=12, **FAST)  # type: ignore[arg-type]
    first, _ = run(monkeypatch, 3, options)
    second, _ = run(monkeypatch, 4, options)
    assert not same_rounds(first, second)
