"""Registered sources: where a dataset's records live when privq holds none of them.

What needs no row of the source: the URI and the operator's allowed roots
(`PRIVQ_SOURCE_ROOTS`), the files a source consists of and their fingerprint. Reading
rows is the counting engines' (`app.records`), behind the gate.

- `check_uri(uri, roots)` (`app.sources.roots`): the URI normalised, or 422
  `source_not_allowed` before any file is opened;
- `list_files(uri, roots=…)`: the source's files now, each link inside re-checked;
- `fingerprint_json` / `files_of`: the fingerprint as `Dataset.source_fingerprint`
  stores it, and `changed(registered, now)`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from app.errors import PrivqError, SourceNotAllowed
from app.sources.roots import Location, check_uri, first_escaping

__all__ = [
    "Location",
    "Source",
    "SourceFile",
    "SourceUnreadable",
    "changed",
    "check_uri",
    "files_of",
    "fingerprint_json",
    "list_files",
]


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


class SourceUnreadable(PrivqError, status=422, code="source_not_found"):
    """The source's location could not be listed: missing, not a file or a folder, or a
    folder with no file."""


def _filesystem(uri: str) -> tuple[Any, str]:
    from pyarrow import fs

    try:
        return fs.FileSystem.from_uri(uri)  # type: ignore[no-any-return]
    except Exception:  # the message could name credentials or internals
        raise SourceUnreadable(f"the source {uri!r} cannot be opened") from None


def list_files(uri: str, *, roots: Sequence[str] | None = None) -> tuple[SourceFile, ...]:
    """The source's files now (a file, or a folder walked recursively, skipping names that
    start with "_" or "." such as _SUCCESS and .crc files), sorted by path.

    With `roots` (a local source): SourceNotAllowed if a link inside the folder leads out
    of them. SourceUnreadable if the location is missing or holds no file. Each file's
    version is its modification time in nanoseconds (S3: the object's Last-Modified, as
    pyarrow lists it), so a rewritten file shows as changed even at the same size."""
    from pyarrow import fs

    filesystem, path = _filesystem(uri)
    try:
        info = filesystem.get_file_info(path)
    except OSError:  # the message could name credentials or internals
        raise SourceUnreadable(f"the source {uri!r} cannot be listed") from None
    if info.type == fs.FileType.File:
        infos = [info]
    elif info.type == fs.FileType.Directory:
        selector = fs.FileSelector(path, recursive=True)
        try:
            found = filesystem.get_file_info(selector)
        except OSError:
            raise SourceUnreadable(f"the source {uri!r} cannot be listed") from None
        infos = [
            i for i in found if i.type == fs.FileType.File and not _hidden(i.path[len(path) :])
        ]
        if not infos:
            raise SourceUnreadable(f"the source {uri!r} is a folder with no data file")
    else:
        raise SourceUnreadable(f"the source {uri!r} does not exist")
    files = tuple(sorted((_file_of(i) for i in infos), key=lambda f: f.path))
    if roots is not None and isinstance(filesystem, fs.LocalFileSystem):
        escaping = first_escaping([f.path for f in files], roots)
        if escaping is not None:
            raise SourceNotAllowed(
                f"{escaping!r} in the source is a link that leads outside the allowed roots "
                "(PRIVQ_SOURCE_ROOTS)"
            )
    return files


def _hidden(relative: str) -> bool:
    return any(part.startswith(("_", ".")) for part in relative.split("/") if part)


def _file_of(info: Any) -> SourceFile:
    version = str(info.mtime_ns) if info.mtime_ns is not None else ""
    return SourceFile(path=info.path, size=int(info.size or 0), version=version)


def fingerprint_json(files: tuple[SourceFile, ...]) -> dict[str, Any]:
    """The fingerprint as stored in `Dataset.source_fingerprint`."""
    return {"files": [{"path": f.path, "size": f.size, "version": f.version} for f in files]}


def files_of(fingerprint: dict[str, Any]) -> tuple[SourceFile, ...]:
    """The files of a stored fingerprint (`fingerprint_json`'s inverse)."""
    return tuple(SourceFile(**f) for f in fingerprint["files"])


def changed(registered: Sequence[SourceFile], now: Sequence[SourceFile]) -> bool:
    """Whether the source's files differ from those fingerprinted at registration: a file
    added, removed, resized or rewritten (its version)."""
    return sorted(registered, key=lambda f: f.path) != sorted(now, key=lambda f: f.path)
