"""Write examples/census.csv and examples/census-schema.json: the tour's made-up table.

    .venv/bin/python examples/make_census.py

The rows come from `app.census` (a seeded generator, stdlib only), so the files are
the same on every machine; tests/docs checks that the committed ones are up to date.
"""

from __future__ import annotations

from pathlib import Path

from app import census

HERE = Path(__file__).resolve().parent


def main() -> None:
    (HERE / "census.csv").write_text(census.csv_text(), encoding="utf-8", newline="")
    (HERE / "census-schema.json").write_text(census.schema_text(), encoding="utf-8")
    print(f"wrote {census.ROWS} rows to {HERE / 'census.csv'} and its schema beside it")


if __name__ == "__main__":
    main()
