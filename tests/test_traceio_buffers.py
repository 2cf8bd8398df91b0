"""fastrack_core.traceio reads column statistics from Arrow buffers (no pyarrow.compute on a replay's
path): the results equal pyarrow.compute's on sliced, chunked and null-holding columns."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from fastrack_core.traceio import _list_values, _min_max, distinct_values

values = st.lists(st.one_of(st.none(), st.integers(-2**40, 2**40)), max_size=40)
chunked = st.lists(values, min_size=1, max_size=4)


def _column(chunks, offset):
    arrays = [pa.array(c, pa.int64()) for c in chunks]
    arrays = [a.slice(min(offset, len(a))) for a in arrays]
    return pa.chunked_array(arrays, pa.int64())


@settings(max_examples=150, deadline=None)
@given(chunked, st.integers(0, 5))
def test_min_max_and_distinct_equal_pyarrow_compute(chunks, offset):
    col = _column(chunks, offset)
    mm = pc.min_max(col).as_py()
    assert _min_max(col) == (mm["min"], mm["max"])
    assert sorted(distinct_values(col), key=repr) == sorted(pc.unique(col).to_pylist(), key=repr)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.one_of(st.none(), st.sampled_from(["kernel", "memcpy", "cpu", "sync"])), max_size=40),
       st.integers(0, 5), st.booleans())
def test_distinct_values_of_dictionary_columns(words, offset, unused_entry):
    arr = pa.array(words, pa.string()).dictionary_encode()
    if unused_entry:  # a dictionary entry no row uses is not a value of the column
        arr = pa.DictionaryArray.from_arrays(arr.indices, pa.concat_arrays([arr.dictionary, pa.array(["unused"])]))
    arr = arr.slice(min(offset, len(arr)))
    col = pa.chunked_array([arr, arr])
    want = pc.unique(col.cast(pa.string())).to_pylist()
    assert sorted(distinct_values(col), key=repr) == sorted(want, key=repr)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.integers(0, 9), max_size=4), max_size=12), st.integers(0, 4))
def test_list_values_equal_flatten(lists, offset):
    arr = pa.array(lists, pa.list_(pa.int8())).slice(min(offset, len(lists)))
    assert np.array_equal(_list_values(arr), np.asarray(arr.flatten().to_pylist(), np.int8))
