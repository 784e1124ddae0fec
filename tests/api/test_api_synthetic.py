"""GET /synthetic: method=round keeps every clique marginal of the model up to rounding,
method=sample varies as i.i.d. sampling does, numbers fall inside their bins, a seed fixes
the bytes, and records stream in bounded pieces, in memory flat in the number of rows —
on both backends."""

from __future__ import annotations

import csv
import io
import tracemalloc
from collections import deque
from collections.abc import Callable

import numpy as np
import pytest
from conftest import unique_name
from test_api_answers import SCHEMA, _csv, fit_test_model

from app.pgm.rounding import error_bounds
from app.schema import parse_schema
from app.services import answers
from app.services import models as model_service
from app.services.answers import synthetic as synthetic_module

ROWS = 3000


@pytest.fixture(scope="module")
def world(api, database):
    tenant = api.create_tenant()
    dataset = api.upload_dataset(_csv(800, seed=5), SCHEMA, name=unique_name("synthetic"))
    api.grant(dataset["id"], tenant["id"], 1.0)
    version, model = fit_test_model(database, dataset["id"], seed=4)
    return {
        "headers": tenant["headers"],
        "dataset_id": dataset["id"],
        "base": f"/v1/datasets/{dataset['id']}",
        "version": version,
        "model": model,
    }


def _synthetic(client, world, **params):
    response = client.get(world["base"] + "/synthetic", params=params, headers=world["headers"])
    assert response.status_code == 200, response.text
    return response


def _codes(text: str) -> np.ndarray:
    """The CSV read back into codes: values → categories, numbers → their bins."""
    schema = parse_schema(SCHEMA)
    records = list(csv.reader(io.StringIO(text)))
    assert records[0] == list(schema.names)
    columns = list(zip(*records[1:], strict=True))
    codes = []
    for attribute, cells in zip(schema.attributes, columns, strict=True):
        if attribute.kind == "numeric":
            edges = np.asarray(attribute.bins)
            numbers = np.array([float(c) for c in cells])
            assert numbers.min() >= edges[0] and numbers.max() <= edges[-1]
            bins = np.searchsorted(edges, numbers, side="right") - 1
            codes.append(np.minimum(bins, len(edges) - 2))  # the last bin is closed
        else:
            # CSV cells are text: an integer attribute's value 3 is the cell "3".
            lookup = {str(label): code for code, label in enumerate(attribute.labels())}
            codes.append(np.array([lookup[cell] for cell in cells]))
    return np.stack(codes, axis=1)


def _table(codes: np.ndarray, domain, attrs) -> np.ndarray:
    flat = np.ravel_multi_index(
        tuple(codes[:, domain.index(a)] for a in attrs), domain.shape(attrs)
    )
    return np.bincount(flat, minlength=domain.cells(attrs)).reshape(domain.shape(attrs))


def test_round_keeps_every_clique_marginal_within_the_rounding_bound(client, world) -> None:
    model = world["model"]
    codes = _codes(_synthetic(client, world, rows=ROWS, seed=11).text)
    assert len(codes) == ROWS
    tree = model.calibrated_tree
    bounds = error_bounds(tree)
    for clique in tree.cliques:
        error = np.abs(_table(codes, model.domain, clique) - ROWS * model.probabilities(clique))
        assert (error <= bounds[clique] + 1e-9).all(), clique
        assert error.max() < 3.0, clique


def test_sample_varies_as_iid_sampling_does_and_round_does_not(client, world) -> None:
    model = world["model"]
    rounded = _codes(_synthetic(client, world, rows=ROWS, seed=2, method="round").text)
    sampled = _codes(_synthetic(client, world, rows=ROWS, seed=2, method="sample").text)
    for clique in model.calibrated_tree.cliques:
        expected = ROWS * model.probabilities(clique)
        keep = expected > 0
        k = int(keep.sum()) - 1
        chi_sampled = float(
            (((_table(sampled, model.domain, clique) - expected) ** 2)[keep] / expected[keep]).sum()
        )
        chi_rounded = float(
            (((_table(rounded, model.domain, clique) - expected) ** 2)[keep] / expected[keep]).sum()
        )
        # Pearson's statistic of an i.i.d. sample: χ² with k degrees of freedom (mean k,
        # sd √(2k)); rounding's is a sum of squared sub-unit errors over expected counts.
        assert abs(chi_sampled - k) < 6 * np.sqrt(2 * k), clique
        assert chi_rounded < 0.1 * max(k, 1), clique


def test_numbers_lie_in_their_bins_and_other_columns_are_schema_values(client, world) -> None:
    for method in ("round", "sample"):
        text = _synthetic(client, world, rows=400, seed=8, method=method).text
        records = list(csv.reader(io.StringIO(text)))[1:]
        ages = np.array([float(r[1]) for r in records])
        assert ((ages >= 0) & (ages <= 120)).all()
        assert len(set(ages.tolist())) > 50  # values spread inside bins, not bin labels
        assert {r[0] for r in records} <= {"F", "M"}
        assert {r[3] for r in records} <= {"0", "1", "2", "3"}  # integer: the code itself
    # Bins are half-open: a value is never the upper edge of the bin it belongs to.
    codes = _codes(_synthetic(client, world, rows=2000, seed=9).text)
    assert codes[:, 1].min() >= 0 and codes[:, 1].max() <= 4


def test_same_seed_same_bytes_and_default_rows(client, world) -> None:
    for method in ("round", "sample"):
        first = _synthetic(client, world, rows=700, seed=21, method=method)
        again = _synthetic(client, world, rows=700, seed=21, method=method)
        other = _synthetic(client, world, rows=700, seed=22, method=method)
        assert first.content == again.content != other.content
        assert first.headers["x-synthetic-method"] == method
    default = _synthetic(client, world, seed=1)
    assert default.headers["x-rows"] == str(round(world["model"].total))
    assert default.text.count("\n") - 1 == round(world["model"].total)


def test_unknown_method_is_a_422_naming_it(client, world) -> None:
    response = client.get(
        world["base"] + "/synthetic", params={"method": "shuffle"}, headers=world["headers"]
    )
    assert response.status_code == 422
    assert "method" in response.text


def _loaded(world, database):
    with database.read_only() as session:
        return model_service.load_version(session, world["dataset_id"], world["version"])


def test_records_stream_in_chunks_of_bounded_size(world, database, monkeypatch) -> None:
    loaded = _loaded(world, database)
    parts = answers.synthetic_csv(loaded, 2500, 4, chunk_rows=1000)
    header = next(parts)
    assert header.decode().strip() == ",".join(parse_schema(SCHEMA).names)
    lines = [part.decode().count("\n") for part in parts]
    assert lines == [1000, 1000, 500]
    # A chunk's text is made and sent in pieces; the bytes do not depend on their size.
    for method in ("round", "sample"):
        whole = list(answers.synthetic_csv(loaded, 2500, 4, method=method, chunk_rows=1200))
        monkeypatch.setattr(synthetic_module, "PIECE_ROWS", 500)
        parts = list(answers.synthetic_csv(loaded, 2500, 4, method=method, chunk_rows=1200))
        monkeypatch.undo()
        assert [p.count(b"\n") for p in parts[1:]] == [500, 500, 200, 500, 500, 200, 100]
        assert b"".join(parts) == b"".join(whole)


def _peak(run: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_memory_is_the_codes_of_one_chunk_plus_one_piece_of_text(world, database) -> None:
    """The CSV text costs one piece of PIECE_ROWS rows, never a chunk's nor all rows':
    what streaming costs above making the codes alone (chunks dropped as they come) is
    the same for one piece's rows as for many chunks. Before pieces (one StringIO reused
    for a whole chunk, four bytes a character) it grew eightfold here."""
    loaded = _loaded(world, database)
    chunk_rows, piece = 8 * synthetic_module.PIECE_ROWS, synthetic_module.PIECE_ROWS
    loaded.model.calibrated_tree  # noqa: B018 — built once, outside the measurements

    def overhead(rows: int) -> int:
        codes = _peak(
            lambda: deque(loaded.model.rounded_chunks(rows, 4, chunk_rows=chunk_rows), maxlen=0)
        )
        text = _peak(
            lambda: deque(answers.synthetic_csv(loaded, rows, 4, chunk_rows=chunk_rows), maxlen=0)
        )
        return text - codes

    one_piece, many_chunks = overhead(piece), overhead(3 * chunk_rows)
    assert many_chunks < 2 * one_piece
