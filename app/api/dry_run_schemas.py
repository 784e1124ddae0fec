"""The dry run's answer: what a measurement or a mechanism would cost, its expected error
and, for a mechanism, its expected run time (public sizes only)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class MarginalEstimateOut(BaseModel):
    attributes: list[str]
    cells: int
    expected_abs_error_per_cell: float = Field(description="E|noise| on one count.")
    expected_l1_error: float = Field(description="Expected L1 error of the marginal, in counts.")


class WithinBinEstimateOut(BaseModel):
    attribute: str
    bins: int
    widest_bin: float = Field(description="The widest bin's width (high − low).")
    expected_abs_error_per_bin: float = Field(
        description="E|noise| on one bin's sum of fractions (a row's place in its bin is a "
        "fraction in [0, 1]); a bin of n rows and width w: its mean's error is about "
        "w · this / n."
    )


class RunTimeOut(BaseModel):
    """What a mechanism's `expected_seconds` is made of (public sizes only)."""

    selection_rounds: int = Field(description="Rounds that select and refit (at most).")
    seconds_per_round: float
    expected_model_cells: int = Field(
        description="The final model a run at this ρ typically builds: the assumption."
    )
    final_fit_seconds: float
    model_cells_at_most: int = Field(description="The largest model the request allows.")
    at_most_seconds: float = Field(description="The run time if the model grows that large.")
    note: str


class DryRunOut(BaseModel):
    """What a measurement or mechanism request would cost and how accurate it would be."""

    model_config = ConfigDict(
        json_schema_extra={
            "examples": [
                {
                    "dry_run": True,
                    "rho": 0.1,
                    "rho_exact": "0.1",
                    "delta": 1e-6,
                    "epsilon": 2.64,
                    "rho_remaining_before": 1.0,
                    "rho_remaining": 0.9,
                    "rho_remaining_exact": "0.9",
                    "affordable": True,
                    "noise": "gaussian",
                    "sigma": 3.1623,
                    "marginals": [
                        {
                            "attributes": ["age", "sex"],
                            "cells": 10,
                            "expected_abs_error_per_cell": 2.523,
                            "expected_l1_error": 25.23,
                        }
                    ],
                    "model_cells": 10,
                }
            ]
        }
    )
    dry_run: Literal[True]
    rho: float = Field(description="The ρ the request would be charged.")
    rho_exact: str
    delta: float
    epsilon: float = Field(description="ε of that ρ alone at `delta` (tight CKS conversion).")
    rho_remaining_before: float
    rho_remaining: float = Field(description="What would remain after it (negative: short).")
    rho_remaining_exact: str
    affordable: bool = Field(description="False if the grant has less than `rho` left.")
    noise: Literal["gaussian", "laplace"]
    sigma: float | None = None
    scale: float | None = None
    sensitivity: int = Field(
        default=1,
        description="k, the rows one privacy unit may hold: every marginal's sensitivity "
        "(σ costs k²/(2σ²), b costs (k/b)²/2; a selection's score sensitivity is ×k).",
    )
    marginals: list[MarginalEstimateOut] = Field(
        description="The marginals measured (a mechanism: its workload, if it measures them)."
    )
    within_bin_means: list[WithinBinEstimateOut] | None = Field(
        default=None, description="Within-bin means: what each attribute's release would be."
    )
    model_cells: int | None = Field(
        default=None, description="Cells of the dataset's model once these are measured."
    )
    mechanism: str | None = None
    epsilon_per_selection: float | None = Field(
        default=None, description="A mechanism's ε per exponential-mechanism selection."
    )
    rounds: int | None = Field(default=None, description="MWEM: its number of rounds.")
    rounds_at_most: int | None = Field(default=None, description="AIM: T, at most this many.")
    oneway: list[MarginalEstimateOut] | None = Field(
        default=None, description="AIM: the one-way marginals it measures first."
    )
    expected_seconds: float | None = Field(
        default=None,
        description="A mechanism: its expected run time once running, in seconds, from "
        "public sizes and ρ only (never the rows); `run_time` gives the basis.",
    )
    run_time: RunTimeOut | None = None
    note: str | None = None
