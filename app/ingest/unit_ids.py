"""Privacy-unit ids in one canonical spelling, so that one person is one unit.

Rows whose ids have the same canonical form are one unit (and keep at most k rows). A
person written two ways in the curator's file would otherwise be two units with k rows
each: twice the rows the privacy guarantee counts on. Ids are compared after:

1. **trimming** whitespace at both ends (Unicode whitespace);
2. **Unicode NFC**: a letter with a combining accent ("e" + U+0301) is the same id as the
   precomposed letter ("é"); other differences stay (case is kept: "AB12" and "ab12"
   are two ids, as ids are usually case-sensitive; full-width digits are not ASCII ones);
3. **one form per number**: an id that is a decimal number — an optional sign, digits
   with an optional decimal point, an optional exponent — is that number: "1", "01",
   "+1", "1.0", "1.00" and "1e0" are one id; "-0" is "0"; "0.50" is "0.5". Numbers
   written otherwise ("1,000", "0x1F", "1 000", "١") stay text.

This applies to every id given as text or bytes: each cell of a CSV, and Parquet string
and binary columns (bytes that are valid UTF-8 are read as text; other bytes are only
trimmed of ASCII whitespace). Parquet numbers compare as numbers already within their
column (one type per column; a float -0.0 is 0.0, `app.ingest.parquet._unit_ids`);
dates, timestamps and booleans as their values.

Canonical ids are compared only: they are never stored, shown or logged.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal, InvalidOperation
from typing import Any

try:
    import pyarrow as pa
    import pyarrow.compute as pc
except ImportError:  # pragma: no cover - pyarrow is a declared dependency
    pa = None

DECIMAL_PATTERN = r"^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$"
_DECIMAL = re.compile(DECIMAL_PATTERN)
# Numbers are written out in full up to this many characters; longer (or with a larger
# exponent) they are written as digits and a power of ten: the same value, one spelling
# either way, and no id of "1e999999999" grows into a billion digits.
MAX_PLAIN_DIGITS = 1000


def canonical_ids(ids: Any) -> Any:
    """The ids of one batch (an Arrow array without nulls) in canonical form: text and
    bytes as `large_binary` (every batch the same type), any other type unchanged."""
    data_type = ids.type
    text = _is_text(data_type)
    if not (text or _is_binary(data_type)):
        return ids
    try:
        ids = pc.cast(ids, pa.large_string())  # bytes: checked to be UTF-8
    except pa.ArrowInvalid:  # not UTF-8: each id on its own (rare)
        values = ids.to_pylist()  # a null (already refused as no id) stays empty
        return _from_python([b"" if v is None else _canonical_bytes(v) for v in values])
    ids = pc.utf8_normalize(pc.utf8_trim_whitespace(ids), form="NFC")
    ids = _integers(ids, _is_integer(ids))
    # Decimals, and whole numbers too long to write out, in Python (one by one). Kernels
    # that look for a point or an exponent first: a regular expression on every id costs
    # half a second per million.
    maybe = pc.or_(
        pc.or_(pc.match_substring(ids, "."), pc.match_substring(ids, "e", ignore_case=True)),
        pc.greater(pc.utf8_length(ids), MAX_PLAIN_DIGITS),
    )
    if maybe.true_count:
        decimals = pc.and_(maybe, pc.match_substring_regex(ids, DECIMAL_PATTERN))
        if decimals.true_count:
            ids = _decimals(ids, decimals)
    return pc.cast(ids, pa.large_binary())


def canonical_text(value: str) -> str:
    """One id's canonical form (as `canonical_ids` gives it, for a single text)."""
    value = unicodedata.normalize("NFC", value.strip())
    if _DECIMAL.fullmatch(value):
        return canonical_number(value)
    return value


def canonical_number(text: str) -> str:
    """The one spelling of a decimal number: no sign but a minus, no leading or trailing
    zeros, no exponent while the digits stay within `MAX_PLAIN_DIGITS`."""
    try:
        sign, digit_tuple, exponent = Decimal(text).as_tuple()
    except InvalidOperation:  # not a number after all: the text is the id
        return text
    if not isinstance(exponent, int):  # NaN or infinity (not admitted by the pattern)
        return text
    digits = "".join(map(str, digit_tuple)).lstrip("0")
    if not digits:
        return "0"
    trailing = len(digits) - len(digits.rstrip("0"))
    digits, exponent = digits[: len(digits) - trailing], exponent + trailing
    minus = "-" if sign else ""
    if exponent >= 0:
        if len(digits) + exponent <= MAX_PLAIN_DIGITS:
            return minus + digits + "0" * exponent
    elif -exponent < len(digits):
        return minus + digits[:exponent] + "." + digits[exponent:]
    elif -exponent <= MAX_PLAIN_DIGITS:
        return minus + "0." + "0" * (-exponent - len(digits)) + digits
    return f"{minus}{digits}e{exponent}"


def _is_integer(ids: Any) -> Any:
    """Which ids are whole numbers written as digits with at most one sign."""
    signed = pc.or_(pc.starts_with(ids, "+"), pc.starts_with(ids, "-"))
    unsigned = pc.if_else(signed, pc.utf8_slice_codeunits(ids, 1), ids)
    return pc.fill_null(pc.ascii_is_decimal(unsigned), False)


def _integers(ids: Any, integers: Any) -> Any:
    """Whole numbers written as digits (the `integers` mask), in their canonical form, in
    Arrow: no plus sign, no leading zeros, "-0" as "0" (as `canonical_number` gives them).
    Trims, not regular-expression replacements: those cost a second per million ids."""
    if not integers.true_count:
        return ids
    negative = pc.starts_with(ids, "-")
    digits = pc.utf8_ltrim(pc.utf8_ltrim(ids, characters="+-"), characters="0")
    zero = pa.scalar("0", ids.type)
    digits = pc.if_else(pc.equal(pc.utf8_length(digits), 0), zero, digits)
    empty = pa.scalar("", ids.type)
    signed = pc.binary_join_element_wise(pa.scalar("-", ids.type), digits, empty)
    minus = pc.and_(negative, pc.not_equal(digits, zero))
    return pc.if_else(integers, pc.if_else(minus, signed, digits), ids)


def _decimals(ids: Any, decimals: Any) -> Any:
    """The ids with every decimal number (the `decimals` mask) in its canonical form."""
    numbers = pc.filter(ids, decimals).to_pylist()
    canonical = _from_python([canonical_number(text).encode("utf-8") for text in numbers])
    return pc.replace_with_mask(ids, decimals, pc.cast(canonical, pa.large_string()))


def _canonical_bytes(value: bytes) -> bytes:
    try:
        return canonical_text(value.decode("utf-8")).encode("utf-8")
    except UnicodeDecodeError:
        return value.strip(b" \t\r\n\x0b\x0c")


def _from_python(values: list[bytes]) -> Any:
    """A `large_binary` array built from buffers (`pa.array` on a list may import pandas)."""
    offsets = [0]
    for value in values:
        offsets.append(offsets[-1] + len(value))
    buffers = [
        None,
        pa.py_buffer(b"".join(o.to_bytes(8, "little") for o in offsets)),
        pa.py_buffer(b"".join(values)),
    ]
    return pa.Array.from_buffers(pa.large_binary(), len(values), buffers)


def _is_text(data_type: Any) -> bool:
    return bool(
        pa.types.is_string(data_type)
        or pa.types.is_large_string(data_type)
        or pa.types.is_string_view(data_type)
    )


def _is_binary(data_type: Any) -> bool:
    return bool(
        pa.types.is_binary(data_type)
        or pa.types.is_large_binary(data_type)
        or pa.types.is_binary_view(data_type)
    )
