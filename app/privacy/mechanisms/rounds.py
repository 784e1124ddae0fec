"""Rounds: the persisted record of a mechanism run, one per measured marginal.

A mechanism run is a list of **rounds**. A round measures one marginal with discrete
Gaussian noise, after (kind "select+measure") choosing it with the exponential
mechanism, or without selection (kind "measure", AIM's one-way initialisation). Each
`Round` record is small and JSON-serialisable (`to_dict`/`from_dict`) and holds
everything a resumed run needs: the noisy values (never drawn again), σ and ε used,
the sensitivity k of its marginal (the rows one privacy unit may hold), its exact ρ
cost, the model's estimate of the chosen marginal before the round (to recompute the
annealing decision after a crash), and the selection statistics that AIM's Theorem 4
needs (`Selection`).

`check_replayed` refuses (RoundsMismatch) stored rounds that are not consecutive, of
another sensitivity than the run's, or whose recorded ρ does not match σ, ε and k.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from app.pgm.measurement import Measurement
from app.privacy.mechanisms.budget import exact_round_cost, round_cost
from app.privacy.mechanisms.coarse import Coarse

Attrs = tuple[str, ...]
RoundKind = Literal["measure", "select+measure"]


class RoundsMismatch(ValueError):
    """The stored rounds do not belong to this run (other budget, workload or options)."""


@dataclass(frozen=True)
class Selection:
    """What the exponential mechanism of one round saw (for AIM Theorem 4).

    `error_before` is ‖ỹ − M_r(p̂_{t−1})‖₁ for the chosen r (computable only after the
    measurement). The quality is w_r(‖M_r(D) − M_r(p̂)‖₁ − η_r): `bias` is b when the
    noise term is η_r = b·σ·n_r (the paper's AIM √(2/π), MWEM 0) and None when each
    candidate had its own (AIM's fitted noise, `fitted_noise`); `chosen_noise` is the
    chosen r's η_r (None in rounds stored before it was kept: b·σ·n_r).
    `workload_candidates` lists the workload marginals that were candidates this round
    (their weights and sizes follow from the workload and domain).
    """

    candidates: int
    sensitivity: float
    chosen_weight: float
    error_before: float
    bias: float | None
    workload_candidates: tuple[Attrs, ...]
    chosen_noise: float | None = None

    def __post_init__(self) -> None:
        if self.bias is None and self.chosen_noise is None:
            raise ValueError("a selection needs its noise term: a bias or the chosen's noise")

    def to_dict(self) -> dict[str, Any]:
        return {
            "candidates": self.candidates,
            "sensitivity": self.sensitivity,
            "chosen_weight": self.chosen_weight,
            "error_before": self.error_before,
            "bias": self.bias,
            "workload_candidates": [list(a) for a in self.workload_candidates],
            "chosen_noise": self.chosen_noise,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Selection:
        return cls(
            candidates=int(data["candidates"]),
            sensitivity=float(data["sensitivity"]),
            chosen_weight=float(data["chosen_weight"]),
            error_before=float(data["error_before"]),
            bias=None if data.get("bias") is None else float(data["bias"]),
            workload_candidates=tuple(tuple(a) for a in data["workload_candidates"]),
            chosen_noise=None if data.get("chosen_noise") is None else float(data["chosen_noise"]),
        )


class Priced:
    """The price of a round from its σ, ε and sensitivity k: a Gaussian measurement plus,
    if ε > 0, one selection (`Round`, and `engine.RoundAccess` before the round runs)."""

    sigma: float
    epsilon: float
    sensitivity: int

    @property
    def cost(self) -> float:
        """ρ in floats, for the run's running ledger (a stored round's must equal `rho`)."""
        return round_cost(self.sigma, self.epsilon, self.sensitivity)

    @property
    def exact_cost(self) -> Fraction:
        """The exact ρ of the σ, ε and k, as rationals of the floats used."""
        return exact_round_cost(self.sigma, self.epsilon, self.sensitivity)


@dataclass(frozen=True, eq=False)
class Round(Priced):
    """One completed round of a mechanism; persisted by the service as it happens.

    `sigma`/`epsilon` are what this round used (ε = 0 for "measure"); `annealed` says the
    annealing rule halved σ (doubled ε) going into this round; `final` marks the round
    that spent exactly the rest of the budget. The annealing decision *after* round t
    needs the model fitted with round t's measurement, which exists only after the
    round is stored (the noise must be stored before anything uses it), so it is the
    next round's `sigma`/`annealed`; after a crash it is recomputed from
    `estimate_before` and the refitted model (post-processing, no privacy cost).
    """

    index: int
    kind: RoundKind
    attributes: Attrs
    sigma: float
    epsilon: float
    rho: float
    values: np.ndarray  # noisy counts, int64, row-major over `attributes`
    annealed: bool = False
    final: bool = False
    estimate_before: np.ndarray | None = None  # M_r(p̂_{t−1}) of the chosen r
    selection: Selection | None = None
    sensitivity: int = 1  # k: rows per privacy unit (rounds stored without it had k = 1)
    coarse: Coarse | None = None  # a coarse marginal's groups (`values` are over them)

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", tuple(self.attributes))
        object.__setattr__(self, "values", np.asarray(self.values, dtype=np.int64).ravel())
        if self.estimate_before is not None:
            object.__setattr__(
                self, "estimate_before", np.asarray(self.estimate_before, dtype=float).ravel()
            )
        if self.kind not in ("measure", "select+measure"):
            raise ValueError(f"unknown round kind {self.kind!r}")
        if self.coarse is not None and self.coarse.attributes != self.attributes:
            raise ValueError("a coarse round's groups are of other attributes than its own")

    def measurement(self) -> Measurement:
        query = None if self.coarse is None else self.coarse.query
        values = self.values.astype(float)
        return Measurement(self.attributes, values, "gaussian", self.sigma, query=query)

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "kind": self.kind,
            "attributes": list(self.attributes),
            "sigma": self.sigma,
            "epsilon": self.epsilon,
            "rho": self.rho,
            "values": [int(v) for v in self.values],
            "annealed": self.annealed,
            "final": self.final,
            "estimate_before": None
            if self.estimate_before is None
            else [float(v) for v in self.estimate_before],
            "selection": None if self.selection is None else self.selection.to_dict(),
            "sensitivity": self.sensitivity,
        } | ({} if self.coarse is None else {"coarse": self.coarse.to_dict()})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Round:
        estimate = data.get("estimate_before")
        selection = data.get("selection")
        coarse = data.get("coarse")
        return cls(
            index=int(data["index"]),
            kind=data["kind"],
            attributes=tuple(data["attributes"]),
            sigma=float(data["sigma"]),
            epsilon=float(data["epsilon"]),
            rho=float(data["rho"]),
            values=np.asarray(data["values"], dtype=np.int64),
            annealed=bool(data.get("annealed", False)),
            final=bool(data.get("final", False)),
            estimate_before=None if estimate is None else np.asarray(estimate, dtype=float),
            selection=None if selection is None else Selection.from_dict(selection),
            sensitivity=int(data.get("sensitivity", 1)),
            coarse=None if coarse is None else Coarse.from_dict(data["attributes"], coarse),
        )


def check_replayed(rounds: Sequence[Round], sensitivity: int = 1) -> None:
    """Stored rounds must be consecutive, of the run's sensitivity, and their recorded ρ
    must match σ, ε and that sensitivity."""
    for position, r in enumerate(rounds):
        if r.index != position:
            raise RoundsMismatch(f"stored round {position} has index {r.index}")
        if r.sensitivity != sensitivity:
            raise RoundsMismatch(
                f"stored round {position} has sensitivity {r.sensitivity}, the run {sensitivity}"
            )
        if not math.isclose(r.rho, r.cost, rel_tol=1e-12, abs_tol=0.0):
            raise RoundsMismatch(f"stored round {position} records ρ {r.rho} but costs {r.cost}")
        if r.values.size == 0:
            raise RoundsMismatch(f"stored round {position} has no values")
        if r.coarse is not None and r.values.size != r.coarse.cells:
            raise RoundsMismatch(f"stored round {position} has values for other groups")
