"""Dry runs: what a measurement or mechanism request would cost and how accurate it would be.

`?dry_run=true` on `POST /measurements` and `/mechanisms/{aim,mwem}` validates the
request exactly as the real one (the same plan, the same model-size check), then
reads the grant's budget — and writes nothing: no ledger line, no job. It answers
with the ρ the request would be charged, ε at the request's δ, the noise scale, and
per marginal its cells and the expected absolute error per cell and over the
marginal (L1, in counts; `app.privacy.expected_error`), and the ρ that would remain.
A within-bin means request answers the same, with per attribute its bins and the
expected absolute error of a bin's noisy sum of fractions.

Every figure is at the dataset's sensitivity k, the rows one privacy unit may hold
(`app.services.unit_accounting`): the same ρ buys σ k times as large as on a dataset
whose unit is a row, and the expected errors grow with it; the answer says k.

For a mechanism, the marginals it will measure are not known in advance. The figures
are for its schedule: AIM measures every one-way marginal of the workload's
attributes at σ₀, then workload marginals at σ₀ or, once it anneals, smaller σ — so
σ₀'s errors bound those of every marginal it measures; MWEM measures one chosen
workload marginal per round at one σ. Its `expected_seconds` is the run time expected
from public sizes and ρ only, never the rows (`app.services.run_time`), and `run_time`
gives its basis and the figure for the largest model the request allows.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy.orm import Session

from app.pgm.domain import Domain
from app.privacy.accounting import epsilon_from_rho
from app.privacy.expected_error import expected_abs_error
from app.privacy.mechanisms.aim import aim_schedule
from app.privacy.mechanisms.budget import split_round
from app.privacy.mechanisms.mwem import mwem_rounds
from app.privacy.mechanisms.options import MechanismOptions
from app.schema import DatasetSchema
from app.schema.within_bins import code_intervals
from app.services import ledger, unit_accounting
from app.services import measurements as measurement_service
from app.services import mechanisms as mechanism_service
from app.services import within_bin_means as within_bin_service
from app.services.rho import units_to_decimal_str, units_to_rho
from app.services.run_time import expected_run_time


def marginal_estimates(
    domain: Domain, attribute_sets: Sequence[Sequence[str]], noise: str, scale: float
) -> list[dict[str, Any]]:
    """Per marginal: its cells and the expected absolute error per cell and in L1."""
    per_cell = expected_abs_error(noise, scale)  # type: ignore[arg-type]
    estimates = []
    for attrs in attribute_sets:
        cells = domain.cells(tuple(attrs))
        estimates.append(
            {
                "attributes": list(attrs),
                "cells": cells,
                "expected_abs_error_per_cell": per_cell,
                "expected_l1_error": per_cell * cells,
            }
        )
    return estimates


def _budget_after(
    session: Session, *, tenant_id: str, dataset_id: str, rho_units: int, delta: float
) -> dict[str, Any]:
    budget = ledger.budget(session, tenant_id=tenant_id, dataset_id=dataset_id)
    after = budget.remaining_units - rho_units
    return {
        "dry_run": True,
        "rho": units_to_rho(rho_units),
        "rho_exact": units_to_decimal_str(rho_units),
        "delta": delta,
        "epsilon": epsilon_from_rho(units_to_rho(rho_units), delta),
        "rho_remaining_before": units_to_rho(budget.remaining_units),
        "rho_remaining": units_to_rho(after),
        "rho_remaining_exact": units_to_decimal_str(after),
        "affordable": after >= 0,
    }


def measurement(
    session: Session,
    *,
    tenant_id: str,
    dataset_id: str,
    domain: Domain,
    plan: measurement_service.MeasurementPlan,
    delta: float,
    max_model_cells: int,
) -> dict[str, Any]:
    """The dry run of a planned measurement (the caller checked the tenant sees the dataset)."""
    # Only releases and the caller's own queued jobs count: others' queue stays theirs.
    model_cells = measurement_service.check_model_size(
        session,
        dataset_id,
        domain,
        plan.marginals,
        max_model_cells=max_model_cells,
        tenant_id=tenant_id,
    )
    scale_key = "sigma" if plan.noise == "gaussian" else "scale"
    return {
        **_budget_after(
            session,
            tenant_id=tenant_id,
            dataset_id=dataset_id,
            rho_units=plan.rho_units,
            delta=delta,
        ),
        "noise": plan.noise,
        scale_key: plan.scale,
        "sensitivity": plan.sensitivity,
        "marginals": marginal_estimates(domain, plan.marginals, plan.noise, plan.scale),
        "model_cells": model_cells,
    }


def within_bin_means(
    session: Session,
    *,
    tenant_id: str,
    dataset_id: str,
    schema: DatasetSchema,
    plan: within_bin_service.WithinBinPlan,
    delta: float,
) -> dict[str, Any]:
    """The dry run of a within-bin means request: its price, and per attribute the
    expected error of a bin's noisy sum of fractions (in rows' worth of fraction) and,
    for a bin of n rows and width w, of its mean: about w · that error / n."""
    per_bin = expected_abs_error(plan.noise, plan.scale)  # type: ignore[arg-type]
    scale_key = "sigma" if plan.noise == "gaussian" else "scale"
    attributes = []
    for name in plan.attributes:
        lows, highs = code_intervals(schema.attribute(name))
        attributes.append(
            {
                "attribute": name,
                "bins": int(lows.size),
                "widest_bin": float(np.max(highs - lows)),
                "expected_abs_error_per_bin": per_bin,
            }
        )
    return {
        **_budget_after(
            session,
            tenant_id=tenant_id,
            dataset_id=dataset_id,
            rho_units=plan.rho_units,
            delta=delta,
        ),
        "noise": plan.noise,
        scale_key: plan.scale,
        "sensitivity": plan.sensitivity,
        "marginals": [],
        "within_bin_means": attributes,
    }


def mechanism(
    session: Session,
    *,
    kind: str,
    tenant_id: str,
    dataset_id: str,
    settings: Any,
    rho_units_total: int,
    workload: Sequence[Sequence[str]] | None,
    max_model_cells: int | None,
    rounds: int | None,
    delta: float,
) -> dict[str, Any]:
    """The dry run of an AIM or MWEM request: its cost and its measurement schedule."""
    from app.services import datasets as dataset_service

    dataset = dataset_service.get_dataset(session, dataset_id, tenant_id=tenant_id)
    dataset_service.require_records(dataset)
    domain = dataset_service.dataset_schema(dataset).domain()
    sensitivity = unit_accounting.sensitivity(dataset)
    params, units = mechanism_service.plan(
        kind,
        domain,
        rho_units_total=rho_units_total,
        workload=workload,
        max_model_cells=max_model_cells,
        rounds=rounds,
        settings_max_model_cells=settings.max_model_cells,
        settings_max_marginal_cells=settings.max_marginal_cells,
        measured=measurement_service.measured_attribute_sets(
            session, dataset_id, tenant_id=tenant_id
        ),
    )
    # What the worker will run on (see `mechanisms.run_job`).
    run_rho = units_to_rho(units) * mechanism_service.SAFETY
    workload_sets = [tuple(w) for w in params["workload"]]
    if kind == "aim":
        total_rounds, sigma, epsilon = aim_schedule(
            domain, run_rho, MechanismOptions(sensitivity=sensitivity), workload_sets
        )
        oneway = sorted({(a,) for attrs in workload_sets for a in attrs})
        schedule: dict[str, Any] = {
            "rounds_at_most": total_rounds,
            "oneway": marginal_estimates(domain, oneway, "gaussian", sigma),
            "note": "AIM first measures every one-way marginal listed at sigma, then "
            "chooses workload marginals; it only ever lowers sigma (annealing), so these "
            "errors bound those of every marginal it measures",
        }
    else:
        total_rounds = mwem_rounds(domain, MechanismOptions(rounds=params["rounds"]))
        sigma, epsilon = split_round(
            run_rho / total_rounds, MechanismOptions().measure_share, sensitivity
        )
        schedule = {
            "rounds": total_rounds,
            "note": "MWEM measures one workload marginal per round, chosen by the "
            "exponential mechanism, at sigma (the last round may use a hair less)",
        }
    run_time = expected_run_time(
        domain,
        workload_sets,
        rho=run_rho,
        max_model_cells=params["max_model_cells"],
        selection_rounds=total_rounds,
    )
    return {
        **_budget_after(
            session, tenant_id=tenant_id, dataset_id=dataset_id, rho_units=units, delta=delta
        ),
        **run_time,
        "mechanism": kind,
        "noise": "gaussian",
        "sigma": sigma,
        "sensitivity": sensitivity,
        "epsilon_per_selection": epsilon,
        **schedule,
        "marginals": marginal_estimates(domain, workload_sets, "gaussian", sigma),
    }
