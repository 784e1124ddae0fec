"""Exact sampling of synthetic records from a calibrated junction tree.

p(x) = μ_root(x_root) · Π_C μ_C(x_C) / μ_S(x_S) over the tree rooted anywhere, so a
record is drawn by sampling the root clique from its marginal and then, walking the
tree outwards, each child clique's new attributes from μ_C conditioned on the values
its separator already has. Every step is vectorised over the rows of a chunk by
inverse-CDF lookup: the conditional CDF rows of all separator values are laid end to
end, row s shifted by +s, so one `np.searchsorted` serves every record at once.

This is post-processing of a model (already differentially private), so a seeded
numpy Generator is the right tool; nothing here is released noise.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from app.pgm.calibrated_tree import CalibratedTree

DEFAULT_CHUNK_ROWS = 65_536


@dataclass(frozen=True)
class _Step:
    """Draw `new` domain columns given `given` columns from a CDF table."""

    given: tuple[int, ...]  # domain positions of the separator attributes
    given_shape: tuple[int, ...]
    new: tuple[int, ...]  # domain positions of the attributes drawn here
    new_shape: tuple[int, ...]
    shifted_cdf: np.ndarray  # (separator cells × new cells), row s shifted by +s, flattened


def walk_order(tree: CalibratedTree) -> list[tuple[int, int | None]]:
    """(clique, parent) pairs breadth-first from the largest clique (parent None: the root).

    Every clique comes after its parent, so its separator's values are known by then;
    sampling and rounding (`app.pgm.rounding`) both place attributes in this order.
    """
    root = max(range(len(tree.cliques)), key=lambda i: (tree.clique_cells[i], -i))
    order: list[tuple[int, int | None]] = [(root, None)]
    seen = {root}
    position = 0
    while position < len(order):
        parent = order[position][0]
        position += 1
        for child in tree.neighbours[parent]:
            if child not in seen:
                seen.add(child)
                order.append((child, parent))
    return order


def conditional_rows(table: np.ndarray) -> np.ndarray:
    """A (given cells × new cells) table with each row normalised to sum to 1.

    A given value of probability 0 is never reached; its row is uniform.
    """
    totals = table.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        rows: np.ndarray = np.where(totals > 0, table / totals, 1.0 / table.shape[1])
    return rows


def _conditional_cdf(table: np.ndarray) -> np.ndarray:
    """Row-wise CDF of a (separator cells × new cells) table, each row ending at exactly 1."""
    cdf = np.cumsum(conditional_rows(table), axis=1)
    cdf[:, -1] = 1.0
    return cdf


class TreeSampler:
    """Precomputed conditional CDFs of a calibrated tree; draws chunks of records."""

    def __init__(self, tree: CalibratedTree) -> None:
        domain = tree.domain
        self.width = len(domain)
        steps: list[_Step] = []
        for clique, towards in walk_order(tree):
            attrs = tree.cliques[clique]
            sep = tree.separator(clique, towards) if towards is not None else ()
            new = tuple(a for a in attrs if a not in sep)
            layout = [attrs.index(a) for a in sep + new]
            table = np.transpose(tree.marginals[clique], layout)
            given_shape = domain.shape(sep)
            new_shape = domain.shape(new)
            flat = table.reshape(int(np.prod(given_shape, dtype=np.int64)), -1)
            cdf = _conditional_cdf(flat)
            cdf += np.arange(cdf.shape[0], dtype=float)[:, None]
            steps.append(
                _Step(
                    given=tuple(domain.index(a) for a in sep),
                    given_shape=given_shape,
                    new=tuple(domain.index(a) for a in new),
                    new_shape=new_shape,
                    shifted_cdf=cdf.ravel(),
                )
            )
        self.steps = tuple(steps)

    def draw(self, rows: int, rng: np.random.Generator) -> np.ndarray:
        """`rows` records as integer codes, columns in domain order."""
        out = np.zeros((rows, self.width), dtype=np.int64)
        for step in self.steps:
            if not step.new:
                continue
            if step.given:
                given = np.ravel_multi_index(tuple(out[:, k] for k in step.given), step.given_shape)
            else:
                given = np.zeros(rows, dtype=np.int64)
            width = int(np.prod(step.new_shape, dtype=np.int64))
            target = given + rng.random(rows)
            position = np.searchsorted(step.shifted_cdf, target, side="right")
            # Rounding can land exactly on the row's end (s + 1); clamp into the row.
            drawn = np.clip(position - given * width, 0, width - 1)
            for column, codes in zip(
                step.new, np.unravel_index(drawn, step.new_shape), strict=True
            ):
                out[:, column] = codes
        return out

    def chunks(
        self, rows: int, seed: int | None = None, *, chunk_rows: int = DEFAULT_CHUNK_ROWS
    ) -> Iterator[np.ndarray]:
        """Yield `rows` records in chunks of at most `chunk_rows` (the last may be shorter).

        The concatenated chunks equal `sample(rows, seed)` for the same chunk size.
        """
        if int(rows) != rows or rows < 0:
            raise ValueError("rows must be a non-negative integer")
        if chunk_rows < 1:
            raise ValueError("chunk_rows must be positive")
        rng = np.random.default_rng(seed)
        remaining = int(rows)
        while remaining > 0:
            size = min(chunk_rows, remaining)
            yield self.draw(size, rng)
            remaining -= size

    def sample(
        self, rows: int, seed: int | None = None, *, chunk_rows: int = DEFAULT_CHUNK_ROWS
    ) -> np.ndarray:
        """`rows` records (integer codes, columns in domain order) drawn exactly from the tree."""
        chunks = list(self.chunks(rows, seed, chunk_rows=chunk_rows))
        if not chunks:
            return np.zeros((0, self.width), dtype=np.int64)
        return np.concatenate(chunks)
