"""A read of some columns (what a replay reads: replay.pipeline.build.GRAPH_COLUMNS) holds the file to the
whole contract, as a full read does: the same files refused with the same one-line message, the
unread columns checked from the footer (schema, row-group statistics) or, without statistics, read."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fastrack_core.errors import SchemaError
from fastrack_core.traceio import read_trace, write_trace
from replay.pipeline.build import GRAPH_COLUMNS
from tracegen.synth import random_table

N = 120


@pytest.fixture
def good(tmp_path):
    path = tmp_path / "ok.parquet"
    write_trace(path, random_table(N, 3), {"source_format": "synthetic"})
    return path


def _rewrite(good, out, change, **write_options):
    table = pq.read_table(good)
    pq.write_table(change(table), out, **write_options)
    return out


def _set(table, name, values, typ=None):
    typ = typ or pa.int64()
    return table.set_column(table.schema.get_field_index(name), pa.field(name, typ), pa.array(values, typ))


BAD = {
    "range": lambda t: _set(t, "correlation", [-5] * N),
    "range_late_row": lambda t: _set(t, "coll_seq", [-1] * (N - 1) + [-7]),
    "null": lambda t: _set(t, "coll_bytes", [0] * (N - 1) + [None]),
    "missing": lambda t: t.drop_columns(["coll_group"]),
    "type": lambda t: _set(t, "coll_seq", [-1] * N, pa.int32()),
}


@pytest.mark.parametrize("statistics", [True, False])
@pytest.mark.parametrize("what", sorted(BAD))
def test_partial_read_refuses_what_a_full_read_refuses(good, tmp_path, what, statistics):
    bad = _rewrite(good, tmp_path / "bad.parquet", BAD[what], write_statistics=statistics)
    with pytest.raises(SchemaError) as full:
        read_trace(bad)
    with pytest.raises(SchemaError) as part:
        read_trace(bad, columns=list(GRAPH_COLUMNS))
    assert str(part.value) == str(full.value)


def test_partial_read_keeps_only_the_columns_asked_for(good):
    tr = read_trace(good, columns=list(GRAPH_COLUMNS))
    assert tr.table.column_names == list(GRAPH_COLUMNS) and tr.num_ops == N
    assert tr.drop_columns() is tr and tr.table.num_columns == 0 and tr.num_ops == N
