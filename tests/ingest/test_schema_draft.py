"""`privq schema draft FILE` and `app.schema.drafting`: categorical text, round bins,
whole numbers as integer attributes, `missing` where values are missing, columns with
too many values left out with a warning, the public-schema warning always; the draft
uploads its own file (CSV and Parquet)."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from app.cli import main
from app.ingest import PrivacyUnit, encode_upload
from app.schema import parse_schema
from app.schema.drafting import PUBLIC_WARNING, draft_schema, nice_step, round_edges, round_up

CSV = """person,sex,age,income,kids,city,note
p1,F,34,52000.5,2,Paris,a
p1,M,,NA,0,Lyon,b
p2, F ,71,1200,1,,c
p3,M,19,99999,5,Paris,d
"""


def draft_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[dict, str]:  # type: ignore[type-arg]
    path = tmp_path / "table.csv"
    path.write_text(CSV)
    assert main(["schema", "draft", str(path), *args]) == 0
    out, err = capsys.readouterr()
    return json.loads(out), err


def test_the_cli_drafts_every_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    schema, err = draft_csv(tmp_path, capsys, "--max-categories", "2")
    by_name = {a["name"]: a for a in schema["attributes"]}
    assert list(by_name) == ["sex", "age", "income", "kids", "city"]
    assert by_name["sex"] == {"name": "sex", "type": "categorical", "values": ["F", "M"]}
    assert by_name["city"]["values"] == ["Lyon", "Paris"] and by_name["city"]["missing"]
    # 19 to 71: more than MAX_INTEGER_CODES integers, so bins of a round width.
    assert by_name["age"] | {"missing": True} == {
        "name": "age",
        "type": "integer",
        "min": 10,
        "max": 79,
        "width": 10,
        "clip": False,
        "missing": True,
    }
    assert by_name["age"]["missing"] is True and "missing_values" not in by_name["age"]
    assert by_name["income"]["bins"][0] == 0 and by_name["income"]["bins"][-1] == 100000
    assert by_name["income"]["missing_values"] == ["", "NA"]
    assert "missing" not in by_name["kids"]
    assert "PUBLIC" in err and "single a person out" in err
    # Too many text values: left out, and said so (the id and the free text).
    assert "column 'person' left out" in err and "column 'note' left out" in err


def test_small_whole_numbers_are_integer_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    schema, _ = draft_csv(tmp_path, capsys, "--exclude", "person", "--exclude", "note")
    kids = next(a for a in schema["attributes"] if a["name"] == "kids")
    assert kids == {"name": "kids", "type": "integer", "min": 0, "max": 5, "clip": False}


def test_the_draft_uploads_its_own_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    schema, err = draft_csv(tmp_path, capsys, "--max-categories", "2")
    assert "column 'person' left out" in err and "column 'note' left out" in err
    parsed = parse_schema(schema)
    assert {a.kind for a in parsed.attributes} == {"categorical", "integer", "numeric"}
    # The file as it is: the left-out columns are not read, every cell fits the draft.
    table = encode_upload(io.BytesIO(CSV.encode()), parsed)
    assert table.rows == 4
    ages = table.columns["age"]
    assert [parsed.attribute("age").bin_interval(int(c))[:2] for c in ages[:1]] == [(30, 39)]


def test_parquet_drafts_and_uploads_with_a_privacy_unit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "table.parquet"
    table = pa.table(
        {
            "pid": pa.array([1, 1, 2, 3, 3, 3]),
            "score": pa.array([0.5, None, 2.25, 7.0, float("nan"), 9.75]),
            "group": pa.array(["x", "y", None, "x", "x", "y"]).dictionary_encode(),
            "flag": pa.array([True, False, True, True, None, False]),
        }
    )
    pq.write_table(table, path)
    assert main(["schema", "draft", str(path), "--exclude", "pid"]) == 0
    out, _ = capsys.readouterr()
    schema = json.loads(out)
    by_name = {a["name"]: a for a in schema["attributes"]}
    assert set(by_name) == {"score", "group", "flag"}
    assert by_name["score"]["type"] == "numeric" and by_name["score"]["missing"] is True
    assert by_name["group"]["values"] == ["x", "y"] and by_name["group"]["missing"] is True
    assert by_name["flag"]["values"] == ["false", "true"]
    encoded = encode_upload(path.open("rb"), parse_schema(schema), unit=PrivacyUnit("pid", 2))
    assert encoded.rows == 5  # unit 3 keeps 2 of its 3 rows


def test_a_missing_file_is_one_line_and_status_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["schema", "draft", str(tmp_path / "nope.csv")]) == 1
    _, err = capsys.readouterr()
    assert err.startswith("privq: cannot read") and err.count("\n") == 1


def test_round_numbers() -> None:
    assert [round_up(n) for n in (1, 3, 6, 11, 21, 26, 101)] == [1, 5, 10, 20, 25, 50, 200]
    assert nice_step(0.13) == 0.2 and nice_step(7) == 10 and nice_step(2.5) == 2.5
    assert round_edges(0.12, 0.87, 10) == [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9]
    assert round_edges(5, 5, 10, whole=True) == [5, 6]
    assert round_edges(-3.2, 14.9, 4) == [-5, 0, 5, 10, 15]


def test_the_public_warning_is_always_first() -> None:
    draft = draft_schema(pa.table({"a": ["x", "y"]}))
    assert draft.warnings[0] == PUBLIC_WARNING
    assert draft.schema == {
        "attributes": [{"name": "a", "type": "categorical", "values": ["x", "y"]}]
    }


def test_the_app_does_not_import_pandas_to_draft() -> None:
    import subprocess

    code = (
        "import sys, pyarrow as pa, pyarrow.csv, pyarrow.parquet\n"
        "from app.schema.drafting import draft_schema\n"
        "from app.ingest import encode_upload\n"
        "import io\n"
        "t = pyarrow.csv.read_csv(io.BytesIO(b'a,b\\nx,1\\n,2\\n'))\n"
        "draft_schema(t)\n"
        "print('pandas' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
