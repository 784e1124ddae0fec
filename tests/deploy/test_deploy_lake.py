"""The deployment check's lake (bench/deploy_lake.py), without a container engine.

The stack run (tests/deploy/test_stack.py) registers it through the API; here the same
files pass the local engine's registration scan as the schema and the unit declare
them, every marginal the check measures and models names the schema's attributes, and
the capped counts are what the check's answer expects (21 cells of region × employed).
"""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

from app.records.engine import UnitCap
from app.records.local import LocalEngine
from app.schema import parse_schema
from app.sources import Source, list_files

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))
import deploy_lake  # noqa: E402  (bench/deploy_lake.py)

ROWS = 4_000


def test_the_check_lake_registers_and_counts(tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    written = deploy_lake.write_lake(lake, rows=ROWS)
    assert written["rows"] == ROWS and written["files"] == deploy_lake.LAKE_FILES
    folder = lake / deploy_lake.SOURCE_FOLDER
    # Readable by any uid: privq's and Spark's containers read it as uid 10001.
    for path in (lake, folder, *folder.iterdir()):
        assert path.stat().st_mode & stat.S_IROTH, path
    uri = folder.as_uri() + "/"
    source = Source(uri=uri, files=list_files(uri, roots=[lake.as_uri() + "/"]))
    assert len(source.files) == deploy_lake.LAKE_FILES
    schema = parse_schema(json.dumps(deploy_lake.SCHEMA))
    unit = UnitCap(column=deploy_lake.UNIT["column"], max_rows=2, secret=12345)
    engine = LocalEngine()
    # Every value within the schema, the unit's ids present: registration would be ready.
    assert engine.validate(source, schema, unit).rows == ROWS
    wanted = [tuple(m) for m in deploy_lake.MEASURE["marginals"] + deploy_lake.AIM["workload"]]
    assert {name for m in wanted for name in m} <= set(schema.names)
    counts = engine.count(source, schema, [("region", "employed"), ("region",)], unit)
    assert counts[("region", "employed")].size == 21  # six regions and missing, × three
    # The cap keeps at most two rows of a person: fewer rows than written, some missing.
    capped = int(counts[("region",)].sum())
    assert ROWS * 0.7 < capped < ROWS
    assert counts[("region",)][-1] > 0  # the missing code is used
