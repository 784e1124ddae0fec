"""Registered sources: where a dataset's records live when privq holds none of them.

What needs no row of the source: the URI and the operator's allowed roots
(`PRIVQ_SOURCE_ROOTS`), the files a source consists of and their fingerprint. Reading
rows is the counting engines' (`app.records`), behind the gate.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SourceFile:
    """One Parquet file of a source, as fingerprinted at registration."""

    path: str  # as the filesystem names it (no scheme): "/srv/lake/visits/part-0.parquet"
    size: int
    # The modification time in nanoseconds (local files) or the object's ETag (S3).
    version: str


@dataclass(frozen=True)
class Source:
    """A registered source: its URI and the files fingerprinted at registration (sorted by
    path). Hive-style partition folders under the URI (`year=2024/`) give columns too."""

    uri: str  # "file:///srv/lake/visits/" or "s3://bucket/prefix/"
    files: tuple[SourceFile, ...]
