"""Summing places within bins batch by batch: each binned attribute's per-code count of
rows and sum of their places within the bins (`app.schema.within_bins`).

`FractionSummer` takes the same batches of codes as `MarginalCounter` (the capping code
feeds either), where each requested attribute comes with its rows' places within the
bins under the name `fraction:` + the attribute (integers 0..GRID). Every sum is exact:
a batch's bincount of float64 weights holds integers exactly (a batch has far fewer
than 2³⁷ rows), and batches are added in int64.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from app.ingest import fraction_column
from app.pgm.domain import Domain
from app.records.counting import Mapper
from app.schema.within_bins import GRID, fraction_sums


class FractionSummer:
    """Accumulates, per attribute, its codes' counts and sums of places over batches."""

    def __init__(self, base: Domain, attributes: Sequence[str]) -> None:
        self.names = list(dict.fromkeys(attributes))
        self.places = [fraction_column(a) for a in self.names]
        # The schema's attributes and each place (0..GRID): what a spill stores.
        self.domain = Domain(
            base.attributes + tuple(self.places), base.sizes + (GRID + 1,) * len(self.places)
        )
        self.sizes = [base.size_of(a) for a in self.names]
        self.counts = [np.zeros(size, dtype=np.int64) for size in self.sizes]
        self.sums = [np.zeros(size, dtype=np.int64) for size in self.sizes]
        self.rows = 0

    @property
    def attributes(self) -> tuple[str, ...]:
        """The columns a batch must hold: the attributes and their places."""
        return tuple(self.names) + tuple(self.places)

    def add(self, codes: Mapping[str, np.ndarray], rows: int, mapper: Mapper | None = None) -> None:
        """Add one batch: `codes` by name (the attributes' codes and their places)."""
        for index, (name, place) in enumerate(zip(self.names, self.places, strict=True)):
            column = np.asarray(codes[name], dtype=np.intp)
            size = self.sizes[index]
            self.counts[index] += np.bincount(column, minlength=size)[:size]
            self.sums[index] += fraction_sums(size, column, codes[place])[:size]
        self.rows += rows

    def result(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """Per attribute: (counts, sums of places in grid steps), int64 each."""
        return {
            name: (self.counts[i].copy(), self.sums[i].copy()) for i, name in enumerate(self.names)
        }
