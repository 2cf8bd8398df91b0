"""A copy under CC is never faster than the same copy without it: under every preset of the ``h100``
model's registry, ``baseline`` (the preset's own ``[direct]`` rule, and plaintext buffers) takes at
least as long as ``none`` for pinned and pageable H2D and D2H copies of 4 KiB and 64 MiB. A CC
copy does everything the plain one does plus the crypto; a pageable CC copy encrypts where the plain
one copies, so the CPU AES-GCM rate may not beat the host copy rate (docs/model.md "Calibration")."""

from __future__ import annotations

import pytest

from fastrack_core.traceio import trace_in_memory
from replay.frontend.calibrate import MICROBENCH_SETS
from replay.pipeline.build import build_graph
from replay.pipeline.run import replay_graph
from replay.plugins import load_model
from tracegen.synth import memcpy_table

MODEL = "h100"
PRESETS = load_model(MODEL).available_presets()
SIZES = (4 << 10, 64 << 20)


def _graph(nbytes: int, direction: str, memory: str):
    table = memcpy_table(nbytes, direction, memory, 1)
    return build_graph(trace_in_memory(table, {"source_format": "synthetic", "trace_name": "copy order"}))


GRAPHS = {(n, d, m): _graph(n, d, m) for n in SIZES for d in ("h2d", "d2h") for m in ("pinned", "pageable")}


def test_registry_has_the_calibrated_presets():
    assert {"h100-sxm", "b300", "h200"} <= set(PRESETS)


@pytest.mark.parametrize("preset", PRESETS)
def test_baseline_never_faster_than_none(preset):
    params = load_model(MODEL).from_preset(preset).params
    assert params["cpu_crypto"]["core_gb_s"] <= params["host"]["staging_copy_gb_s"]
    slower = []
    for (nbytes, direction, memory), g in GRAPHS.items():
        none = replay_graph(g, "none", MODEL, preset, []).result.makespan_ns
        for sets in ([], list(MICROBENCH_SETS)):
            base = replay_graph(g, "baseline", MODEL, preset, sets).result.makespan_ns
            if base < none:
                slower.append(f"{direction} {memory} {nbytes} B {sets or 'own rule'}: {base} < {none}")
    assert not slower, slower
