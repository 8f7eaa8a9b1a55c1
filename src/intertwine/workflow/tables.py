"""Explicit Parquet schemas (keys first, then values, then provenance) and atomic writes.

Each schema names its key columns (``keys``): a table holds one row per key, and reading per-job
files checks each file against the schema, so a stale, foreign or half-written file is an error
that names it rather than a column of nulls or a row counted twice.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from intertwine.utils import atomic_path

PROVENANCE = [pa.field("config_hash", pa.string()), pa.field("version", pa.string())]


def stage_tables() -> dict[str, pa.Schema]:
    """Every stage's tables by name (``intertwine table --schema NAME``), in report order: each
    stage's ``tables`` module (``intertwine.workflow.stages.<stage>.tables``) lists its ``TABLES``."""
    from intertwine.workflow import stages

    return {
        name: table
        for stage in stages.with_part("tables")
        for name, table in stages.part(stage, "tables").TABLES.items()
    }


def schema(name: str) -> pa.Schema:
    """The schema of the table ``name`` (e.g. ``rotation``, ``zoo_epochs``); an unknown name is an
    error that names the closest and lists them all."""
    import difflib

    known = stage_tables()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=1)
        raise ValueError(
            f"no table {name!r}"
            + (f" (did you mean {close[0]!r}?)" if close else "")
            + f"; the tables are {', '.join(known)}"
        )
    return known[name]


def to_table(df: pd.DataFrame, schema: pa.Schema) -> pa.Table:
    """Cast ``df`` to ``schema``; a missing or extra column is an error that names it."""
    missing = [name for name in schema.names if name not in df.columns]
    extra = [name for name in df.columns if name not in schema.names]
    if missing or extra:
        raise ValueError(
            f"table does not match its schema: missing columns {missing}, unexpected columns {extra}"
        )
    return pa.Table.from_pandas(df[schema.names], schema=schema, preserve_index=False)


def write_parquet(df: pd.DataFrame, path: str | Path, schema: pa.Schema) -> None:
    table = to_table(df, schema)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


def write_csv(df: pd.DataFrame, path: str | Path, **options) -> None:
    """Small summary tables for the report, written atomically."""
    with atomic_path(path) as tmp:
        df.to_csv(tmp, index=False, **options)


def keys(schema: pa.Schema) -> list[str]:
    """The key columns of a table: one row per combination."""
    return schema.metadata[b"keys"].decode().split()


def _file_schema(path: str | Path) -> pa.Schema:
    try:
        return pq.read_schema(path)
    except (OSError, pa.ArrowException) as err:
        raise ValueError(
            f"{path}: not a readable Parquet file ({err}); delete it and rerun its "
            "job (Snakemake reruns a missing output)"
        ) from None


def _compatible(found: pa.DataType, expected: pa.DataType) -> bool:
    """Whether a column of type ``found`` reads as ``expected`` without losing its meaning."""
    if found.equals(expected) or pa.types.is_null(found):
        return True
    for kind in (
        (pa.types.is_string, pa.types.is_large_string),
        (pa.types.is_integer,),
        (pa.types.is_floating,),
    ):
        if any(test(found) for test in kind) and any(test(expected) for test in kind):
            return True
    if pa.types.is_list(expected) and (pa.types.is_list(found) or pa.types.is_large_list(found)):
        return _compatible(found.value_type, expected.value_type)
    return False


def check_columns(path: str | Path, schema: pa.Schema) -> None:
    """``path``'s columns and types are ``schema``'s; else an error naming the file and the columns."""
    found = _file_schema(path)
    missing = [name for name in schema.names if name not in found.names]
    mistyped = [
        f"{name} ({found.field(name).type}, expected {schema.field(name).type})"
        for name in schema.names
        if name in found.names and not _compatible(found.field(name).type, schema.field(name).type)
    ]
    if missing or mistyped:
        raise ValueError(
            f"{path}: does not have the table's columns (missing {missing}, mistyped "
            f"{mistyped}); it was written by another stage or an older version: delete "
            "it and rerun its job"
        )


def read_parquet(paths, schema: pa.Schema | None = None) -> pd.DataFrame:
    """Read and concatenate per-job Parquet files, each given once; with ``schema``, each file is
    checked against it and the rows must be one per key."""
    paths = [str(path) for path in paths]
    repeated = sorted({path for path in paths if paths.count(path) > 1})
    if repeated:
        raise ValueError(
            f"{repeated[0]} is given more than once; give each file once (a repeated "
            "file would count its rows as independent evidence)"
        )
    for path in paths:
        _file_schema(path) if schema is None else check_columns(path, schema)
    if schema is None:
        tables = [pq.read_table(path) for path in paths]
        return pa.concat_tables(tables).to_pandas() if tables else pd.DataFrame()
    tables = [pq.read_table(path, schema=schema) for path in paths]
    df = pa.concat_tables(tables).to_pandas() if tables else schema.empty_table().to_pandas()
    if schema.metadata and b"keys" in schema.metadata:
        twice = df[df.duplicated(keys(schema), keep=False)]
        if len(twice):
            row = twice.iloc[0][keys(schema)].to_dict()
            # The files holding that key, in order: a copied or misnamed file holds another job's rows.
            sources = [path for path, table in zip(paths, tables) for _ in range(table.num_rows)]
            same = (twice[keys(schema)] == twice.iloc[0][keys(schema)]).all(axis=1)
            holding = list(dict.fromkeys(sources[i] for i in twice.index[same]))
            where = f"in {holding[0]}, twice" if len(holding) == 1 else "in " + " and in ".join(holding)
            raise ValueError(
                f"two rows for the same key {row} {where}; each key once (the same job's output "
                "given twice, a file holding another job's rows, or two jobs writing one key): "
                "delete the file whose rows are not its job's and rerun that job (Snakemake reruns "
                "a missing output)"
            )
    return df
