"""AIM's candidate weights capped at the heaviest pair's (`pair_weight_cap`)."""

from __future__ import annotations

import math
from itertools import combinations
from typing import Any

import pytest

from app.privacy.mechanisms import MechanismOptions, run_aim
from app.privacy.mechanisms import engine as engine_module
from app.privacy.mechanisms.aim import PAPER_SCHEDULE
from app.privacy.mechanisms.workload import (
    candidate_weights,
    capped_weights,
    normalise_workload,
)
from tests.privacy.privacy_fixtures import ALL_PAIRS, DOMAIN, FAST, synthetic

DEEP = ALL_PAIRS + list(combinations(DOMAIN.attributes, 3))


def _weights(workload: list[Any]) -> dict[tuple[str, ...], float]:
    return candidate_weights(DOMAIN, normalise_workload(DOMAIN, workload))


def test_no_candidate_weighs_more_than_the_heaviest_pair() -> None:
    """Over five attributes with every 2- and 3-way marginal a pair weighs 20 and a
    triple 30: capped, the triples weigh 20 and nothing else changes."""
    weights = _weights(DEEP)
    assert {w for r, w in weights.items() if len(r) == 2} == {20.0}
    assert {w for r, w in weights.items() if len(r) == 3} == {30.0}
    capped = capped_weights(weights)
    assert capped.keys() == weights.keys()
    for r, w in weights.items():
        assert capped[r] == (20.0 if len(r) == 3 else w)
    # a workload of pairs: the heaviest candidate is a pair, nothing moves
    pairs = _weights(ALL_PAIRS)
    assert capped_weights(pairs) == pairs
    # the cap is the heaviest pair's, whatever the workload's own weights
    weighted = _weights([(("a", "b"), 5.0), ("c", "d"), ("a", "b", "c")])
    capped = capped_weights(weighted)
    assert capped[("a", "b", "c")] == capped[("a", "b")] == weighted[("a", "b")] == 12.0
    assert weighted[("a", "b", "c")] == 14.0


def test_a_run_over_triples_selects_with_the_pairs_sensitivity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every selection's sensitivity is the pairs' weight, and so is every weight its
    Theorem 4 bounds divide by; with the paper's weights the triples set it."""
    seen: list[float] = []
    real = engine_module.theorem4_round_bound

    def spy(domain: Any, round_: Any, attrs: Any, weight: float, *rest: Any) -> float:
        seen.append(weight)
        return float(real(domain, round_, attrs, weight, *rest))

    monkeypatch.setattr(engine_module, "theorem4_round_bound", spy)
    options = MechanismOptions(**FAST)  # type: ignore[arg-type]
    result = run_aim(DOMAIN, synthetic(3), 0.5, DEEP, options=options)
    selections = [r.selection for r in result.rounds if r.selection is not None]
    assert selections
    assert all(s.sensitivity == 20.0 and s.chosen_weight <= 20.0 for s in selections)
    assert seen and all(w <= 20.0 for w in seen)
    assert all(math.isfinite(b.bound) for b in result.unmeasured_bounds.values())

    paper = MechanismOptions(pair_weight_cap=False, **FAST)  # type: ignore[arg-type]
    result = run_aim(DOMAIN, synthetic(3), 0.5, DEEP, options=paper)
    sensitivities = {r.selection.sensitivity for r in result.rounds if r.selection is not None}
    assert 30.0 in sensitivities


def test_the_cap_is_a_schedule_field_the_paper_does_without() -> None:
    """On by default; the paper's schedule (and a job stored without the key) keeps
    the paper's weights; anything but a bool is refused."""
    assert MechanismOptions().pair_weight_cap is True
    assert PAPER_SCHEDULE["pair_weight_cap"] is False
    with pytest.raises(ValueError, match="pair_weight_cap"):
        MechanismOptions(pair_weight_cap=1)  # type: ignore[arg-type]
