"""Measurements: released noisy answers over marginals, and the loss a fit minimises.

A `Measurement` is a released answer y = Q·μ_A + noise, where μ_A is the count
marginal over attributes A (row-major over A in the order given), Q a linear query
matrix over that marginal (identity by default; dense or scipy.sparse), and the noise
Gaussian (std σ) or Laplace (scale b). `noise_variance` is the one formula for the
variance of that noise on a cell (σ², or 2b²), used wherever measurements are combined.

The fit minimises the negative log-likelihood of everything released, up to additive
constants,

    loss(μ) = Σ_gaussian ½‖(Qμ_A − y)/σ‖²₂ + Σ_laplace ‖Qμ_A − y‖₁ / b,

over the marginal polytope of the junction tree built from the measured attribute
sets. (The issue wrote the Gaussian term without the ½; the ½ is what makes the
mixed Gaussian+Laplace sum a likelihood, and it does not change a pure-Gaussian fit.)
The total N is not given: `estimate_total` takes the inverse-variance weighted mean
of the per-measurement unbiased estimates, and the model's counts are N̂·p.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
import scipy.sparse.linalg as spla

from app.pgm.domain import Domain

NOISE_KINDS = ("gaussian", "laplace")

FloatArray = npt.NDArray[np.float64]
# A query matrix as a measurement keeps it: dense or sparse (CSR), float64 either way.
QueryMatrix = FloatArray | sp.csr_matrix


def noise_variance(noise: str, scale: float) -> float:
    """Variance of the noise on one released cell: σ² (Gaussian), 2b² (Laplace, scale b)."""
    return scale**2 if noise == "gaussian" else 2.0 * scale**2


@dataclass(frozen=True, eq=False)
class Measurement:
    """One released noisy answer over a marginal: y = Q·μ_attributes + noise."""

    attributes: tuple[str, ...]
    values: FloatArray
    noise: str
    scale: float
    query: QueryMatrix | None = None  # None: the identity; any dense or scipy.sparse matrix

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", tuple(self.attributes))
        object.__setattr__(self, "values", np.asarray(self.values, dtype=float).ravel())
        if len(set(self.attributes)) != len(self.attributes) or not self.attributes:
            raise ValueError("a measurement names one or more distinct attributes")
        if self.noise not in NOISE_KINDS:
            raise ValueError(f"noise must be one of {NOISE_KINDS}, not {self.noise!r}")
        if not (np.isfinite(self.scale) and self.scale > 0):
            raise ValueError("noise scale must be a positive finite number")
        if not np.all(np.isfinite(self.values)):
            raise ValueError("measured values must be finite")
        if self.query is not None:
            query = self.query
            if sp.issparse(query):
                query = sp.csr_matrix(query, dtype=float)
            else:
                query = np.asarray(query, dtype=float)
            object.__setattr__(self, "query", query)
            if self.query.ndim != 2 or self.query.shape[0] != self.values.size:
                raise ValueError("query must be a matrix with one row per measured value")

    @property
    def weight(self) -> float:
        """Per-answer weight in the loss: 1/σ² (Gaussian, times ½) or 1/b (Laplace)."""
        return 1.0 / self.scale**2 if self.noise == "gaussian" else 1.0 / self.scale

    @property
    def noise_variance(self) -> float:
        return noise_variance(self.noise, self.scale)

    def check(self, domain: Domain) -> None:
        cells = domain.cells(self.attributes)
        columns = cells if self.query is None else self.query.shape[1]
        rows = cells if self.query is None else self.query.shape[0]
        if columns != cells or self.values.size != rows:
            raise ValueError(
                f"measurement over {self.attributes} has {self.values.size} values and "
                f"{columns} query columns; the marginal has {cells} cells"
            )


def _total_estimate(measurement: Measurement) -> tuple[float, float] | None:
    """(unbiased estimate of N, its variance) from one measurement, or None if Q hides N."""
    if measurement.query is None:
        cells = measurement.values.size
        return float(measurement.values.sum()), cells * measurement.noise_variance
    # aᵀy is unbiased for N whenever Qᵀa = 1; the minimum-norm such a has least variance.
    q = measurement.query
    ones = np.ones(q.shape[1])
    a: FloatArray
    if isinstance(q, np.ndarray):
        dense_t = np.asarray(q, dtype=float).T
        a = np.linalg.lstsq(dense_t, ones, rcond=None)[0]
        residual = dense_t @ a - ones
    else:
        qt = q.T.tocsr()
        a = spla.lsqr(qt, ones, atol=1e-12, btol=1e-12)[0]
        residual = qt @ a - ones
    if np.abs(residual).max() > 1e-6:
        return None
    return float(a @ measurement.values), float(a @ a) * measurement.noise_variance


def estimate_total(measurements: Iterable[Measurement]) -> float:
    """Inverse-variance weighted estimate of the number of records (at least 1)."""
    numerator = denominator = 0.0
    for m in measurements:
        found = _total_estimate(m)
        if found is not None:
            estimate, variance = found
            numerator += estimate / variance
            denominator += 1.0 / variance
    if denominator == 0.0:
        raise ValueError("no measurement determines the total count")
    return max(numerator / denominator, 1.0)


def loss(
    measurements: Iterable[Measurement],
    marginal: Mapping[tuple[str, ...], FloatArray] | Callable[[tuple[str, ...]], FloatArray],
) -> float:
    """The fitting objective at the given count marginals.

    `marginal` maps (or is called with) each measurement's attribute tuple and gives the
    count marginal with axes in that order, e.g. `model.marginal`.
    """
    total = 0.0
    for m in measurements:
        mu = marginal[m.attributes] if isinstance(marginal, Mapping) else marginal(m.attributes)
        answer = np.asarray(mu, dtype=float).ravel()
        if m.query is not None:
            answer = m.query @ answer
        residual = np.asarray(answer).ravel() - m.values
        if m.noise == "gaussian":
            total += 0.5 * float(residual @ residual) * m.weight
        else:
            total += float(np.abs(residual).sum()) * m.weight
    return total
