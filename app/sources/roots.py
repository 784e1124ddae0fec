"""The operator's allowed roots (PRIVQ_SOURCE_ROOTS) and the check of a source's URI.

A URI is refused (`SourceNotAllowed`, 422) before any file is opened when

- its scheme is not `file://` or `s3://`, it is not absolute, or it carries a query,
  a fragment, a user or a port (pyarrow reads credentials and endpoints from a query:
  they come from the processes' environment, never through the API);
- a segment of its path, percent-decoded as pyarrow decodes it, is `.` or `..`;
- it lies outside every root, compared segment by segment (`/srv/lake` does not hold
  `/srv/lakehouse`);
- for `file://`: resolving links (`os.path.realpath` of the path and of the root)
  takes it out of the root. Only path resolution: no file is opened.

Roots are checked by the same rules; an empty list refuses every registration.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote, unquote, urlsplit

from app.errors import SourceNotAllowed

SCHEMES = ("file", "s3")


@dataclass(frozen=True)
class Location:
    """A checked URI: its scheme, bucket (S3; "" for files) and decoded path segments."""

    scheme: str
    bucket: str
    segments: tuple[str, ...]

    @property
    def path(self) -> str:
        """The path as the filesystem names it: "/srv/lake/visits", "bucket/prefix"."""
        joined = "/".join(self.segments)
        if self.scheme == "file":
            return "/" + joined
        return f"{self.bucket}/{joined}" if joined else self.bucket

    @property
    def uri(self) -> str:
        """The normalised URI (no empty, `.` or `..` segment, no trailing slash)."""
        encoded = quote("/".join(self.segments), safe="/=-_.~,+")
        if self.scheme == "file":
            return f"file:///{encoded}"
        return f"s3://{self.bucket}/{encoded}" if encoded else f"s3://{self.bucket}"

    def within(self, root: Location) -> bool:
        return (
            self.scheme == root.scheme
            and self.bucket == root.bucket
            and self.segments[: len(root.segments)] == root.segments
        )


def parse(uri: str, *, what: str = "the source's uri") -> Location:
    """The URI's location; SourceNotAllowed naming what is wrong with it."""
    if not isinstance(uri, str) or not uri.strip():
        raise SourceNotAllowed(f"{what} must be a file:// or s3:// URI")
    try:
        parts = urlsplit(uri.strip())
        port = parts.port
    except ValueError:
        raise SourceNotAllowed(f"{what} is not a valid URI") from None
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        given = parts.scheme or "a path"
        raise SourceNotAllowed(f"{what} must be a file:// or s3:// URI, not {given}")
    if parts.query or parts.fragment or "?" in uri or "#" in uri:
        raise SourceNotAllowed(
            f"{what} must not carry a query or a fragment: credentials, regions and "
            "endpoints come from the environment of privq's processes"
        )
    if parts.username is not None or parts.password is not None or port is not None:
        raise SourceNotAllowed(f"{what} must not name a user, a password or a port")
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise SourceNotAllowed(
                f"{what} must be an absolute file:///path (a host {parts.netloc!r} was given)"
            )
        bucket = ""
    else:
        bucket = parts.hostname or ""
        if not bucket:
            raise SourceNotAllowed(f"{what} must name a bucket: s3://bucket/prefix/")
    raw = parts.path
    if scheme == "file" and not raw.startswith("/"):
        raise SourceNotAllowed(f"{what} must be absolute: file:///path")
    decoded = unquote(raw)
    segments = tuple(segment for segment in decoded.split("/") if segment)
    if any(segment in (".", "..") for segment in segments):
        raise SourceNotAllowed(f"{what} must not contain '.' or '..' segments")
    if any("\x00" in segment or "\\" in segment for segment in segments):
        raise SourceNotAllowed(f"{what} must not contain NUL characters or backslashes")
    return Location(scheme, bucket, segments)


def check_uri(uri: str, roots: Sequence[str]) -> Location:
    """The URI's normalised location if it lies within one of `roots`; SourceNotAllowed
    otherwise (see the module's docstring). Opens no file."""
    if not roots:
        raise SourceNotAllowed(
            "PRIVQ_SOURCE_ROOTS is empty: the operator has not allowed any location to be "
            "registered by reference"
        )
    location = parse(uri)
    allowed = [parse(root, what=f"the PRIVQ_SOURCE_ROOTS entry {root!r}") for root in roots]
    for root in allowed:
        if location.within(root) and _resolves_within(location, root):
            return location
    raise SourceNotAllowed(
        f"{location.uri} is outside the allowed roots (PRIVQ_SOURCE_ROOTS), or leaves them "
        "through a link"
    )


def _resolves_within(location: Location, root: Location) -> bool:
    """For a local path: whether resolving its links keeps it in the root (also resolved)."""
    if location.scheme != "file":
        return True  # an object store has no links
    return is_within_real(location.path, root.path)


def is_within_real(path: str, root: str) -> bool:
    """Whether `path`, links resolved, lies within `root`, links resolved."""
    real_path, real_root = os.path.realpath(path), os.path.realpath(root)
    return os.path.commonpath([real_path, real_root]) == real_root


def first_escaping(paths: Sequence[str], roots: Sequence[str]) -> str | None:
    """The first local path whose links lead out of every file:// root, or None."""
    local_roots = [location.path for location in map(parse, roots) if location.scheme == "file"]
    for path in paths:
        if not any(is_within_real(path, root) for root in local_roots):
            return path
    return None
