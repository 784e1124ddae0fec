"""GraphicalModel: the fitted model of a table — junction-tree cliques, log-potentials, N̂.

The distribution is p(x) ∝ exp(Σ_C θ_C(x_C)) over the cliques C of a junction tree;
counts are N̂·p. This is what estimation returns, what the service persists (as
bytes, `to_bytes`/`from_bytes`), and what every free query is answered from.
"""

from __future__ import annotations

import io
import json
from dataclasses import dataclass

import numpy as np

from app.pgm.domain import Domain, DomainError

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

    def __post_init__(self) -> None:
        for clique in self.cliques:
            if clique not in self.log_potentials:
                raise ValueError(f"no potential for clique {clique}")
            if self.log_potentials[clique].shape != self.domain.shape(clique):
                raise ValueError(f"potential of {clique} has the wrong shape")
        for name in self.domain.attributes:
            if not any(name in clique for clique in self.cliques):
                raise ValueError(f"attribute {name!r} is in no clique")

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
        return joint / joint.sum()

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
        np.savez_compressed(buffer, header=np.frombuffer(json.dumps(header).encode(), np.uint8), **arrays)
        return buffer.getvalue()

    @classmethod
    def from_bytes(cls, data: bytes) -> GraphicalModel:
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as archive:
                header = json.loads(archive["header"].tobytes().decode())
                if header.get("format") != FORMAT_VERSION:
                    raise ModelFormatError(f"unsupported model format {header.get('format')!r}")
                cliques = tuple(tuple(c) for c in header["cliques"])
                potentials = {c: np.array(archive[f"theta_{i}"], dtype=float) for i, c in enumerate(cliques)}
        except (KeyError, ValueError, OSError) as exc:
            if isinstance(exc, ModelFormatError):
                raise
            raise ModelFormatError(f"not a serialised model: {exc}") from exc
        domain = Domain(tuple(header["attributes"]), tuple(header["sizes"]))
        return cls(domain, cliques, potentials, float(header["total"]))
