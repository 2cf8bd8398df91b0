"""Node indices are 32-bit (replay.graph.INDEX): OpGraph narrows a wider index array it is given,
keeps its values, and refuses one no node index can hold instead of wrapping it."""

from __future__ import annotations

import numpy as np
import pytest
from graphs import make_graph

from fastrack_core.errors import GraphError
from replay.graph import INDEX, INDEX_ARRAYS


def test_wide_index_arrays_are_narrowed_with_their_values():
    g = make_graph(3, [(0, 1, 0, 0), (1, 2, 0, 7)])
    wide = g.replace(dep_src=g.dep_src.astype(np.int64), group=np.array([-1, 4, 4], np.int64),
                     hold_until=np.full(3, -1, np.int64))
    for name in INDEX_ARRAYS:
        assert getattr(wide, name).dtype == INDEX, name
    assert wide.dep_src.tolist() == [0, 1] and wide.group.tolist() == [-1, 4, 4]


@pytest.mark.parametrize("field, value", [("dep_src", 2**31), ("dep_src", -2), ("group", 2**40),
                                          ("hold_until", -5)])
def test_an_index_no_node_can_have_is_refused_not_wrapped(field, value):
    g = make_graph(3, [(0, 1, 0, 0), (1, 2, 0, 0)])
    a = getattr(g, field).astype(np.int64)
    a[-1] = value
    with pytest.raises(GraphError, match=f"graph array '{field}' holds a value outside -1 .. 2\\^31 - 1"):
        g.replace(**{field: a})


def test_a_float_index_array_is_refused():
    g = make_graph(2, [(0, 1, 0, 0)])
    with pytest.raises(GraphError, match="dep_src"):
        g.replace(dep_src=np.array([0.0]))
