"""`app.sources`: a source's URI checked against the allowed roots before any I/O, its
files listed (links inside re-checked), and the fingerprint's round trip and changes."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from source_fixtures import write_lake, write_part

from app.errors import SourceNotAllowed
from app.sources import (
    SourceUnreadable,
    changed,
    check_uri,
    files_of,
    fingerprint_json,
    list_files,
)

ROOTS = ("file:///srv/lake/", "s3://bucket/prefix")


@pytest.mark.parametrize(
    ("uri", "normalised"),
    [
        ("file:///srv/lake/visits/", "file:///srv/lake/visits"),
        ("file:/srv/lake//visits", "file:///srv/lake/visits"),
        ("file://localhost/srv/lake/visits", "file:///srv/lake/visits"),
        ("FILE:///srv/lake/a%20b/year=2024", "file:///srv/lake/a%20b/year=2024"),
        ("s3://bucket/prefix/visits/", "s3://bucket/prefix/visits"),
        ("s3://bucket/prefix", "s3://bucket/prefix"),
    ],
)
def test_uris_within_a_root_are_normalised(uri: str, normalised: str) -> None:
    assert check_uri(uri, ROOTS).uri == normalised


@pytest.mark.parametrize(
    ("uri", "why"),
    [
        ("file:///srv/lake/../etc/passwd", "'..'"),
        ("file:///srv/lake/./visits", "'.'"),
        ("file:///srv/lake/%2E%2E/etc", "'..'"),
        ("file:///srv/lakehouse/visits", "outside the allowed roots"),
        ("file:///srv", "outside the allowed roots"),
        ("s3://bucket/prefixed/visits", "outside the allowed roots"),
        ("s3://other/prefix/visits", "outside the allowed roots"),
        ("s3://bucket/prefix/visits?access_key=a&secret_key=b", "environment"),
        ("s3://key:secret@bucket/prefix/visits", "password"),
        ("file://server/srv/lake/visits", "absolute"),
        ("http://example.org/lake", "file:// or s3://"),
        ("/srv/lake/visits", "file:// or s3://"),
        ("hdfs://namenode/lake", "file:// or s3://"),
        ("", "file:// or s3://"),
    ],
)
def test_uris_outside_or_escaping_are_refused(uri: str, why: str) -> None:
    with pytest.raises(SourceNotAllowed, match=re.escape(why)):
        check_uri(uri, ROOTS)


def test_no_roots_refuse_everything() -> None:
    with pytest.raises(SourceNotAllowed, match="PRIVQ_SOURCE_ROOTS is empty"):
        check_uri("file:///srv/lake/visits", ())


def test_a_bad_root_is_named() -> None:
    with pytest.raises(SourceNotAllowed, match="PRIVQ_SOURCE_ROOTS entry 'ftp://x'"):
        check_uri("file:///srv/lake/visits", ("ftp://x",))


def test_links_are_resolved_before_any_file_is_opened(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    os.symlink(outside, root / "escape")
    os.symlink(root, tmp_path / "alias")  # a link to the root itself stays inside it
    roots = (root.as_uri(),)
    with pytest.raises(SourceNotAllowed, match="link"):
        check_uri((root / "escape" / "missing.parquet").as_uri(), roots)
    alias = (tmp_path / "alias").as_uri()
    assert check_uri(f"{alias}/not-yet", (alias,)).uri == f"{alias}/not-yet"


def test_a_folder_lists_its_data_files_sorted_and_skips_markers(tmp_path: Path) -> None:
    lake = write_lake(tmp_path)
    (lake / "visits" / "year=2024" / ".part-0.parquet.crc").write_text("")
    (lake / "visits" / "_temporary").mkdir()
    write_part(lake / "visits" / "_temporary" / "part-9.parquet", rows=3)
    files = list_files((lake / "visits").as_uri(), roots=(lake.as_uri(),))
    assert [Path(f.path).relative_to(lake).as_posix() for f in files] == [
        "visits/year=2024/part-0.parquet",
        "visits/year=2025/part-0.parquet",
    ]
    assert all(f.size > 0 and int(f.version) > 0 for f in files)
    single = list_files((lake / "visits" / "year=2025" / "part-0.parquet").as_uri())
    assert single == files[1:]


def test_a_link_inside_a_folder_is_rechecked(tmp_path: Path) -> None:
    lake, outside = tmp_path / "lake", tmp_path / "outside"
    write_part(lake / "visits" / "part-0.parquet", rows=3)
    write_part(outside / "part-1.parquet", rows=3)
    os.symlink(outside / "part-1.parquet", lake / "visits" / "part-1.parquet")
    assert len(list_files((lake / "visits").as_uri())) == 2  # no roots: listed as it is
    with pytest.raises(SourceNotAllowed, match=r"part-1\.parquet"):
        list_files((lake / "visits").as_uri(), roots=(lake.as_uri(),))


def test_missing_and_empty_locations_are_source_not_found(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "_SUCCESS").write_text("")
    for uri, why in (
        ((tmp_path / "missing").as_uri(), "does not exist"),
        ((tmp_path / "empty").as_uri(), "no data file"),
    ):
        with pytest.raises(SourceUnreadable, match=why) as refused:
            list_files(uri)
        assert refused.value.status == 422 and refused.value.code == "source_not_found"


def test_the_fingerprint_round_trips_and_sees_every_change(tmp_path: Path) -> None:
    lake = write_lake(tmp_path)
    uri = (lake / "visits").as_uri()
    files = list_files(uri)
    assert files_of(fingerprint_json(files)) == files
    assert not changed(files, list_files(uri))
    assert not changed(files, tuple(reversed(files)))  # order is not a change

    part = lake / "visits" / "year=2024" / "part-0.parquet"
    stat = part.stat()
    write_part(part, seed=99)  # rewritten: same rows, another mtime
    os.utime(part, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert changed(files, list_files(uri))
    files = list_files(uri)
    write_part(lake / "visits" / "year=2026" / "part-0.parquet")
    assert changed(files, list_files(uri))
    files = list_files(uri)
    part.unlink()
    assert changed(files, list_files(uri))
