"""Spark SQL for the Spark engine: an attribute's code as SQL expressions, the unit's id
as the cap partitions it, and the counting and validation queries.

Text only (no pyspark here): `app.records.spark` runs the queries. Each expression gives
exactly the code an upload of the same Parquet file gives (`app.ingest.parquet`), column
type by column type (Spark's names for the Parquet types, as `DataType.simpleString()`
spells them), or -1 (`BAD_CODE`) for a value outside the schema:

- categorical: text trimmed of the whitespace Arrow's `utf8_trim_whitespace` trims (the
  characters Python's `str.strip` strips) and looked up among the schema's values, then
  its missing values. Integers, booleans, dates and binary read as their text (Spark and
  Arrow spell these alike). Floating and decimal numbers are compared as numbers with the
  values Arrow would spell exactly as a schema value ("1.5" matches 1.5; "1.50" matches
  nothing, as in an upload); -0.0 is spelled "-0", so it matches only "-0".
- numeric and integer: text trimmed, then (unless a missing value) parsed as Python's
  `float` parses it (ASCII digits; underscores between digits; inf, infinity, nan), any
  number type converted to a double as Arrow converts it (decimals too, whose doubles
  Arrow computes its own way, not always the nearest: `_decimal_as_arrow_double`).
  Numeric bins are `[eᵢ, eᵢ₊₁)`, the last closed, `clip` clamping into the first or last
  bin; an integer in min..max has the code (value - min) div width (`clip` clamping into
  min..max), a number with a fraction, NaN or infinity is out of the schema.
- a null, or NaN in a floating column, is the missing code (the last) with `missing`.
Where the engine is stricter than an upload: text numbers in non-ASCII digits, and
timestamps read as categories (Arrow's spelling of them is not Spark's) are refused.
Each expression is built in three stages (`p`: the cell as text or a double, `q`: its
position or number, `c`: the code as INT) so that no stage repeats an expensive one.
The schema's values and edges are literals in the query: an attribute of thousands of
codes makes a long query (Spark then gives up whole-stage code generation for it, and
counts the same, more slowly).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from app.records.engine import ID_TRIM
from app.schema import Attribute
from app.schema.within_bins import GRID, code_intervals

BAD_CODE = -1

# The characters Arrow's utf8_trim_whitespace trims from text cells: exactly those for
# which Python's str.isspace() is true.
WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680"
    + "".join(chr(c) for c in range(0x2000, 0x200B))
    + "\u2028\u2029\u202f\u205f\u3000"
)

# What Python's float() accepts once stripped, but for non-ASCII digits (which Arrow's
# parser refuses and the Spark engine refuses too): a sign, digits with single
# underscores between them, a fraction, an exponent; or inf, infinity, nan in any case.
_DIGITS = "[0-9](_?[0-9])*"
PYTHON_FLOAT = (
    rf"^[+-]?(({_DIGITS}(\.({_DIGITS})?)?|\.{_DIGITS})([eE][+-]?{_DIGITS})?"
    r"|(?i:inf|infinity|nan))$"
)

_TEXT = re.compile(r"^(string|varchar\(\d+\)|char\(\d+\))$")
_AS_TEXT = {"tinyint", "smallint", "int", "bigint", "boolean", "date", "binary"}
_INTEGRAL = {"tinyint", "smallint", "int", "bigint"}
_FLOATING = {"float", "double"}
_DECIMAL = re.compile(r"^decimal\((\d+),(-?\d+)\)$")
_NESTED = re.compile(r"^(array|map|struct|variant)")
# The largest integer a double holds exactly; Arrow converts decimals up to it by a
# multiplication.
_EXACT_INTEGER = 2**53


class UnreadableColumn(ValueError):
    """A source column whose type the attribute cannot read (as an upload could not)."""


def identifier(name: str) -> str:
    """A column name quoted for Spark SQL."""
    return "`" + name.replace("`", "``") + "`"


def string_literal(text: str) -> str:
    """A Spark SQL string literal of any text: letters, digits and a few signs as they
    are, every other character as a \\u escape (UTF-16, as Java strings hold text), so
    no quote, backslash or brace in a schema value can change the query."""
    out: list[str] = []
    for char in text:
        if char.isascii() and (char.isalnum() or char in " _.,:-"):
            out.append(char)
            continue
        units = char.encode("utf-16-be")
        for i in range(0, len(units), 2):
            out.append(f"\\u{int.from_bytes(units[i : i + 2], 'big'):04X}")
    return "'" + "".join(out) + "'"


def double_literal(x: float) -> str:
    """A finite double as a Spark SQL literal that parses back to the same double."""
    if not math.isfinite(x):
        raise ValueError(f"{x!r} is not a finite number")
    return f"CAST({string_literal(repr(float(x)))} AS DOUBLE)"


def _strings(texts: Sequence[str]) -> str:
    return "array(" + ", ".join(string_literal(t) for t in texts) + ")"


# -- the stages of one attribute's code ----------------------------------------------------


@dataclass(frozen=True)
class Stages:
    """One attribute's code in three stages over the source column: `p{i}` (over the
    column), `q{i}` (over `p{i}`), and the code `c{i}` (over both), an INT."""

    prepared: str
    parsed: str | None
    code: str


def code_stages(attribute: Attribute, column_type: str, index: int, column: str) -> Stages:
    """The stages of `attribute`'s code from a source column of Spark type `column_type`
    (`column`: its quoted name). Raises `UnreadableColumn` for a type an upload would not
    read for this kind of attribute (lists, maps, timestamps, …)."""
    if _NESTED.match(column_type):
        raise UnreadableColumn(column_type)
    p, q = f"p{index}", f"q{index}"
    null_code = attribute.value_size if attribute.missing else BAD_CODE
    if attribute.kind == "categorical":
        if _TEXT.match(column_type) or column_type in _AS_TEXT:
            return _categorical_text(attribute, column, p, q, null_code)
        if column_type in _FLOATING or _DECIMAL.match(column_type):
            return _categorical_number(attribute, column_type, column, p, null_code)
        raise UnreadableColumn(column_type)
    if _TEXT.match(column_type):
        return _number_from_text(attribute, column, p, q, null_code)
    return _number_from_number(attribute, column_type, column, p, null_code)


def _categorical_text(attribute: Attribute, column: str, p: str, q: str, null_code: int) -> Stages:
    # Values, then missing values, in one array: a position past the values is "missing".
    values = attribute.categories
    texts = list(values) + (list(attribute.missing_values) if attribute.missing else [])
    prepared = f"trim(BOTH {string_literal(WHITESPACE)} FROM CAST({column} AS STRING))"
    parsed = f"array_position({_strings(texts)}, {p})"
    missing = attribute.value_size if attribute.missing else BAD_CODE
    code = (
        f"CASE WHEN {p} IS NULL THEN {null_code} WHEN {q} = 0 THEN {BAD_CODE} "
        f"WHEN {q} <= {len(values)} THEN CAST({q} - 1 AS INT) ELSE {missing} END"
    )
    return Stages(prepared, parsed, f"CAST({code} AS INT)")


def _categorical_number(
    attribute: Attribute, column_type: str, column: str, p: str, null_code: int
) -> Stages:
    """A number column read by text: Arrow spells each number one way, so a cell matches
    the schema value (or missing value) that is exactly its spelling."""
    spelled = list(enumerate(attribute.categories))
    if attribute.missing:
        spelled += [(attribute.value_size, text) for text in attribute.missing_values]
    branches = []
    for code, text in spelled:
        condition = _spelled_as(text, column_type, p)
        if condition is not None:
            branches.append(f"WHEN {condition} THEN {code}")
    floating = column_type in _FLOATING
    prepared = f"CASE WHEN isnan({column}) THEN NULL ELSE {column} END" if floating else column
    case = f"CASE WHEN {p} IS NULL THEN {null_code} {' '.join(branches)} ELSE {BAD_CODE} END"
    return Stages(prepared, None, f"CAST({case} AS INT)")


def _spelled_as(text: str, column_type: str, p: str) -> str | None:
    """The condition on a number cell `p` that Arrow spells it `text`, or None if Arrow
    spells no number of this type so."""
    import pyarrow as pa

    decimal = _DECIMAL.match(column_type)
    if decimal is not None:
        precision, scale = int(decimal.group(1)), int(decimal.group(2))
        arrow_type = pa.decimal128(precision, scale)
        try:
            number = Decimal(text).quantize(Decimal(1).scaleb(-scale))
            spelled = pa.array([number], arrow_type).cast(pa.string())[0].as_py()
        except (InvalidOperation, ValueError, pa.ArrowException):
            return None
        if spelled != text:
            return None
        return f"{p} = CAST({string_literal(str(number))} AS {column_type.upper()})"
    arrow_type = pa.float32() if column_type == "float" else pa.float64()
    try:
        number = pa.array([text]).cast(arrow_type)
    except pa.ArrowException:
        return None
    x = number[0].as_py()
    if x is None or not math.isfinite(x) or number.cast(pa.string())[0].as_py() != text:
        return None
    condition = f"{p} = {double_literal(x)}"
    if x == 0:  # 0.0 and -0.0 compare equal, but Arrow spells them "0" and "-0"
        negative = f"startswith(CAST({p} AS STRING), '-')"
        condition += f" AND {'' if math.copysign(1.0, x) < 0 else 'NOT '}{negative}"
    return condition


def _number_from_text(attribute: Attribute, column: str, p: str, q: str, null_code: int) -> Stages:
    prepared = f"trim(BOTH {string_literal(WHITESPACE)} FROM {column})"
    pattern = string_literal(PYTHON_FLOAT)
    parsed = f"CASE WHEN {p} RLIKE {pattern} THEN try_cast(replace({p}, '_', '') AS DOUBLE) END"
    missing = ""
    if attribute.missing:
        texts = _strings(attribute.missing_values)
        missing = f"WHEN array_contains({texts}, {p}) THEN {attribute.missing_code} "
    code = (
        f"CASE WHEN {p} IS NULL THEN {null_code} {missing}ELSE {_code_of_number(attribute, q)} END"
    )
    return Stages(prepared, parsed, f"CAST({code} AS INT)")


def _number_from_number(
    attribute: Attribute, column_type: str, column: str, p: str, null_code: int
) -> Stages:
    if column_type in _FLOATING:
        prepared = f"CASE WHEN isnan({column}) THEN NULL ELSE CAST({column} AS DOUBLE) END"
    elif column_type in _INTEGRAL or column_type == "boolean":
        prepared = f"CAST({column} AS DOUBLE)"
    else:
        decimal = _DECIMAL.match(column_type)
        if decimal is None:
            raise UnreadableColumn(column_type)
        prepared = _decimal_as_arrow_double(column, int(decimal.group(2)))
    code = f"CASE WHEN {p} IS NULL THEN {null_code} ELSE {_code_of_number(attribute, p)} END"
    return Stages(prepared, None, f"CAST({code} AS INT)")


def _decimal_as_arrow_double(column: str, scale: int) -> str:
    """A decimal as the double Arrow makes of it (`Decimal128::ToDouble`): of its absolute
    value, the unscaled integer u times 10^-scale when u <= 2^53, else its whole part
    plus its fraction's digits times 10^-scale; then the sign. Every step is a correctly
    rounded conversion of digits (Spark parses text as Java's parseDouble does) or one
    IEEE operation, so the double is Arrow's to the last bit."""
    if scale <= 0:
        return f"CAST(CAST({column} AS STRING) AS DOUBLE)"
    text = f"CAST(abs({column}) AS STRING)"  # plain digits, `scale` of them after the point
    digits = f"replace({text}, '.', '')"
    power = double_literal(float(f"1e-{scale}"))
    whole = f"CAST(substring_index({text}, '.', 1) AS DOUBLE)"
    fraction = f"CAST(substring_index({text}, '.', -1) AS DOUBLE)"
    magnitude = (
        f"CASE WHEN coalesce(try_cast({digits} AS BIGINT) <= {_EXACT_INTEGER}, false) "
        f"THEN CAST({digits} AS DOUBLE) * {power} ELSE {whole} + {fraction} * {power} END"
    )
    return f"CASE WHEN {column} < 0 THEN -({magnitude}) ELSE {magnitude} END"


def _code_of_number(attribute: Attribute, x: str) -> str:
    """The code of a double `x` (NULL or NaN: out of the schema)."""
    if attribute.kind == "numeric":
        return _bin(attribute, x)
    low, high, width = attribute.integer_range
    below = "0" if attribute.clip else str(BAD_CODE)
    above = str(attribute.value_size - 1) if attribute.clip else str(BAD_CODE)
    # Whole doubles in min..max (|min|, |max| <= 2^53) are exact, and so are their
    # offsets from min: the code is the offset divided by the width, rounded down.
    offset = f"CAST({x} AS BIGINT) - {low}" if low else f"CAST({x} AS BIGINT)"
    code = offset if width == 1 else f"({offset}) div {width}"
    # x - x is NaN exactly when x is NaN or infinite; x % 1 is 0 exactly for whole x.
    return (
        f"CASE WHEN {x} IS NULL OR isnan({x} - {x}) OR {x} % 1.0D != 0.0D THEN {BAD_CODE} "
        f"WHEN {x} < {low}.0D THEN {below} WHEN {x} > {high}.0D THEN {above} "
        f"ELSE CAST({code} AS INT) END"
    )


def _bin(attribute: Attribute, x: str) -> str:
    edges = attribute.edges
    last = len(edges) - 2
    below = "0" if attribute.clip else str(BAD_CODE)
    above = str(last) if attribute.clip else str(BAD_CODE)
    return (
        f"CASE WHEN {x} IS NULL OR isnan({x}) THEN {BAD_CODE} "
        f"WHEN {x} < {double_literal(edges[0])} THEN {below} "
        f"WHEN {x} > {double_literal(edges[-1])} THEN {above} "
        f"ELSE {_bin_search(edges, x, 0, last)} END"
    )


def _bin_search(edges: Sequence[float], x: str, low: int, high: int) -> str:
    """The bin of `x` among bins low..high (x within [e_low, e_high+1]): a balanced
    tree of comparisons, so a row pays log₂(bins) of them, not one per bin."""
    if low == high:
        return str(low)
    middle = (low + high + 1) // 2
    return (
        f"IF({x} < {double_literal(edges[middle])}, "
        f"{_bin_search(edges, x, low, middle - 1)}, {_bin_search(edges, x, middle, high)})"
    )


# -- the unit's id -------------------------------------------------------------------------


def unit_id_expression(column_type: str, column: str) -> str:
    """The unit's id as the cap partitions rows (engine.py: text trimmed of `ID_TRIM`'s
    characters, floating ids as doubles with -0.0 = 0.0); NULL where a row has no id
    (a null, an empty text or byte string, a NaN)."""
    if _NESTED.match(column_type):
        raise UnreadableColumn(column_type)
    if _TEXT.match(column_type):
        return f"nullif(trim(BOTH {string_literal(ID_TRIM)} FROM {column}), '')"
    if column_type == "binary":
        return f"CASE WHEN length({column}) = 0 THEN NULL ELSE {column} END"
    if column_type in _FLOATING:
        # -0.0 + 0.0 is +0.0, so both zeros are one unit.
        return f"CASE WHEN isnan({column}) THEN NULL ELSE CAST({column} AS DOUBLE) + 0.0D END"
    return column


# -- queries -------------------------------------------------------------------------------

SOURCE = "{source}"  # where spark.sql(query, source=dataframe) puts the source's rows


@dataclass(frozen=True)
class Encoding:
    """How the source's rows become codes: the stages of the attributes needed, by
    position in the schema, and the unit's id expression (None without a unit)."""

    stages: dict[int, Stages]
    unit: str | None = None
    # Positions of the binned attributes whose places within the bins `f{i}` the rows
    # carry (`place_expression`), for within-bin sums.
    places: tuple[int, ...] = ()
    attributes: tuple[Attribute, ...] = ()


def coded_query(encoding: Encoding, keep: str | None = None) -> str:
    """Rows of codes `c{i}` (INT) and the unit's id `u`; `keep`, a source column kept
    beside them as `x` (the examples of a validation); the places `f{i}` asked for."""
    first = [f"{s.prepared} AS p{i}" for i, s in encoding.stages.items()]
    second = [f"{s.parsed} AS q{i}" for i, s in encoding.stages.items() if s.parsed is not None]
    last = [f"{s.code} AS c{i}" for i, s in encoding.stages.items()]
    passed = []
    if encoding.unit is not None:
        first.append(f"{encoding.unit} AS u")
        passed.append("u")
    if keep is not None:
        first.append(f"{keep} AS x")
        passed.append("x")
    # A place needs its attribute's number: the parsed stage of text, else the prepared.
    numbers = [
        f"{'q' if encoding.stages[i].parsed is not None else 'p'}{i} AS x{i}"
        for i in encoding.places
    ]
    prepared = f"SELECT {', '.join(first)} FROM {SOURCE}"
    parsed = f"SELECT *{''.join(', ' + q for q in second)} FROM ({prepared})"
    coded = f"SELECT {', '.join(last + passed + numbers)} FROM ({parsed})"
    if not encoding.places:
        return coded
    kept = [f"c{i}" for i in encoding.stages] + passed
    places = [f"{place_expression(encoding.attributes[i], i)} AS f{i}" for i in encoding.places]
    return f"SELECT {', '.join(kept + places)} FROM ({coded})"


def place_expression(attribute: Attribute, index: int) -> str:
    """A row's place within its bin in grid steps (BIGINT 0..GRID), from its number
    `x{index}` and code `c{index}`: the same double operations as
    `app.schema.within_bins.quantized_fractions` — (x − low) / (high − low), clamped to
    [0, 1], times 2¹⁶, plus ½, floored — so the same integer; 0 for the missing code or
    no finite number."""
    lows, highs = code_intervals(attribute)
    x, c = f"x{index}", f"c{index}"
    low = f"element_at(array({', '.join(double_literal(v) for v in lows)}), {c} + 1)"
    high = f"element_at(array({', '.join(double_literal(v) for v in highs)}), {c} + 1)"
    width = f"({high} - {low})"
    fraction = f"least(greatest(({x} - {low}) / {width}, 0.0D), 1.0D)"
    return (
        f"CASE WHEN {c} < 0 OR {c} >= {attribute.value_size} OR {x} IS NULL "
        f"OR isnan({x} - {x}) OR NOT {width} > 0.0D THEN CAST(0 AS BIGINT) "
        f"ELSE CAST(floor({fraction} * {double_literal(float(GRID))} + 0.5D) AS BIGINT) END"
    )


@dataclass(frozen=True)
class Cap:
    """The unit's cap in SQL terms: the secret (a signed 64-bit integer), rows per unit,
    and the positions of every schema attribute (their codes make the row's key)."""

    secret: int
    max_rows: int
    attributes: tuple[int, ...]


def capped_query(encoding: Encoding, cap: Cap | None) -> str:
    """The coded rows a count sees: with a cap, each unit's `max_rows` rows of smallest
    key, `xxhash64(secret, c_0, …, c_{n-1})` (seed 42, Spark's default; engine.py)."""
    coded = coded_query(encoding)
    if cap is None:
        return coded
    missing = [i for i in cap.attributes if i not in encoding.stages]
    if missing or encoding.unit is None:
        raise ValueError("the cap's key needs every attribute's code and the unit's id")
    codes = ", ".join(f"c{i}" for i in cap.attributes)
    key = f"xxhash64(CAST({int(cap.secret)} AS BIGINT), {codes})"
    # Rows whose keys tie have equal codes; of those, the smallest places are kept first
    # (as the local engine keeps them): sums of places then do not depend on row order.
    order = key + "".join(f", f{i}" for i in encoding.places)
    ranked = f"SELECT *, row_number() OVER (PARTITION BY u ORDER BY {order}) AS r FROM ({coded})"
    return f"SELECT * FROM ({ranked}) WHERE r <= {int(cap.max_rows)}"


def grouping_id(grouped: Sequence[int], counted: Sequence[int]) -> int:
    """Spark's grouping_id() of the rows of a grouping set `counted` when the query
    groups by `grouped`: bit (len - 1 - j) is set for each grouped[j] not counted."""
    bits = 0
    for j, index in enumerate(grouped):
        if index not in counted:
            bits |= 1 << (len(grouped) - 1 - j)
    return bits


def count_query(encoding: Encoding, sets: Sequence[Sequence[int]], cap: Cap | None) -> str:
    """One aggregation of every grouping set (attribute positions) over the capped
    rows: `g` (grouping_id), the codes `c{i}` grouped (NULL where not in a row's set)
    and `n`, the rows counted."""
    rows = capped_query(encoding, cap)
    grouped = sorted({i for counted in sets for i in counted})
    if not grouped:  # only the empty set: every row in one group
        return f"SELECT 0 AS g, count(*) AS n FROM ({rows})"
    columns = ", ".join(f"c{i}" for i in grouped)
    grouping_sets = ", ".join("(" + ", ".join(f"c{i}" for i in counted) + ")" for counted in sets)
    return (
        f"SELECT grouping_id() AS g, {columns}, count(*) AS n FROM ({rows}) "
        f"GROUP BY {columns} GROUPING SETS ({grouping_sets})"
    )


def sum_query(encoding: Encoding, cap: Cap | None) -> str:
    """One aggregation over the capped rows, one grouping set per attribute of
    `encoding.places`: `g` (grouping_id), its code `c{i}`, `n` the rows and `s{i}` the
    sum of their places within the bin."""
    rows = capped_query(encoding, cap)
    columns = ", ".join(f"c{i}" for i in encoding.places)
    sums = ", ".join(f"sum(f{i}) AS s{i}" for i in encoding.places)
    sets = ", ".join(f"(c{i})" for i in encoding.places)
    return (
        f"SELECT grouping_id() AS g, {columns}, count(*) AS n, {sums} FROM ({rows}) "
        f"GROUP BY {columns} GROUPING SETS ({sets})"
    )


def validation_query(encoding: Encoding) -> str:
    """The registration scan's one aggregation: `rows`, `bad{i}` (rows whose value is
    outside the schema, per attribute) and `no_id` (rows without a unit id)."""
    counts = ["count(*) AS rows"]
    counts += [f"count_if(c{i} = {BAD_CODE}) AS bad{i}" for i in encoding.stages]
    if encoding.unit is not None:
        counts.append("count_if(u IS NULL) AS no_id")
    return f"SELECT {', '.join(counts)} FROM ({coded_query(encoding)})"


def examples_query(encoding: Encoding, index: int, column: str, limit: int) -> str:
    """Up to `limit` values (as text) of the source column `column` whose code for
    attribute `index` is outside the schema."""
    one = Encoding({index: encoding.stages[index]})
    coded = coded_query(one, keep=column)
    return f"SELECT CAST(x AS STRING) AS v FROM ({coded}) WHERE c{index} = {BAD_CODE} LIMIT {limit}"
