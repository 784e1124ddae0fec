"""Pause points: where a mechanism run may stop and resume from its stored rounds losing
nothing but time (the fair queue gives a slot away there). After every stored round but
the run's last selection round and what follows it, whose Theorem 4 bounds need the
estimates the run holds in memory."""

from __future__ import annotations

from privacy_fixtures import ALL_PAIRS, DOMAIN, FAST, synthetic

from app.privacy.mechanisms import MechanismOptions, Progress, Round, run_aim, run_mwem


def test_every_mwem_round_but_the_last_is_a_pause_point() -> None:
    seen: list[Progress] = []
    run_mwem(
        DOMAIN,
        synthetic(3),
        0.3,
        ALL_PAIRS[:4],
        options=MechanismOptions(rounds=4, **FAST),
        on_progress=seen.append,
    )
    measured = [p for p in seen if p.stage == "measured"]
    assert [p.pause_point for p in measured] == [True, True, True, False]
    assert not any(p.pause_point for p in seen if p.stage != "measured")


def test_aim_pauses_after_each_round_until_its_last_selection() -> None:
    seen: list[Progress] = []
    rounds: list[Round] = []
    result = run_aim(
        DOMAIN,
        synthetic(4),
        1.0,
        ALL_PAIRS,
        options=MechanismOptions(**FAST),
        on_progress=seen.append,
        on_round=rounds.append,
    )
    pauses = {p.round_index: p.pause_point for p in seen if p.stage == "measured"}
    assert sorted(pauses) == [r.index for r in rounds]
    last_selection = max(r.index for r in rounds if r.kind == "select+measure")
    # the one-way rounds and the selection rounds before the last: all pause points
    assert all(pauses[i] for i in range(last_selection))
    # the last selection round (when it knew it was the last) and the rest after it: none
    assert not any(pauses[i] for i in pauses if i > last_selection)
    assert not pauses[max(pauses)]
    assert result.rounds[-1].final
