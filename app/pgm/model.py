"""GraphicalModel: the fitted model of a table — junction-tree cliques, log-potentials, N̂.

The distribution is p(x) ∝ exp(Σ_C θ_C(x_C)) over the cliques C of a junction tree;
counts are N̂·p. This is what estimation returns, what the service persists (as
bytes, `to_bytes`/`from_bytes`), and what every free query is answered from.

Inference is lazy and cached on the instance: the first query builds the junction
tree over the cliques and calibrates it by belief propagation once; every marginal,
factored query and synthetic sample after that reads the calibrated clique marginals
(`app.pgm.calibrated_tree`, `app.pgm.queries`, `app.pgm.sampling`). The log-potentials
must not be mutated after the first query.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from app.pgm.calibrated_tree import CalibratedTree, TreePlan
from app.pgm.domain import Domain, DomainError
from app.pgm.junction_tree import build_junction_tree
from app.pgm.queries import FactoredQuery, answer_queries, answer_query, plan_query
from app.pgm.rounding import rounded_chunks
from app.pgm.sampling import DEFAULT_CHUNK_ROWS, TreeSampler

FORMAT_VERSION = 1

Clique = tuple[str, ...]


class ModelFormatError(ValueError):
    """Bytes that are not a serialised model of a format version this code reads."""


@dataclass(frozen=True, eq=False)
class GraphicalModel:
    domain: Domain
    cliques: tuple[Clique, ...]
    log_potentials: dict[Clique, np.ndarray]
    total: float
    # Inference state, built lazily and not part of the value: set by `_reset_caches`.
    _inference_lock: threading.Lock = field(init=False, repr=False, compare=False)
    _calibrated: CalibratedTree | None = field(init=False, repr=False, compare=False)
    _sampler: TreeSampler | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for clique in self.cliques:
            if clique not in self.log_potentials:
                raise ValueError(f"no potential for clique {clique}")
            if self.log_potentials[clique].shape != self.domain.shape(clique):
                raise ValueError(f"potential of {clique} has the wrong shape")
        for name in self.domain.attributes:
            if not any(name in clique for clique in self.cliques):
                raise ValueError(f"attribute {name!r} is in no clique")
        self._reset_caches()

    def _reset_caches(self) -> None:
        # Frozen value, lazily cached inference state: set through object.__setattr__.
        object.__setattr__(self, "_inference_lock", threading.Lock())
        object.__setattr__(self, "_calibrated", None)
        object.__setattr__(self, "_sampler", None)

    def __getstate__(self) -> dict[str, object]:
        # Pickle (and copy) the value only; caches and the lock are rebuilt lazily.
        return {f: getattr(self, f) for f in ("domain", "cliques", "log_potentials", "total")}

    def __setstate__(self, state: dict[str, object]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)
        self._reset_caches()

    # ---- inference ----------------------------------------------------------------

    @property
    def calibrated_tree(self) -> CalibratedTree:
        """The junction tree calibrated by belief propagation, computed once per model."""
        calibrated = self._calibrated
        if calibrated is None:
            with self._inference_lock:
                calibrated = self._calibrated
                if calibrated is None:
                    tree = build_junction_tree(self.domain, self.cliques)
                    calibrated = CalibratedTree.from_potentials(tree, self.log_potentials)
                    object.__setattr__(self, "_calibrated", calibrated)
        return calibrated

    @property
    def log_partition(self) -> float:
        """log Z of exp(Σ θ_C) (from belief propagation)."""
        log_z = self.calibrated_tree.log_z
        if log_z is None:
            raise ModelFormatError("this model's tree was calibrated from marginals: no log Z")
        return log_z

    def plan(self, attrs: Iterable[str], *, max_cells: int | None = None) -> TreePlan:
        """How the marginal on `attrs` would be computed (see `max_intermediate_cells`)."""
        return self.calibrated_tree.plan(tuple(attrs), max_cells=max_cells)

    def query_plan(self, query: FactoredQuery, *, max_cells: int | None = None) -> TreePlan:
        """How a factored query would be computed (see `max_intermediate_cells`)."""
        return plan_query(self.calibrated_tree, query, max_cells=max_cells)

    def probabilities(self, attrs: Iterable[str], *, max_cells: int | None = None) -> np.ndarray:
        """The model's distribution of `attrs` (summing to 1), axes in the order given.

        Raises InferenceTooLarge when an intermediate table would exceed `max_cells`.
        """
        return self.calibrated_tree.probabilities(tuple(attrs), max_cells=max_cells)

    def marginal(self, attrs: Iterable[str], *, max_cells: int | None = None) -> np.ndarray:
        """Estimated counts N̂·p over `attrs`, axes in the order given."""
        return self.calibrated_tree.probabilities(
            tuple(attrs), max_cells=max_cells, scale=self.total
        )

    def answer(self, query: FactoredQuery, *, max_cells: int | None = None) -> np.ndarray:
        """N̂ · Q p for a factored query: one axis per factor with more than one row."""
        return answer_query(self.calibrated_tree, query, self.total, max_cells=max_cells)

    def answer_many(
        self, queries: Sequence[FactoredQuery], *, max_cells: int | None = None
    ) -> list[np.ndarray]:
        """Answers of many factored queries, sharing plans and stacking same-shaped ones."""
        return answer_queries(self.calibrated_tree, queries, self.total, max_cells=max_cells)

    @property
    def sampler(self) -> TreeSampler:
        sampler = self._sampler
        if sampler is None:
            sampler = TreeSampler(self.calibrated_tree)
            object.__setattr__(self, "_sampler", sampler)
        return sampler

    def default_rows(self) -> int:
        return max(round(self.total), 0)

    def sample_chunks(
        self,
        rows: int | None = None,
        seed: int | None = None,
        *,
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
    ) -> Iterator[np.ndarray]:
        """Synthetic records (integer codes, domain order) in chunks; N̂ rows by default."""
        count = self.default_rows() if rows is None else rows
        return self.sampler.chunks(count, seed, chunk_rows=chunk_rows)

    def rounded_chunks(
        self,
        rows: int | None = None,
        seed: int | None = None,
        *,
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
    ) -> Iterator[np.ndarray]:
        """Synthetic records whose clique marginals are the model's counts rounded
        (`app.pgm.rounding`), in chunks; N̂ rows by default; deterministic given `seed`."""
        count = self.default_rows() if rows is None else rows
        return rounded_chunks(self.calibrated_tree, count, seed, chunk_rows=chunk_rows)

    def sample(
        self,
        rows: int | None = None,
        seed: int | None = None,
        *,
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
    ) -> np.ndarray:
        """Synthetic records drawn exactly from the model: rows × attributes, integer codes."""
        count = self.default_rows() if rows is None else rows
        return self.sampler.sample(count, seed, chunk_rows=chunk_rows)

    def joint_probabilities(self, max_cells: int = 1_000_000) -> np.ndarray:
        """The dense normalised joint p(x) over every attribute, axes in domain order.

        Brute force, for tests and tiny domains: refuses (DomainError) when the
        domain has more than `max_cells` cells rather than exhausting memory.
        """
        cells = self.domain.cells()
        if cells > max_cells:
            raise DomainError(f"the joint has {cells} cells, more than the cap {max_cells}")
        log_joint = np.zeros(self.domain.sizes)
        for clique in self.cliques:
            axes = [self.domain.index(a) for a in clique]
            # Move the potential's axes into domain order, then broadcast over the rest.
            order = sorted(range(len(clique)), key=lambda k: axes[k])
            theta = np.transpose(self.log_potentials[clique], order)
            shape = [1] * len(self.domain)
            for k in order:
                shape[axes[k]] = self.domain.sizes[axes[k]]
            log_joint = log_joint + theta.reshape(shape)
        log_joint -= log_joint.max()
        joint = np.exp(log_joint)
        normalised: np.ndarray = joint / joint.sum()
        return normalised

    def to_bytes(self) -> bytes:
        header = {
            "format": FORMAT_VERSION,
            "attributes": list(self.domain.attributes),
            "sizes": list(self.domain.sizes),
            "cliques": [list(c) for c in self.cliques],
            "total": float(self.total),
        }
        arrays = {f"theta_{i}": self.log_potentials[c] for i, c in enumerate(self.cliques)}
        buffer = io.BytesIO()
        # numpy's stub types **kwds as if a key could be its `allow_pickle` flag (bool);
        # ours are all "theta_<i>", arrays.
        encoded_header = np.frombuffer(json.dumps(header).encode(), np.uint8)
        np.savez_compressed(buffer, header=encoded_header, **arrays)  # type: ignore[arg-type]
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> GraphicalModel:
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as archive:
                header = json.loads(archive["header"].tobytes().decode())
                if header.get("format") != FORMAT_VERSION:
                    raise ModelFormatError(f"unsupported model format {header.get('format')!r}")
                cliques = tuple(tuple(c) for c in header["cliques"])
                potentials = {
                    c: np.array(archive[f"theta_{i}"], dtype=float) for i, c in enumerate(cliques)
                }
        except (KeyError, ValueError, OSError) as exc:
            if isinstance(exc, ModelFormatError):
                raise
            raise ModelFormatError(f"not a serialised model: {exc}") from exc
        domain = Domain(tuple(header["attributes"]), tuple(header["sizes"]))
        return cls(domain, cliques, potentials, float(header["total"]))
