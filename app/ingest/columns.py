"""Cell encoding: one column's cells (strings) → the attribute's integer codes.

Categorical cells are looked up (padded cells by their stripped value); numeric cells
are parsed and binned; integer cells are parsed as integers ("3" or "3.0", never "3.5")
and take the code of their bin of the attribute's min..max (one code per value at width
1).
An attribute with `missing` maps a cell that strips to one of its `missing_values` to
its missing code (the last), before any parsing. -1 marks a cell outside the schema,
which `ColumnEncoder.explain` describes.
"""

from __future__ import annotations

import numpy as np

from app.ingest.errors import quote_cell
from app.schema import Attribute, format_number


def code_dtype(size: int) -> np.dtype:
    """Smallest unsigned integer dtype that holds codes 0..size-1."""
    for dtype in (np.uint8, np.uint16, np.uint32):
        if size - 1 <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.uint64)


class StrippingLookup(dict[str, int]):
    """value -> code for a categorical column; padded cells resolve by their stripped value.

    A miss that strips to a known value is remembered (bounded), so a file that pads
    every cell pays for stripping once per distinct spelling.
    """

    _MAX_REMEMBERED = 10_000

    def __init__(self, values: tuple[str, ...]) -> None:
        super().__init__((value, code) for code, value in enumerate(values))
        self._room = self._MAX_REMEMBERED

    def __missing__(self, cell: str) -> int:
        code = self.get(cell.strip(), -1)
        if code >= 0 and self._room > 0:
            self[cell] = code
            self._room -= 1
        return code


# Up to this many edges, numbers are binned by counting the edges they reach (one pass
# an edge); beyond, by a binary search.
_COMPARED_EDGES = 24

_MISS = -2  # memo marker: the cell's code is not remembered yet


class _Memo(dict[str, int]):
    """cell -> code of a numeric or integer column, for cells already parsed once."""

    def __missing__(self, cell: str) -> int:
        return _MISS


class ColumnEncoder:
    """Turns one column's cells (a tuple of str) into codes; -1 marks a bad cell.

    Numeric and integer columns usually repeat a few thousand spellings ("39",
    "40.5"): a bounded memo answers those by dict lookup and parses only new ones
    (vectorised, so the result is the same either way). A column whose cells keep
    missing the memo once it is full is parsed without it.
    """

    MEMO_CAPACITY = 8192
    MEMO_GIVE_UP_MISS_FRACTION = 0.3

    def __init__(self, attribute: Attribute) -> None:
        self.attribute = attribute
        self.size = attribute.size
        self.value_size = attribute.value_size
        self.dtype = code_dtype(self.size)
        self._memo: _Memo | None = None
        self._missing: frozenset[str] = (
            frozenset(attribute.missing_values) if attribute.missing else frozenset()
        )
        self._missing_code = attribute.value_size
        if attribute.kind == "categorical":
            self._lookup = StrippingLookup(attribute.categories)
            for text in self._missing:
                self._lookup[text] = self._missing_code
        else:
            self._memo = _Memo()
            for text in self._missing:
                self._memo[text] = self._missing_code
        if attribute.kind == "numeric":
            self._edges = np.asarray(attribute.edges, dtype=np.float64)

    def encode(self, cells: tuple[str, ...]) -> np.ndarray:
        """int64 codes, -1 where the cell is outside the schema."""
        if self.attribute.kind == "categorical":
            return np.fromiter(map(self._lookup.__getitem__, cells), np.int64, len(cells))
        memo = self._memo
        if memo is None:
            return self._parse(cells)
        codes = np.fromiter(map(memo.__getitem__, cells), np.int64, len(cells))
        missed_rows = np.flatnonzero(codes == _MISS)
        if missed_rows.size:
            missed_cells = [cells[row] for row in missed_rows.tolist()]
            fresh = self._parse(tuple(missed_cells))
            codes[missed_rows] = fresh
            room = self.MEMO_CAPACITY - len(memo)
            if room > 0:
                memo.update(zip(missed_cells[:room], fresh[:room].tolist(), strict=True))
            elif missed_rows.size > self.MEMO_GIVE_UP_MISS_FRACTION * len(cells):
                self._memo = None
        return codes

    def _parse(self, cells: tuple[str, ...]) -> np.ndarray:
        if self.attribute.kind == "numeric":
            codes = self._encode_numeric(cells)
        else:
            codes = self._encode_integer(cells)
        if self._missing:
            missing = self._missing
            is_missing = np.fromiter(
                (cell.strip() in missing for cell in cells), np.bool_, len(cells)
            )
            codes[is_missing] = self._missing_code
        return codes

    def _encode_numeric(self, cells: tuple[str, ...]) -> np.ndarray:
        try:
            # float() itself ignores surrounding whitespace.
            x = np.fromiter(map(float, cells), np.float64, len(cells))
        except ValueError:
            x = np.fromiter(map(float_or_nan, cells), np.float64, len(cells))
        return self.bin_numbers(x)

    def bin_numbers(self, x: np.ndarray) -> np.ndarray:
        """Bin codes of parsed numbers (NaN for unparsable cells), -1 outside the schema.

        A number's bin is how many of the edges e_0..e_{k-1} it reaches (x >= e_j),
        less one: [e_j, e_{j+1}) is bin j, and e_k, which no edge below it passes, falls
        in the last bin (closed). NaN reaches none. Counting comparisons is a few
        branch-free passes, several times faster than a binary search over few edges.
        """
        edges = self._edges
        if len(edges) > _COMPARED_EDGES:
            return self._search_bins(x)
        clip = self.attribute.clip
        # Clipped, a number below e_0 is in bin 0: counting from e_1 gives exactly that.
        counted = edges[1:-1] if clip else edges[:-1]
        reached = np.zeros(x.shape, dtype=np.int16)
        for edge in counted:
            reached += x >= edge
        codes = reached.astype(np.int64)
        if clip:
            codes[np.isnan(x)] = -1  # NaN and unparsable cells have no bin, clipped or not
        else:
            codes -= 1  # below e_0 (and NaN) reach no edge: -1
            codes[x > edges[-1]] = -1
        return codes

    def _search_bins(self, x: np.ndarray) -> np.ndarray:
        """`bin_numbers` by binary search, for attributes with many edges."""
        edges = self._edges
        last_bin = len(edges) - 2
        codes = np.searchsorted(edges, x, side="right").astype(np.int64) - 1
        codes[x == edges[-1]] = last_bin  # the last bin is closed
        if self.attribute.clip:
            np.clip(codes, 0, last_bin, out=codes)
        else:
            codes[(codes < 0) | (codes > last_bin)] = -1
        codes[np.isnan(x)] = -1  # NaN and unparsable cells have no bin, clipped or not
        return codes

    def _encode_integer(self, cells: tuple[str, ...]) -> np.ndarray:
        try:
            codes = np.fromiter(map(int, cells), np.int64, len(cells))
        except (ValueError, OverflowError):
            codes = np.fromiter(map(integer_or_none_marker, cells), np.int64, len(cells))
            unparsable = codes == NOT_AN_INTEGER
        else:
            unparsable = None
        codes = self.integer_codes(codes)
        if unparsable is not None:
            codes[unparsable] = -1
        return codes

    def integer_codes(self, values: np.ndarray) -> np.ndarray:
        """Codes of parsed integers (int64, changed in place), -1 outside the schema:
        the value's offset from min, divided by the bin width (`clip` clamps values into
        min..max first)."""
        low, high, width = self.attribute.integer_range
        if self.attribute.clip:
            np.clip(values, low, high, out=values)
            outside = None
        else:
            outside = (values < low) | (values > high)
            values[outside] = low  # no overflow below: every value is now in low..high
        if low:
            values -= low
        if width != 1:
            values //= width
        if outside is not None:
            values[outside] = -1
        return values

    def explain(self, cell: str) -> str:
        """Why one cell is outside the schema (quoting the cell unless undecodable)."""
        quoted = quote_cell(cell) or "a value"
        attribute = self.attribute
        if not cell.strip() and not attribute.missing:
            return (
                f'{quoted} is an empty cell (with "missing": true the attribute takes '
                "missing values)"
            )
        if attribute.kind == "categorical":
            return f"{quoted} is not one of the schema's {self.value_size} values"
        if attribute.kind == "numeric":
            x = float_or_nan(cell)
            lo, hi = format_number(self._edges[0]), format_number(self._edges[-1])
            if np.isnan(x):
                return (
                    f"{quoted} is not a number"
                    if cell.strip().lower() != "nan"
                    else f"{quoted} has no bin"
                )
            return f"{quoted} is outside the bins [{lo}, {hi}]"
        value = integer_or_none_marker(cell)
        if value == NOT_AN_INTEGER:
            return f"{quoted} is not an integer"
        low, high, _ = attribute.integer_range
        return f"{quoted} is outside the integers {low}..{high}"


def float_or_nan(cell: str) -> float:
    try:
        return float(cell)
    except ValueError:
        return float("nan")


# Out of every code range and of int64-safe parsing: marks a cell that is no integer.
NOT_AN_INTEGER = -(2**62)


def integer_or_none_marker(cell: str) -> int:
    try:
        value = int(cell)
    except ValueError:
        x = float_or_nan(cell)
        # "3.0" and "3e0" from float exports are the integer 3; "3.5", "nan", "inf" are not.
        if not np.isfinite(x) or not x.is_integer():
            return NOT_AN_INTEGER
        value = int(x)
    # Far-out values only need to stay out of range, within int64.
    return max(min(value, 2**62), -(2**62) + 1)
