"""Tables: per-job files are checked against their schema, given once, one row per key."""

from __future__ import annotations

import pandas as pd
import pytest

from intertwine.workflow import tables
from intertwine.workflow.stages.similarity.tables import SIMILARITY
from intertwine.workflow.stages.stitching.tables import STITCHING


def _row(**change) -> dict:
    row = {
        "variant": "myrtle",
        "pair": 0,
        "seed_a": 0,
        "seed_b": 1,
        "site_a": "act1",
        "site_b": "act1",
        "measure": "linear_cka",
        "value": 0.9,
        "low": None,
        "high": None,
        "n_samples": 64,
        "note": None,
        "config_hash": "abc",
        "version": "0",
    }
    return row | change


def _write(path, rows, schema=SIMILARITY):
    tables.write_parquet(pd.DataFrame(rows), path, schema)
    return path


def test_reads_and_concatenates(tmp_path):
    a = _write(tmp_path / "a.parquet", [_row()])
    b = _write(tmp_path / "b.parquet", [_row(pair=1)])
    df = tables.read_parquet([a, b], SIMILARITY)
    assert list(df["pair"]) == [0, 1] and list(df.columns) == SIMILARITY.names


def test_every_schema_names_its_keys():
    for name, schema in tables.stage_tables().items():
        assert set(tables.keys(schema)) <= set(schema.names), name
        assert tables.keys(schema), name


def test_a_file_given_twice_is_refused(tmp_path):
    a = _write(tmp_path / "a.parquet", [_row()])
    with pytest.raises(ValueError, match="a.parquet is given more than once"):
        tables.read_parquet([a, str(a)], SIMILARITY)


def test_duplicate_key_rows_are_refused(tmp_path):
    a = _write(tmp_path / "a.parquet", [_row()])
    b = _write(tmp_path / "b.parquet", [_row(value=0.5)])
    with pytest.raises(ValueError, match="two rows for the same key .*'measure': 'linear_cka'"):
        tables.read_parquet([a, b], SIMILARITY)


def test_a_file_holding_another_jobs_rows_is_named(tmp_path):
    """pair1.parquet holding pair 0's row (a copy under another job's name): the error names both
    files holding the key, not only the key; a key twice in one file names that file."""
    pair0 = _write(tmp_path / "pair0.parquet", [_row(), _row(site_b="act2")])
    pair1 = _write(tmp_path / "pair1.parquet", [_row(pair=1), _row(value=0.5)])
    pair2 = _write(tmp_path / "pair2.parquet", [_row(pair=2)])
    with pytest.raises(
        ValueError, match=r"'pair': 0.* in \S*pair0.parquet and in \S*pair1.parquet; .*delete the file"
    ):
        tables.read_parquet([pair2, pair0, pair1], SIMILARITY)
    twice = _write(tmp_path / "twice.parquet", [_row(pair=3), _row(pair=3, value=0.1)])
    with pytest.raises(ValueError, match=r"'pair': 3.* in \S*twice.parquet, twice"):
        tables.read_parquet([pair2, twice], SIMILARITY)


def test_missing_or_mistyped_columns_name_the_file(tmp_path):
    missing = tmp_path / "missing.parquet"
    pd.DataFrame([_row()]).drop(columns=["value"]).to_parquet(missing)
    with pytest.raises(
        ValueError,
        match=r"missing.parquet: does not have the table's columns \(missing \['value'\].*delete it",
    ):
        tables.read_parquet([missing], SIMILARITY)
    mistyped = tmp_path / "mistyped.parquet"
    pd.DataFrame([_row(value="high")]).to_parquet(mistyped)
    with pytest.raises(ValueError, match=r"mistyped \['value \((large_)?string, expected double\)'\]"):
        tables.read_parquet([mistyped], SIMILARITY)


def test_another_stages_file_is_refused(tmp_path):
    zoo = tmp_path / "seed0.metrics.parquet"
    pd.DataFrame([{"variant": "myrtle", "seed": 0}]).to_parquet(zoo)
    with pytest.raises(ValueError, match="seed0.metrics.parquet: does not have the table's columns"):
        tables.read_parquet([zoo], STITCHING)


@pytest.mark.parametrize("content", [b"", b"not parquet at all", None])
def test_unreadable_files_name_the_file_and_the_fix(tmp_path, content):
    path = tmp_path / "job.parquet"
    if content is None:  # a file cut short, as by a full disk
        _write(path, [_row()])
        path.write_bytes(path.read_bytes()[:40])
    else:
        path.write_bytes(content)
    for schema in (SIMILARITY, None):
        with pytest.raises(
            ValueError, match="job.parquet: not a readable Parquet file .*delete it and rerun"
        ):
            tables.read_parquet([path], schema)


def test_write_refuses_a_frame_that_does_not_match(tmp_path):
    with pytest.raises(ValueError, match=r"missing columns \['n_samples'\]"):
        _write(tmp_path / "x.parquet", [{k: v for k, v in _row().items() if k != "n_samples"}])


def test_a_schema_is_found_by_its_tables_name_only():
    """The schemas live in their stages' folders, reached by ``tables.schema(name)``; the old module
    attributes (``tables.ROTATION``) are gone."""
    assert tables.schema("rotation") is tables.stage_tables()["rotation"]
    assert not hasattr(tables, "ROTATION") and not hasattr(tables, "at_stage_temperature")
    with pytest.raises(ValueError, match=r"no table 'rotatoin' \(did you mean 'rotation'\?\)"):
        tables.schema("rotatoin")
    with pytest.raises(AttributeError):
        tables.NO_SUCH_TABLE  # noqa: B018
