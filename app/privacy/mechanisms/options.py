"""The knobs of a mechanism run (AIM's schedule, the fits between rounds), validated.

Everything here must be the same when a run is resumed: the service keeps AIM's
schedule fields with the job (`app.services.mechanisms`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from app.privacy.accounting import check_sensitivity


@dataclass(frozen=True)
class MechanismOptions:
    """Knobs of a run. Everything here must be the same when a run is resumed."""

    max_model_cells: int = 10**7
    rounds: int | None = None  # AIM: T (default rounds_per_attribute·d); MWEM: T (default d)
    rounds_per_attribute: int = 4  # AIM's T per attribute (the paper's: 16)
    # AIM's annealing step: once a measurement no longer moves the model by more than its
    # noise, σ is divided and ε multiplied by this (the paper's 2), so a round costs
    # anneal_factor² times the last (app.privacy.mechanisms.aim).
    anneal_factor: float = math.sqrt(2.0)
    # k, the rows one privacy unit may hold: every marginal's sensitivity (σ is k times a
    # record-level round's for the same ρ) and the factor on the selection scores'.
    sensitivity: int = 1
    measure_share: float = 0.9  # α: share of a round's ρ spent on measurement
    # AIM's α where the workload holds a marginal of three or more attributes (None:
    # `measure_share`): there the candidates are many more and differ more, and a larger
    # ε for each selection buys more than the noise it costs (docs/mechanisms.md).
    measure_share_3way: float | None = 0.8
    # AIM: share of ρ its one-way initialisation spends (None: the paper's α·d/T), and
    # the noise filter: a candidate r is left out of a round while its noise term (below)
    # exceeds `noise_filter` × N̂ (N̂: the rows the one-way round implies);
    # None: no filter and the paper's final round (app.privacy.mechanisms.aim, and
    # docs/mechanisms.md for the figures behind these values).
    init_share: float | None = 0.2
    noise_filter: float | None = 0.5
    # ... whose limit is twice `noise_filter` × N̂ while the one-way round's expected
    # noise, as a share of N̂, is at most `wide_filter_share` (None: never), and narrows
    # back linearly while that share rises by `wide_filter_ramp` more (0: at once).
    wide_filter_share: float | None = 0.2
    wide_filter_ramp: float = 0.05
    # AIM: the one-way round is measured in two halves of β/2·ρ each, and where the first
    # half's expected noise, as a share of N̂ (s), is at most `precise_oneway_share`, the
    # second half is not measured: its ρ goes to the selection rounds (None: one round
    # of β·ρ). Two halves tell the fit what one round of their summed ρ does.
    precise_oneway_share: float | None = 0.01
    # AIM's noise term in each candidate's quality and in the noise filter: the noise the
    # fit keeps of a measurement (app.privacy.mechanisms.fitted_noise); False: the
    # paper's raw √(2/π)·σ·n_r.
    fitted_noise: bool = True
    # AIM: a pair whose full marginal the noise filter leaves out is offered in coarse
    # form instead, each attribute's values in at most this many runs of consecutive
    # codes (app.privacy.mechanisms.coarse); None: never.
    coarse_groups: int | None = 3
    # AIM: no candidate weighs more than the heaviest pair (`workload.capped_weights`),
    # so with 3-way workloads the triples' weights do not set the selection's
    # sensitivity; False: the paper's w_r.
    pair_weight_cap: bool = True
    confidence: float = 0.95  # of the Theorem 4 bounds computed at the end
    # Fits between rounds steer selection and annealing. "auto" here: while the model is
    # at most `round_admm_max_cells` cells (app.pgm's own ADMM limit), ADMM to
    # convergence, so selection sees the model the measurements really imply (on Adult,
    # ε = 1, the workload error fell from 0.0416, median of 3 runs, to 0.0375, median of
    # 6; with ADMM only up to 50,000 cells it was 0.0403); above, a warm-started mirror-descent fit
    # of at most `fit_iterations` iterations, stopped early at `round_fit_tolerance`
    # (each round adds one measurement, and its cost is linear in the model's cells).
    # The final fit, which the result and the bounds refer to, has its own plan (below).
    fit_solver: str | None = "auto"
    round_admm_max_cells: int = 200_000
    fit_iterations: int = 300
    # A between-round mirror-descent fit is also bounded by its work, cells × iterations:
    # at most `round_fit_work` (and at least `round_min_iterations` iterations), so a
    # round costs about the same on a large model as on a small one instead of growing
    # with it (mirror descent does ~0.15 µs of work a cell-iteration on 2 cores).
    round_fit_work: int = 5_000_000
    round_min_iterations: int = 10
    # A between-round ADMM fit's time is about 0.3 µs a cell-iteration (2 cores), and
    # how many iterations it needs depends on the measurements. Once one of the run's
    # between-round ADMM fits is more than this many cells × iterations (about 2 s), its
    # later between-round fits use bounded mirror descent (models only grow within a
    # run). A count, not a time: the same on a quiet or a busy machine (`fitting`). On the
    # bench tables it leaves ADMM where a 2 s rule on a quiet machine did (docs/mechanisms.md).
    round_admm_max_work: int = 6_000_000
    final_fit_solver: str | None = None  # None (or "auto"): by the model's size, below
    # The final fit (`fitting.final_fit_plan`): ADMM (up to 200k cells) to
    # `fit_tolerance` within `final_fit_iterations`; above, accelerated mirror descent
    # warm-started from the last between-round model, of at most `final_fit_work` cells ×
    # iterations (but at least `final_min_iterations`; never more than
    # `final_fit_iterations`), stopped once the loss changes by less than
    # `final_fit_tolerance` of itself (docs/mechanisms.md has the figures behind these
    # values). A count, not a time: the same plan on a quiet or a busy machine.
    final_fit_iterations: int = 500
    final_fit_work: int = 75_000_000
    final_min_iterations: int = 100
    final_fit_tolerance: float = 1e-6
    fit_tolerance: float = 1e-7  # of ADMM fits (final, and between rounds)
    round_fit_tolerance: float = 1e-4  # of mirror-descent fits between rounds
    # Called after every iteration of every fit (a fit reads no records and spends
    # nothing, so it may stop there: a worker asked to stop raises out of it).
    checkpoint: Callable[[], None] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_model_cells < 1:
            raise ValueError("max_model_cells must be positive")
        if (self.rounds is not None and self.rounds < 1) or self.rounds_per_attribute < 1:
            raise ValueError("rounds and rounds_per_attribute must be positive")
        if not (math.isfinite(self.anneal_factor) and self.anneal_factor > 1.0):
            raise ValueError("anneal_factor must be a finite number above 1")
        check_sensitivity(self.sensitivity)
        if not 0.0 < self.measure_share < 1.0:
            raise ValueError("measure_share must be in (0, 1)")
        if self.measure_share_3way is not None and not 0.0 < self.measure_share_3way < 1.0:
            raise ValueError("measure_share_3way must be in (0, 1)")
        if self.init_share is not None and not 0.0 < self.init_share < 1.0:
            raise ValueError("init_share must be in (0, 1)")
        if self.noise_filter is not None and not self.noise_filter > 0.0:
            raise ValueError("noise_filter must be positive")
        if self.wide_filter_share is not None and not self.wide_filter_share > 0.0:
            raise ValueError("wide_filter_share must be positive")
        precise = self.precise_oneway_share
        if precise is not None and not (math.isfinite(precise) and precise > 0.0):
            raise ValueError("precise_oneway_share must be a positive finite number")
        if not (math.isfinite(self.wide_filter_ramp) and self.wide_filter_ramp >= 0.0):
            raise ValueError("wide_filter_ramp must be a finite number of at least 0")
        if not isinstance(self.fitted_noise, bool):
            raise ValueError("fitted_noise must be true or false")
        if not isinstance(self.pair_weight_cap, bool):
            raise ValueError("pair_weight_cap must be true or false")
        groups = self.coarse_groups
        if groups is not None and (type(groups) is not int or groups < 2):
            raise ValueError("coarse_groups must be an integer of at least 2")
        if not 0.0 < self.confidence < 1.0:
            raise ValueError("confidence must be in (0, 1)")
        if self.round_fit_work < 1 or self.round_min_iterations < 1:
            raise ValueError("round_fit_work and round_min_iterations must be positive")
        if self.round_admm_max_work < 1:
            raise ValueError("round_admm_max_work must be positive")
        if self.final_fit_iterations < 1 or self.final_fit_work < 1:
            raise ValueError("final_fit_iterations and final_fit_work must be positive")
        if self.final_min_iterations < 1:
            raise ValueError("final_min_iterations must be positive")
        if not (math.isfinite(self.final_fit_tolerance) and self.final_fit_tolerance >= 0.0):
            raise ValueError("final_fit_tolerance must be a finite number of at least 0")
