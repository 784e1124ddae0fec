"""`app.records.hashing` is Spark SQL's xxhash64: XXH64 of one value's little-endian bytes
(8 for a BIGINT, 4 for an INT) with the previous hash as the seed, starting from 42."""

from __future__ import annotations

import struct

import numpy as np
import xxhash

from app.records.hashing import SEED, hash_ints, hash_long, row_keys, text_hashes

SEEDS = [0, 1, SEED, 2**63, 2**64 - 1, 0x1234_5678_9ABC_DEF0]


def xxh64(data: bytes, seed: int) -> int:
    return int(xxhash.xxh64_intdigest(data, seed=seed))


def test_hash_long_is_xxh64_of_eight_little_endian_bytes() -> None:
    for value in [0, 1, -1, 42, 2**31, -(2**31) - 1, 2**63 - 1, -(2**63), 0x5EC2E70F1A4E]:
        for seed in SEEDS:
            assert hash_long(value, seed) == xxh64(struct.pack("<q", value), seed)


def test_hash_ints_is_xxh64_of_four_little_endian_bytes() -> None:
    values = np.array([0, 1, 2, 7, 255, 256, 65_535, 2**31 - 1], dtype=np.int64)
    for seed in SEEDS:
        expected = [xxh64(struct.pack("<i", int(v)), seed) for v in values]
        assert hash_ints(values, seed).tolist() == expected
        per_row = np.full(values.size, seed, dtype=np.uint64)
        assert hash_ints(values, per_row).tolist() == expected


def test_row_keys_chain_the_secret_then_each_code_as_spark_does() -> None:
    rng = np.random.default_rng(0)
    codes = [rng.integers(0, 50, 40).astype(np.uint8), rng.integers(0, 3000, 40)]
    for secret in [0, -5, 2**62 + 3]:
        keys = row_keys(secret, codes)
        assert keys.dtype == np.int64
        for row in range(40):
            state = xxh64(struct.pack("<q", secret), SEED)
            for column in codes:
                state = xxh64(struct.pack("<i", int(column[row])), state)
            assert int(keys[row]) == struct.unpack("<q", struct.pack("<Q", state))[0]
    assert not np.array_equal(row_keys(1, codes), row_keys(2, codes))


def test_text_hashes_depend_on_the_bytes_only() -> None:
    words = [b"", b"a", b"ab", b"ba", b"", b"u12", b"u12", b"x" * 40]
    offsets = np.cumsum([0] + [len(w) for w in words])
    data = np.frombuffer(b"".join(words), dtype=np.uint8)
    hashes = text_hashes(offsets, data).tolist()
    assert hashes[0] == hashes[4] and hashes[5] == hashes[6]
    assert len(set(hashes)) == 6
    # The same strings at other positions of another buffer hash alike.
    shifted = text_hashes(offsets[5:7] + 3, np.concatenate([np.zeros(3, np.uint8), data]))
    assert shifted.tolist() == hashes[5:6]
