"""JSON, CSV and Parquet outputs (written atomically: a failed run leaves no half file)."""
from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd

from analyze import output_policy, views
from analyze.atomic import atomic_dir_write, atomic_write
from analyze.render import json_rows
from analyze.results import written_tables

JSON_SCHEMA = 2      # 2: notes are objects (code, count, message, input, rank), were strings

def tables(result) -> dict[str, pd.DataFrame]:
    """Every output table by name, with its public columns."""
    out = {}
    for info in written_tables():
        frame = result.table(info.name)
        if info.public_columns:
            frame = frame[[c for c in info.public_columns if c in frame.columns]]
        out[info.name] = frame.reset_index(drop=True)
    for name in views.FILE_VIEWS:
        out[name] = views.get(result, name)
    return out


def finite(obj):
    """``obj`` (dicts, lists, tuples of plain and numpy values) with every value made plain (:func:`_plain`)
    and every float that is not finite (NaN, inf: a figure that could not be computed) as None, so that
    ``json.dump(..., allow_nan=False)`` writes standard JSON (null, never a bare NaN)."""
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite(v) for v in obj]
    v = _plain(obj)
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _plain(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating, float)):
        v = float(value)
        return None if math.isnan(v) else v
    if isinstance(value, np.bool_):
        return bool(value)
    if value is pd.NA or value is pd.NaT:
        return None
    return value


def _column_values(column: pd.Series) -> list:
    """A column as plain Python values (:func:`_plain`'s rules): integer, bool and float columns
    converted by NumPy in one go (NaN -> None), anything else value by value."""
    if not isinstance(column.dtype, np.dtype):          # nullable ints, categoricals, str: by value
        return [_plain(v) for v in column.tolist()]
    values = column.to_numpy()
    kind = values.dtype.kind
    if kind in "iub":
        return values.tolist()
    if kind == "f":
        return [None if v != v else v for v in values.tolist()]
    return [_plain(v) for v in values.tolist()]


def records(frame: pd.DataFrame) -> list[dict]:
    cols = list(frame.columns)
    return [dict(zip(cols, row)) for row in zip(*(_column_values(frame[c]) for c in cols))]


def note_records(notes) -> list[dict]:
    """Notes as JSON objects (:meth:`analyze.notes.Note.to_dict`)."""
    return [n.to_dict() for n in notes]


def _json_parts(result, advice: dict | None = None) -> list[tuple[str, object]]:
    """The JSON document's keys in order, tables as DataFrames (records when written); ``advice``:
    :meth:`analyze.findings.Advice.to_dict`, written as key ``advice`` when given."""
    inputs = [{**i, "notes": note_records(i.get("notes") or [])} for i in result.inputs]
    parts: list[tuple[str, object]] = [("schema", JSON_SCHEMA), ("inputs", inputs),
                                       ("phase_names", result.phase_names)]
    parts += list(tables(result).items())
    parts += [("headline", views.get(result, "headline")),
              ("cycle_distribution", views.get(result, "cycle_distribution")),
              ("tokens", views.get(result, "tokens")),
              ("stragglers", views.get(result, "stragglers")),
              ("notes", note_records(result.notes))]
    if advice is not None:
        parts.append(("advice", advice))
    return parts


def to_json_dict(result, advice: dict | None = None) -> dict:
    return {key: records(value) if isinstance(value, pd.DataFrame) else value
            for key, value in _json_parts(result, advice)}


JSON_RECORDS_PER_WRITE = 20_000


def write_json(result, path, advice: dict | None = None) -> None:
    """:func:`to_json_dict` as a file, the tables streamed a slice of rows at a time, one record per
    line (millions of cycle and collective rows: bounded memory), each slice's records joined from
    its columns' JSON texts by Arrow (render/json_rows.py: the text ``json.dumps`` gives each record)."""
    parts = _json_parts(result, advice)
    with output_policy.protect(output_policy.inputs_of(result)), atomic_write(path) as f:
        f.write("{")
        for i, (key, value) in enumerate(parts):
            f.write(("\n " if i == 0 else ",\n ") + json.dumps(key) + ": ")
            if not isinstance(value, pd.DataFrame):
                f.write(json.dumps(value, indent=1, default=_plain).replace("\n", "\n "))
                continue
            f.write("[")
            for at in range(0, len(value), JSON_RECORDS_PER_WRITE):
                f.write(("\n  " if at == 0 else ",\n  ")
                        + json_rows.json_text(value.iloc[at:at + JSON_RECORDS_PER_WRITE], _plain, ",\n  "))
            f.write("\n ]" if len(value) else "]")
        f.write("\n}\n")


def _flat(frame: pd.DataFrame) -> pd.DataFrame:
    """Cells holding a dict or list (``decode_summary.warmup_reasons``) as JSON text, for CSV and
    Parquet (JSON keeps them as objects)."""
    nested = [c for c in frame.columns if frame[c].dtype == object
              and frame[c].map(lambda v: isinstance(v, (dict, list))).any()]
    return frame.assign(**{c: frame[c].map(lambda v: json.dumps(v, sort_keys=True, default=_plain)
                                           if isinstance(v, (dict, list)) else v) for c in nested}) if nested else frame


def file_tables(result) -> dict[str, pd.DataFrame]:
    """What --csv and --parquet write, a file per table of the JSON document (:func:`_json_parts`):
    its DataFrames and its lists of records (``inputs`` without their notes: ``notes`` holds them,
    each with its input); in the document's order."""
    from analyze.notes import NOTE_FIELDS

    out = {}
    for name, value in _json_parts(result):
        if isinstance(value, pd.DataFrame):
            out[name] = value
        elif name == "notes":
            out[name] = pd.DataFrame(value, columns=list(NOTE_FIELDS))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            out[name] = pd.DataFrame([{k: x for k, x in v.items() if k != "notes"} for v in value])
    return out


def write_csv(result, directory) -> list[str]:
    with output_policy.protect(output_policy.inputs_of(result)), atomic_dir_write(directory) as d:
        for name, frame in ((n, _flat(f)) for n, f in file_tables(result).items()):
            with d.open(f"{name}.csv", newline="") as f:
                frame.to_csv(f, index=False)
        return d.names


PARQUET_ROWS_PER_GROUP = 200_000


def _write_parquet_slices(frame: pd.DataFrame, path) -> None:
    """``frame.to_parquet(path, index=False)`` a row group at a time: one schema (with pandas'
    metadata) from the whole frame, each slice converted to Arrow only while it is written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.Schema.from_pandas(frame, preserve_index=False)
    with open(path, "wb") as f, pq.ParquetWriter(f, schema) as writer:   # a file object: any path
        for at in range(0, max(len(frame), 1), PARQUET_ROWS_PER_GROUP):
            part = frame.iloc[at:at + PARQUET_ROWS_PER_GROUP]
            writer.write_table(pa.Table.from_pandas(part, schema=schema, preserve_index=False))


def write_parquet(result, directory) -> list[str]:
    with output_policy.protect(output_policy.inputs_of(result)), atomic_dir_write(directory) as d:
        for name, frame in ((n, _flat(f)) for n, f in file_tables(result).items()):
            # object columns as text (None kept); the other columns shared, not copied
            text = {c: frame[c].map(lambda v: None if v is None else str(v))
                    for c in frame.columns if frame[c].dtype == object}
            frame = frame.assign(**text) if text else frame
            _write_parquet_slices(frame, d.path(f"{name}.parquet"))
        return d.names
