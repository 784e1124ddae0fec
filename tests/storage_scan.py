"""Looking for a dataset's stored column bytes in the database's own files (purge scrubs).

A dataset with one column of random codes packs (zlib, `app.ingest.pack_column`) into a
blob of high-entropy bytes no other row shares. The database splits a large blob over
pages (SQLite overflow pages of ~4 kB, PostgreSQL TOAST chunks of ~2 kB), so the
search is for short pieces of it taken all along the blob, not for the blob whole.
"""

from __future__ import annotations

import random
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.engine import make_url

from app.db import Database, DatasetColumn

# The pack header (magic, dtype, length) is the same in every column: skip it.
PACK_HEADER_BYTES = 24
PIECE_BYTES = 64
PIECE_STRIDE = 256
# The schema of `distinctive_csv`: one attribute of 256 integer codes.
DISTINCTIVE_SCHEMA = {"code": 256}


def distinctive_csv(seed: int, rows: int = 16_000) -> bytes:
    """A CSV of one column of random codes 0..255 (its packed blob is ~`rows` bytes)."""
    generator = random.Random(seed)
    return ("code\n" + "".join(f"{generator.randrange(256)}\n" for _ in range(rows))).encode()


def stored_blobs(database: Database, dataset_id: str) -> list[bytes]:
    with database.read_only() as session:
        return list(
            session.scalars(
                select(DatasetColumn.data).where(DatasetColumn.dataset_id == dataset_id)
            )
        )


def pieces_of(blobs: list[bytes]) -> list[bytes]:
    pieces = [
        blob[start : start + PIECE_BYTES]
        for blob in blobs
        for start in range(PACK_HEADER_BYTES, len(blob) - PIECE_BYTES, PIECE_STRIDE)
    ]
    if len(pieces) < 20:
        raise ValueError("the blobs are too short to search for")
    return pieces


def count_found(pieces: list[bytes], haystack: bytes) -> int:
    return sum(piece in haystack for piece in pieces)


def sqlite_files(url: str) -> dict[str, bytes]:
    """The main database file and its write-ahead log (empty if there is none), as bytes."""
    main = Path(str(make_url(url).database))
    wal = main.with_name(main.name + "-wal")
    return {
        "main": main.read_bytes(),
        "wal": wal.read_bytes() if wal.exists() else b"",
    }
