"""replay.pipeline.keys: the hashed dense codes equal numpy's sorting unique, compiled or not."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replay.pipeline import keys


@pytest.fixture(params=["compiled", "arrow"])
def encoder(request, monkeypatch):
    if request.param == "compiled" and keys._native is None:
        pytest.skip("replay.pipeline._build is not built here (setup.py build_ext --inplace)")
    if request.param == "arrow":
        monkeypatch.setattr(keys, "_native", None)
    return request.param


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])  # (set once)
@given(values=st.lists(st.integers(-2**63, 2**63 - 1) | st.integers(0, 5), max_size=60))
def test_sorted_codes_equal_np_unique(encoder, values):
    v = np.asarray(values, np.int64)
    uniq, codes = keys.sorted_codes(v)
    want_uniq, want_codes = np.unique(v, return_inverse=True)
    assert uniq.tolist() == want_uniq.tolist()
    assert codes.tolist() == want_codes.ravel().tolist()
