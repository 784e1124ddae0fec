"""Noise: exact discrete Gaussian and discrete Laplace noise on integer counts, from OpenDP.

Every released noisy count goes through this module. OpenDP's integer `make_gaussian`
samples the discrete Gaussian N_Z(0, σ²) and its integer `make_laplace` the discrete
Laplace (two-sided geometric) exactly, from its cryptographically secure RNG (which
cannot be seeded — tests check distributions, not values). No floating-point sampler
and no `numpy.random` is used.

Measurements are built once per (kind, scale) and cached. OpenDP's "contrib" feature is
enabled by `opendp_prelude` on first use (the only global switch we touch; importing
this module has no side effect). Counts are carried as i64, so counts up to ~4.6e18
are safe (the noise itself is tiny in comparison; OpenDP saturates rather than wraps).

Vectors longer than `_CHUNK` are split and sampled on two threads: the FFI call
releases the GIL, and the coordinates' noise is independent, so the released vector
has the same distribution and the same privacy cost as one call on the whole vector.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache
from typing import Any, Literal

import numpy as np

NoiseKind = Literal["gaussian", "laplace"]

# Exact sampling costs ~15–25 µs per cell; above this length we use two threads.
_CHUNK = 20_000
_THREADS = 2
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def opendp_prelude() -> Any:
    """OpenDP's prelude with the "contrib" feature on (enabled here, on first use only)."""
    import opendp.prelude as dp

    dp.enable_features("contrib")
    return dp


@lru_cache(maxsize=256)
def _measurement(kind: NoiseKind, scale: float) -> Any:
    """The OpenDP measurement adding `kind` noise of `scale` to an i64 vector (cached)."""
    dp = opendp_prelude()
    domain = dp.vector_domain(dp.atom_domain(T="i64"))
    if kind == "gaussian":
        return dp.m.make_gaussian(domain, dp.l2_distance(T="i64"), scale=scale)
    if kind == "laplace":
        return dp.m.make_laplace(domain, dp.l1_distance(T="i64"), scale=scale)
    raise ValueError(f"unknown noise kind {kind!r}")


def privacy_map(kind: NoiseKind, scale: float, sensitivity: int = 1) -> float:
    """OpenDP's own privacy map of the measurement at input distance `sensitivity` (the
    query's L2 resp. L1 sensitivity): ρ for Gaussian, ε (pure DP) for Laplace."""
    return float(_measurement(kind, float(scale)).map(int(sensitivity)))


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=_THREADS, thread_name_prefix="privq-noise")
        return _pool


def _add_noise(kind: NoiseKind, counts: np.ndarray, scale: float) -> np.ndarray:
    scale = float(scale)
    if not (scale > 0 and np.isfinite(scale)):
        raise ValueError(f"noise scale must be positive and finite, got {scale!r}")
    values = np.asarray(counts)
    if values.dtype.kind not in "iub":
        raise TypeError("noise is added to integer counts only")
    shape = values.shape
    flat = values.astype(np.int64, copy=False).ravel()
    measurement = _measurement(kind, scale)
    if flat.size == 0:
        return np.zeros(shape, dtype=np.int64)
    if flat.size <= _CHUNK:
        noisy = measurement(flat.tolist())
        return np.asarray(noisy, dtype=np.int64).reshape(shape)
    pieces = np.array_split(flat, -(-flat.size // _CHUNK))
    results = list(_executor().map(lambda piece: measurement(piece.tolist()), pieces))
    return np.concatenate([np.asarray(r, dtype=np.int64) for r in results]).reshape(shape)


def discrete_gaussian(counts: np.ndarray, sigma: float) -> np.ndarray:
    """counts + N_Z(0, σ²) noise per cell (exact discrete Gaussian); int64, same shape.

    Costs Δ²/(2σ²) ρ for a vector of L2 sensitivity Δ: 1 per record, k for a privacy
    unit of at most k rows (see `accounting.rho_gaussian`).
    """
    return _add_noise("gaussian", counts, sigma)


def discrete_laplace(counts: np.ndarray, scale: float) -> np.ndarray:
    """counts + discrete Laplace noise of scale b per cell (P(k) ∝ e^{−|k|/b}); int64, same shape.

    (Δ/b)-DP for a vector of L1 sensitivity Δ (1 per record, k per unit of at most k rows),
    i.e. (Δ/b)²/2 ρ (see `accounting.rho_laplace`).
    """
    return _add_noise("laplace", counts, scale)
