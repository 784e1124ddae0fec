"""The "stein" estimator's first step: each attribute's one-way measurements shrunk toward
the uniform marginal (positive-part James–Stein, James and Stein 1961; Efron and Morris
1973).

For an attribute a of k values measured one-way m times (identity query, noise variance
v_j on each cell: σ_j² or 2b_j²), the measurements pool into their inverse-variance mean
ȳ with variance v = 1 / Σ 1/v_j (what a fit makes of them together). With N̂ the total
that every measurement together implies (`estimate_total`, the fit's own), the target
is the uniform marginal c = N̂/k in every cell, and with d = ȳ − c

    λ = max(0, 1 − (k − 2)·v / ‖d‖²),    ŷ = c + λ·d.

For Gaussian noise of known variance and a fixed target, ŷ's expected squared error is
below ȳ's whatever the true marginal is, from k = 3 values. N̂ pools every measurement's
total, so it is far more precise than any one attribute's cells and is taken as fixed.
The gain is largest where the marginal is close to uniform for its noise (‖d‖² near
k·v: few rows for the budget, or values of about equal frequency) and vanishes where it
is far from it (λ → 1). Every one-way measurement of a is then given ŷ as its values,
keeping its own noise scale, so a fit weighs them together as one measurement of ŷ at
variance v.

Marginals of two or more attributes, measurements with a query matrix, and attributes of
two values (where the estimator has no such guarantee) are left as they are. The input
is released values and their public noise scales only: post-processing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from app.pgm.measurement import FloatArray, Measurement, estimate_total, noise_variance

ESTIMATOR = "stein"
MIN_VALUES = 3  # James–Stein toward a fixed point dominates the raw values from k = 3


def shrink_factor(pooled: FloatArray, variance: float, target: float) -> float:
    """λ for a pooled one-way measurement of noise variance `variance` per cell, shrunk
    toward `target` in every cell."""
    deviation = pooled - target
    energy = float(deviation @ deviation)
    if energy <= 0.0:
        return 0.0
    return max(0.0, 1.0 - (pooled.size - 2) * variance / energy)


def shrink_oneway(measurements: Sequence[Measurement]) -> list[Measurement]:
    """The measurements, each attribute's one-way ones given its shrunk pooled values."""
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, m in enumerate(measurements):
        if len(m.attributes) == 1 and m.query is None and m.values.size >= MIN_VALUES:
            groups.setdefault(m.attributes, []).append(i)
    if not groups:
        return list(measurements)
    total = estimate_total(measurements)
    shrunk = list(measurements)
    for indices in groups.values():
        group = [measurements[i] for i in indices]
        weights = np.array([1.0 / noise_variance(m.noise, m.scale) for m in group])
        pooled = np.sum([w * m.values for w, m in zip(weights, group, strict=True)], axis=0)
        pooled /= weights.sum()
        target = total / pooled.size
        factor = shrink_factor(pooled, 1.0 / float(weights.sum()), target)
        values = target + factor * (pooled - target)
        for i, m in zip(indices, group, strict=True):
            shrunk[i] = replace(m, values=values)
    return shrunk
