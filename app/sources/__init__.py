"""Registered sources: where a dataset's records live when privq holds none of them.

What needs no row of the source: the URI and the operator's allowed roots
(`PRIVQ_SOURCE_ROOTS`), the files a source consists of and their fingerprint. Reading
rows is the counting engines' (`app.records`), behind the gate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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


class SourceUnreadable(Exception):
    """The source's location could not be listed: missing, or not a file or a folder."""


def _filesystem(uri: str) -> tuple[Any, str]:
    from pyarrow import fs

    try:
        return fs.FileSystem.from_uri(uri)  # type: ignore[no-any-return]
    except Exception:  # the message could name credentials or internals
        raise SourceUnreadable(f"the source {uri!r} cannot be opened") from None


def list_files(uri: str) -> tuple[SourceFile, ...]:
    """The source's files now (a file, or a folder walked recursively, skipping names that
    start with "_" or "." such as _SUCCESS and .crc files), sorted by path."""
    from pyarrow import fs

    filesystem, path = _filesystem(uri)
    info = filesystem.get_file_info(path)
    if info.type == fs.FileType.File:
        infos = [info]
    elif info.type == fs.FileType.Directory:
        selector = fs.FileSelector(path, recursive=True)
        infos = [
            i
            for i in filesystem.get_file_info(selector)
            if i.type == fs.FileType.File and not _hidden(i.path[len(path) :])
        ]
    else:
        raise SourceUnreadable(f"the source {uri!r} does not exist")
    return tuple(sorted((_file_of(i) for i in infos), key=lambda f: f.path))


def _hidden(relative: str) -> bool:
    return any(part.startswith(("_", ".")) for part in relative.split("/") if part)


def _file_of(info: Any) -> SourceFile:
    version = str(info.mtime_ns) if info.mtime_ns is not None else ""
    return SourceFile(path=info.path, size=int(info.size or 0), version=version)


def fingerprint_json(files: tuple[SourceFile, ...]) -> dict[str, Any]:
    """The fingerprint as stored in `Dataset.source_fingerprint`."""
    return {"files": [{"path": f.path, "size": f.size, "version": f.version} for f in files]}


def files_of(fingerprint: dict[str, Any]) -> tuple[SourceFile, ...]:
    return tuple(SourceFile(**f) for f in fingerprint["files"])
