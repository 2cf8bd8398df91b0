"""replay.pipeline.keys: the hashed dense codes equal numpy's sorting unique, compiled or not
(the twins numpy / ``replay.pipeline._build``, through tests/twins.py)."""

import numpy as np
import twins
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.pipeline import keys


@settings(max_examples=150, deadline=None)
@given(values=st.lists(st.integers(-2**63, 2**63 - 1) | st.integers(0, 5), max_size=60))
def test_sorted_codes_equal_np_unique(values):
    v = np.asarray(values, np.int64)
    want_uniq, want_codes = np.unique(v, return_inverse=True)
    twins.agree("build", lambda: keys.sorted_codes(v), expect=(want_uniq, want_codes.ravel().astype(np.int32)))
