"""Spark SQL's `xxhash64`, vectorised: the unit cap's row key, and a hash for bucketing ids.

`row_keys` computes, for every row at once, what Spark SQL computes for
`xxhash64(secret, code_1, …, code_n)` with a BIGINT secret and INT codes: XXH64 with
seed 42 over the secret (Spark's `XXH64.hashLong`), whose result is the seed of the
first code's hash (`XXH64.hashInt`), and so on; the last hash, read as a signed 64-bit
integer, is the key. Spark's hashLong and hashInt are XXH64 of the value's 8 or 4
little-endian bytes, so the `xxhash` package checks them in the tests.

The arithmetic is on uint64 arrays, whose products and sums wrap around modulo 2⁶⁴
as Java's longs do; the shifts are logical (Java's `>>>`). The secret's hash is one
number, computed in Python integers.

`id_buckets` spreads a batch's unit ids over buckets (`app.records.capping`): any
well-mixed function of the id's value does, as long as it is the same at every scan.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

SEED = 42
_MASK = (1 << 64) - 1
PRIME64_1 = 0x9E3779B185EBCA87
PRIME64_2 = 0xC2B2AE3D27D4EB4F
PRIME64_3 = 0x165667B19E3779F9
PRIME64_4 = 0x85EBCA77C2B2AE63
PRIME64_5 = 0x27D4EB2F165667C5

_P1 = np.uint64(PRIME64_1)
_P2 = np.uint64(PRIME64_2)
_P3 = np.uint64(PRIME64_3)
_P5_PLUS_4 = np.uint64((PRIME64_5 + 4) & _MASK)


def _rotl(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (64 - bits))) & _MASK


def _fmix(value: int) -> int:
    value ^= value >> 33
    value = (value * PRIME64_2) & _MASK
    value ^= value >> 29
    value = (value * PRIME64_3) & _MASK
    value ^= value >> 32
    return value


def hash_long(value: int, seed: int) -> int:
    """Spark's `XXH64.hashLong(value, seed)` of one signed 64-bit value, as uint64."""
    value &= _MASK
    state = (seed + PRIME64_5 + 8) & _MASK
    state ^= (_rotl((value * PRIME64_2) & _MASK, 31) * PRIME64_1) & _MASK
    state = (_rotl(state, 27) * PRIME64_1 + PRIME64_4) & _MASK
    return _fmix(state)


def hash_ints(values: np.ndarray, seeds: np.ndarray | int) -> np.ndarray:
    """Spark's `XXH64.hashInt(value, seed)` of every value (non-negative, below 2³¹: codes)
    with its row's seed (a uint64 array, or one seed for all rows); uint64."""
    state = values.astype(np.uint64)  # a fresh array, changed in place from here on
    state *= _P1
    if isinstance(seeds, np.ndarray):
        state ^= seeds + _P5_PLUS_4
    else:
        state ^= np.uint64((seeds + PRIME64_5 + 4) & _MASK)
    high = state >> np.uint64(64 - 23)
    state <<= np.uint64(23)
    state |= high
    state *= _P2
    state += _P3
    return _fmix_array(state)


def _fmix_array(state: np.ndarray) -> np.ndarray:
    """XXH64's final avalanche, in place."""
    state ^= state >> np.uint64(33)
    state *= _P2
    state ^= state >> np.uint64(29)
    state *= _P3
    state ^= state >> np.uint64(32)
    return state


def row_keys(secret: int, codes: Sequence[np.ndarray]) -> np.ndarray:
    """Spark SQL's `xxhash64(secret, codes[0], codes[1], …)` (seed 42) of every row, with
    `secret` a BIGINT and each code an INT: int64, one per row."""
    if not codes:
        raise ValueError("a row key hashes at least one code")
    seed = hash_long(secret, SEED)
    keys = hash_ints(codes[0], seed)
    for column in codes[1:]:
        keys = hash_ints(column, keys)
    return keys.view(np.int64)


def mix(values: np.ndarray) -> np.ndarray:
    """A well-mixed uint64 of every uint64 value (XXH64's avalanche after a multiply)."""
    state = values * _P1
    state ^= state >> np.uint64(31)
    return _fmix_array(state)


def text_hashes(offsets: np.ndarray, data: np.ndarray) -> np.ndarray:
    """A uint64 hash of each byte string of an Arrow string or binary array, given its
    offsets (n + 1 of them) and its data bytes (uint8).

    The strings are read eight bytes at a time, through a view of the bytes as
    overlapping little-endian words (one starting at every byte); the bytes past a
    string's end are masked off, each word mixed into the string's hash, which starts
    from its length. A pass per eight bytes of the longest string, not per byte.
    """
    offsets = offsets.astype(np.int64)
    lengths = np.diff(offsets)
    hashes = lengths.astype(np.uint64) * _P3
    if not lengths.size or int(lengths.max()) == 0:
        return mix(hashes)
    first, last = int(offsets[0]), int(offsets[-1])
    padded = np.zeros(last - first + 8, dtype=np.uint8)
    padded[: last - first] = data[first:last]
    words = np.ndarray(
        shape=(last - first + 1,), dtype="<u8", buffer=padded, offset=0, strides=(1,)
    )
    starts = offsets[:-1] - first
    for word in range(-(-int(lengths.max()) // 8)):
        remaining = np.clip(lengths - 8 * word, 0, 8)
        value = words[np.minimum(starts + 8 * word, last - first)]
        # Keep the string's own bytes: the low `remaining` bytes of the word.
        keep = np.where(
            remaining >= 8,
            np.uint64(_MASK),
            (np.uint64(1) << (remaining.astype(np.uint64) * np.uint64(8))) - np.uint64(1),
        )
        value &= keep
        # Only strings that reach this word change: a hash is the same in any batch.
        hashes = np.where(remaining > 0, (hashes ^ mix(value)) * _P1, hashes)
    return mix(hashes)
