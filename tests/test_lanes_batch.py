"""``Lanes.extend`` and ``Lanes.find_many`` (the batch forms that keep a replay linear in the
rank count, docs/performance.md "Many ranks") give exactly what ``add`` one lane at a time and
``find`` per rank give."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from replay.graph import NO_LANE, Lanes, LaneType

TYPES = [LaneType.PCIE_H2D, LaneType.COPY_ENGINE, LaneType.BOUNCE_POOL, LaneType.STREAM, LaneType.CPU_CRYPTO]
lane = st.tuples(st.integers(0, 6), st.sampled_from(TYPES), st.integers(0, 2), st.integers(1, 4), st.integers(0, 3))


def _fields(lanes: Lanes):
    return (lanes.rank.tolist(), lanes.type.tolist(), lanes.key.tolist(), lanes.servers.tolist(), lanes.names,
            lanes.shared.tolist(), lanes.max_servers.tolist(), lanes.rank.dtype, lanes.type.dtype, lanes.key.dtype,
            lanes.servers.dtype, lanes.max_servers.dtype)


@settings(max_examples=60, deadline=None)
@given(st.lists(lane, max_size=5), st.lists(lane, max_size=12))
def test_extend_equals_adds(first, more):
    base = Lanes.empty()
    for r, t, k, s, extra in first:
        base, _ = base.add(r, t, k, f"l{r}.{int(t)}.{k}", s, max_servers=s + extra)
    one = base
    for r, t, k, s, extra in more:
        one, _ = one.add(r, t, k, f"m{r}.{int(t)}.{k}", s, max_servers=s + extra)
    many, first_new = base.extend([m[0] for m in more], [int(m[1]) for m in more], [m[2] for m in more],
                                  [f"m{r}.{int(t)}.{k}" for r, t, k, _, _ in more], [m[3] for m in more],
                                  max_servers=[m[3] + m[4] for m in more])
    assert first_new == len(base)
    assert _fields(many) == _fields(one)
    for t in TYPES:
        for k in range(3):
            ranks = np.arange(-1, 8)
            assert many.find_many(ranks, t, k).tolist() == [many.find(int(r), t, k) for r in ranks]


def test_find_many_missing_and_empty():
    lanes, _ = Lanes.empty().extend([3, 1], int(LaneType.PCIE_H2D), 0, ["a", "b"], 1)
    assert lanes.find_many([1, 2, 3], LaneType.PCIE_H2D).tolist() == [1, NO_LANE, 0]
    assert lanes.find_many([1], LaneType.PCIE_D2H).tolist() == [NO_LANE]
    assert Lanes.empty().extend([], 0, 0, [], 1)[0].names == ()
