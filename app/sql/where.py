"""WHERE → regions: each predicate's code masks, the bins it cuts, and over a binned
attribute's pieces (`app.sql.pieces`) the masks the estimate counts; the regions of
the estimate and of its bounds (cut bins counted not at all, or whole).

`WhereCompiler` is the part of the statement compiler (`app.sql.compile`) that reads
WHERE; the compiler resolves names (`attribute`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.sql import predicates as p
from app.sql import regions
from app.sql.errors import Position, bad_sql, unsupported
from app.sql.pieces import Pieces, cut_points, split
from app.sql.predicates import AttributeCodes, Masks
from app.sql.regions import Region
from app.sql.statement import (
    Aggregate,
    AllOf,
    AnyOf,
    Between,
    Column,
    Compare,
    Condition,
    Constant,
    InList,
    IsNull,
    Like,
    Not,
    Operand,
    Truth,
    Value,
)

_FLIPPED = {"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _describe(column: str, rest: str) -> str:
    return f"{column} {rest}"


@dataclass(frozen=True)
class Leaf:
    """One predicate of a WHERE clause: code masks (true, false), the bins it cuts, and
    over a binned attribute's pieces its (true, false) masks."""

    codes: AttributeCodes
    masks: Masks
    cut: int
    piece_masks: Masks | None


def _pieces_in_list(
    codes: AttributeCodes, pieces: Pieces, values: list[Value], at: Position | None
) -> Masks:
    """IN over pieces, with SQL's NULL in the list as `predicates.in_list` has it."""
    true, false = 0, pieces.values_mask
    for value in values:
        if value is None:
            false = 0
            continue
        value_true, value_false = p.compare_pieces(codes, pieces, "=", value, at)
        true |= value_true
        false &= value_false
    return true, false


class WhereCompiler:
    """WHERE (and HAVING's predicates on grouped attributes) over a dataset's codes."""

    def __init__(self) -> None:
        self.codes: dict[str, AttributeCodes] = {}
        self.cuts: dict[str, list[float]] = {}
        self.pieces: dict[str, Pieces] = {}
        self.leaves: dict[int, Leaf] = {}
        self.cut_any = False

    def attribute(self, column: Column) -> AttributeCodes:
        raise NotImplementedError

    def _column_and_constant(self, compare: Compare, clause: str) -> tuple[Column, str, Constant]:
        left, right, op = compare.left, compare.right, compare.op
        if isinstance(left, Aggregate) or isinstance(right, Aggregate):
            raise bad_sql("aggregates belong in HAVING, not WHERE", compare.at)
        if isinstance(left, Column) and isinstance(right, Constant):
            return left, op, right
        if isinstance(left, Constant) and isinstance(right, Column):
            return right, _FLIPPED[op], left
        if isinstance(left, Column) and isinstance(right, Column):
            raise unsupported(
                f"a comparison of two attributes in {clause}",
                compare.at,
                "each predicate compares one attribute with constants",
            )
        raise unsupported(f"a comparison of two constants in {clause}", compare.at)

    def _column(self, operand: Operand, at: Position | None, clause: str) -> Column:
        if isinstance(operand, Column):
            return operand
        if isinstance(operand, Aggregate):
            raise bad_sql("aggregates belong in HAVING, not WHERE", at)
        raise unsupported(f"a predicate on a constant in {clause}", at, "test an attribute")

    def _constant(self, operand: Operand, at: Position | None) -> Constant:
        if isinstance(operand, Constant):
            return operand
        raise unsupported(
            "a comparison with an attribute or aggregate here",
            at,
            "BETWEEN bounds and LIKE patterns are constants",
        )

    def leaf(self, condition: Condition, clause: str) -> Leaf:
        """One attribute's predicate: its attribute, (true, false) code masks, the bins it
        cuts, and in WHERE over a binned attribute its (true, false) piece masks."""
        if clause == "WHERE" and id(condition) in self.leaves:
            return self.leaves[id(condition)]
        piece_masks: Masks | None = None
        if isinstance(condition, Compare):
            column, op, constant = self._column_and_constant(condition, clause)
            codes = self.attribute(column)
            at = constant.at or condition.at
            masks = p.compare(codes, op, constant.value, at)
            pieces = self.pieces.get(codes.name) if clause == "WHERE" else None
            if pieces is not None:
                piece_masks = p.compare_pieces(codes, pieces, op, constant.value, at)
            text = _describe(codes.name, f"{op} {constant.value!r}")
            at = condition.at
        elif isinstance(condition, InList):
            column = self._column(condition.operand, condition.at, clause)
            codes = self.attribute(column)
            values = [c.value for c in condition.values]
            masks = p.in_list(codes, values, condition.at)
            pieces = self.pieces.get(codes.name) if clause == "WHERE" else None
            if pieces is not None:
                piece_masks = _pieces_in_list(codes, pieces, values, condition.at)
            text, at = _describe(codes.name, "IN (…)"), condition.at
        elif isinstance(condition, Between):
            column = self._column(condition.operand, condition.at, clause)
            codes = self.attribute(column)
            low = self._constant(condition.low, condition.at)
            high = self._constant(condition.high, condition.at)
            low_true, low_false = p.compare(codes, ">=", low.value, low.at)
            high_true, high_false = p.compare(codes, "<=", high.value, high.at)
            masks = (low_true & high_true, low_false | high_false)
            pieces = self.pieces.get(codes.name) if clause == "WHERE" else None
            if pieces is not None:
                above = p.compare_pieces(codes, pieces, ">=", low.value, low.at)
                below = p.compare_pieces(codes, pieces, "<=", high.value, high.at)
                piece_masks = (above[0] & below[0], above[1] | below[1])
            text = _describe(codes.name, f"BETWEEN {low.value!r} AND {high.value!r}")
            at = condition.at
        elif isinstance(condition, IsNull):
            column = self._column(condition.operand, condition.at, clause)
            codes = self.attribute(column)
            masks, text, at = p.is_null(codes), "", condition.at
        elif isinstance(condition, Like):
            column = self._column(condition.operand, condition.at, clause)
            codes = self.attribute(column)
            pattern = self._constant(condition.pattern, condition.at)
            masks = p.like(
                codes, pattern.value, condition.escape, condition.case_insensitive, condition.at
            )
            text, at = "", condition.at
        else:
            raise unsupported(f"{type(condition).__name__} in {clause}", None)
        if clause != "WHERE":
            p.check_whole_bins(codes, masks, text, at)
        pieces = self.pieces.get(codes.name) if clause == "WHERE" else None
        if pieces is not None and piece_masks is None:
            piece_masks = (pieces.of_codes(masks[0]), pieces.of_codes(masks[1]))
        found = Leaf(codes, masks, p.undecided(codes, masks), piece_masks)
        if clause == "WHERE":
            self.leaves[id(condition)] = found
            self.cut_any = self.cut_any or bool(found.cut)
        return found

    def region(self, condition: Condition, want: bool, mode: str = "estimate") -> Region:
        """Where `condition` is true (`want`) or false, as a union of boxes: with cut
        bins spread over their pieces ("estimate"), counted not at all ("lower") or
        whole ("upper")."""
        if isinstance(condition, Not):
            return self.region(condition.condition, not want, mode)
        if isinstance(condition, (AllOf, AnyOf)):
            parts = [self.region(c, want, mode) for c in condition.conditions]
            full = {name: self._full(codes, mode) for name, codes in self.codes.items()}
            if isinstance(condition, AllOf) == want:
                return regions.intersection(parts, full)
            return regions.union(parts, full)
        if isinstance(condition, Truth):
            return regions.EVERYTHING if condition.value == want else regions.NOTHING
        leaf = self.leaf(condition, "WHERE")
        codes = leaf.codes
        true, false = leaf.masks
        if mode == "estimate" and leaf.piece_masks is not None:
            true, false = leaf.piece_masks
        elif mode == "upper":
            true, false = true | leaf.cut, false | leaf.cut
        return regions.box_of(codes.name, true if want else false, self._full(codes, mode))

    def _full(self, codes: AttributeCodes, mode: str) -> int:
        pieces = self.pieces.get(codes.name) if mode == "estimate" else None
        return pieces.full if pieces is not None else codes.full

    def _register(self, condition: Condition) -> None:
        """Resolve every attribute of a WHERE clause first, so regions know their sizes;
        split its binned attributes at its cut points (`app.sql.pieces`)."""
        leaves: list[Condition] = []
        stack: list[Condition] = [condition]
        while stack:
            current = stack.pop()
            if isinstance(current, Not):
                stack.append(current.condition)
            elif isinstance(current, (AllOf, AnyOf)):
                stack.extend(current.conditions)
            elif not isinstance(current, Truth):
                leaves.append(current)
        for leaf in leaves:
            self._collect_cuts(leaf)
        for name, cuts in self.cuts.items():
            codes = self.codes[name]
            self.pieces[name] = split(codes.intervals, codes.size, tuple(cuts))
        for leaf in leaves:
            self.leaf(leaf, "WHERE")

    def _collect_cuts(self, condition: Condition) -> None:
        """The values a WHERE predicate compares a binned attribute with."""
        compared: list[tuple[Operand, str, Operand]] = []
        if isinstance(condition, Compare):
            column, op, constant = self._column_and_constant(condition, "WHERE")
            compared.append((column, op, constant))
        elif isinstance(condition, Between):
            compared += [(condition.operand, ">=", condition.low)]
            compared += [(condition.operand, "<=", condition.high)]
        elif isinstance(condition, InList):
            compared += [(condition.operand, "=", value) for value in condition.values]
        elif isinstance(condition, (IsNull, Like)):
            compared.append((condition.operand, "", Constant(None, None)))
        for operand, op, other in compared:
            if not isinstance(operand, Column):
                continue
            codes = self.attribute(operand)
            if not codes.binned:
                continue
            cuts = self.cuts.setdefault(codes.name, [])
            value = other.value if isinstance(other, Constant) else None
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not op:
                continue
            if math.isfinite(value):
                cuts.extend(cut_points(op, float(value), codes.intervals.integer))
