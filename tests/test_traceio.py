"""Trace I/O: the contract is enforced on read and write, outputs are atomic."""

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fastrack_core.errors import SchemaError, TraceFormatError
from fastrack_core.schema import METADATA_KEY
from fastrack_core.traceio import make_table, read_metadata, read_trace, validate_table, write_trace
from tracefactory import op, table, write


def simple_ops():
    return [op("runtime", "cudaLaunchKernel", 0, 5, thread=1),
            op("kernel", "k", 7, 10, stream=7, device=0, deps=[(0, "launch")])]


def test_round_trip_and_metadata_whitelist(tmp_path):
    p = write(tmp_path / "t.parquet", simple_ops(), trace_name="t", HF_TOKEN="hf_secret", env={"A": "B"})
    tr = read_trace(p)
    assert tr.num_ops == 2
    assert tr.metadata["trace_name"] == "t"
    assert "HF_TOKEN" not in tr.metadata and "env" not in tr.metadata
    assert b"hf_secret" not in p.read_bytes()
    assert tr.metadata["schema_version"] == 1 and tr.metadata["ranks"] == [0]


def test_missing_file(tmp_path):
    with pytest.raises(TraceFormatError, match="no such file"):
        read_trace(tmp_path / "nope.parquet")


def test_not_parquet(tmp_path):
    p = tmp_path / "x.parquet"
    p.write_text("hello")
    with pytest.raises(TraceFormatError, match="not a Parquet file"):
        read_trace(p)


def test_parquet_of_another_schema(tmp_path):
    p = tmp_path / "other.parquet"
    pq.write_table(pa.table({"a": [1]}), p)
    with pytest.raises(SchemaError, match="not a Fastrack trace"):
        read_trace(p)


def test_newer_schema_version_is_refused(tmp_path):
    p = write(tmp_path / "t.parquet", simple_ops())
    t = pq.read_table(p)
    t = t.replace_schema_metadata({METADATA_KEY: json.dumps({"schema_version": 2}).encode()})
    pq.write_table(t, p)
    with pytest.raises(SchemaError, match="newer"):
        read_metadata(p)


def test_missing_column(tmp_path):
    p = write(tmp_path / "t.parquet", simple_ops())
    t = pq.read_table(p).drop_columns(["deps"])
    pq.write_table(t, p)
    with pytest.raises(SchemaError, match="missing column"):
        read_trace(p)


def test_negative_duration_is_refused_and_nothing_written(tmp_path):
    ops = simple_ops()
    ops[1]["dur_ns"] = -4
    out = tmp_path / "bad.parquet"
    with pytest.raises(SchemaError, match="dur_ns.*negative"):
        write(out, ops)
    assert list(tmp_path.iterdir()) == []


def test_empty_trace_is_refused(tmp_path):
    with pytest.raises(SchemaError, match="empty"):
        write_trace(tmp_path / "e.parquet", table(simple_ops()).slice(0, 0), {})


def test_duplicate_op_ids(tmp_path):
    t = table(simple_ops())
    t = t.set_column(0, "op_id", pa.array([3, 3], pa.int64()))
    with pytest.raises(SchemaError, match="not unique"):
        write_trace(tmp_path / "d.parquet", t, {})


@pytest.mark.parametrize("column,value", [
    ("bytes", -15), ("bytes", 2**62), ("dur_ns", 2**62), ("start_ns", -1), ("rank", 2**31 - 1),
    ("rank", -1), ("op_id", 2**62), ("device", -2), ("coll_bytes", -1), ("step", -5),
])
def test_values_outside_their_range_are_refused_naming_the_field(tmp_path, column, value):
    from fastrack_core.schema import VALUE_RANGES

    cols = {"op_id": [0, 1], "kind": ["cpu", "cpu"], "name": ["a", "b"], "start_ns": [0, 10], "dur_ns": [5, 5]}
    cols[column] = [cols.get(column, [0, 0])[0], value]
    table = make_table(cols)
    with pytest.raises(SchemaError, match=f"field '{column}'") as err:
        validate_table(table, "t.parquet")
    assert "t.parquet" in str(err.value) and str(VALUE_RANGES[column][0]) in str(err.value)


def test_an_op_ending_beyond_the_span_is_refused():
    from fastrack_core.schema import MAX_SPAN_NS

    table = make_table({"op_id": [0], "kind": ["cpu"], "name": ["a"], "start_ns": [MAX_SPAN_NS - 5], "dur_ns": [10]})
    with pytest.raises(SchemaError, match="beyond the 2\\^50 ns"):
        validate_table(table)


def test_reading_some_columns_refuses_a_file_that_lacks_one(tmp_path):
    import pyarrow.parquet as _pq

    p = write(tmp_path / "t.parquet", [op("cpu", "a", 0, 5, thread=1)])
    t = _pq.read_table(p)
    _pq.write_table(t.drop_columns(["start_ns"]).replace_schema_metadata(t.schema.metadata), tmp_path / "d.parquet")
    with pytest.raises(SchemaError, match="missing column.*start_ns"):
        read_trace(tmp_path / "d.parquet", columns=["op_id", "start_ns", "dur_ns"])
