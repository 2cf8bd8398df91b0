"""Prediction ranges: the preset format (``key_range``), its strict checks, and the range study
(replay/pipeline/ranges.py) through the library, the CLI and the API (docs/model.md "Uncertainty ranges")."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from fastrack_core.errors import ConfigError
from tracefactory import op, write


def _h100():
    from replay.plugins import load_model

    return load_model("h100")


# ---------------------------------------------------------------------------------------------
# presets


def test_every_assumption_or_fit_of_the_shipped_presets_has_a_range():
    import dataclasses

    from replay import config

    cls = _h100()
    missing = []
    for name in cls.available_presets():
        hw = cls.from_preset(name)
        for table, srcs in hw._preset.sources.items():
            section = getattr(hw.p, table)
            for key, src in srcs.items():
                value = getattr(section, key)
                numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
                if numeric and re.match(r"(assumption|derived)", src) and key not in hw._preset.ranges.get(table, {}):
                    missing.append(f"{name}: {table}.{key}")
        for table, body in hw._preset.ranges.items():
            flds = config.fields_of(type(getattr(hw.p, table)))
            for key, (low, high, reason) in body.items():
                lo, hi = config.value_range(flds[key])
                assert low <= getattr(getattr(hw.p, table), key) <= high and reason, (name, table, key)
                assert (lo is None or lo <= low) and (hi is None or high <= hi), (name, table, key)
        assert dataclasses.is_dataclass(hw.p)
    assert not missing, "ranges missing (docs/model.md 'Uncertainty ranges'): " + ", ".join(missing)


def test_the_documented_submission_range_is_the_one_validation_shows():
    hw = _h100().from_preset("h100-sxm")
    low, high, _ = hw._preset.ranges["submit"]["kernel_ns"]
    assert (low, high) == (500, 10_000)  # docs/validation.md: 0.5-10 us


def _child(tmp_path, body: str, name: str = "child.toml"):
    p = tmp_path / name
    p.write_text('[preset]\nname = "child"\ndescription = "test"\nextends = "' + str(_h100().presets_dir / "h100-sxm.toml")
                 + '"\n\n' + body)
    return p


@pytest.mark.parametrize("body,words", [
    ("[pcie]\nlatency_ns_range = [2000, 500]\n", "low must not exceed high"),
    ("[pcie]\nlatency_ns_range = [500, 1500]\n", "the value must lie inside"),
    ("[pcie]\nlatency_ns_range = [500]\n", "expected [low, high]"),
    ("[pcie]\nlatency_ns_range = 500\n", "expected [low, high]"),
    ("[pcie]\nlatency_ns_range = [500.5, 2000]\n", "expected an integer"),
    ("[pcie]\nlatency_ns_range = [500, 100000000000]\n", "must be <="),
    ("[pcie]\nh2d_bandwidth_gb_s_range = [0.0, 60.0]\n", "must be >="),
    ("[gpu]\nsms_range_source = \"why\"\n", "without sms_range"),
    ("[pcie]\nlatency_ns_range = [500, 2000]\nlatency_ns_range_source = \"\"\n", "non-empty string"),
    ("[topology]\nlink_range = [1, 2]\n", "only numeric keys take a range"),
    ("[pcie]\nlatency_range = [1, 2]\n", "unknown key"),
])
def test_a_bad_range_is_refused_naming_the_file_and_key(tmp_path, body, words):
    path = _child(tmp_path, body)
    with pytest.raises(ConfigError) as exc:
        _h100().from_preset(str(path))
    msg = str(exc.value)
    assert words in msg and str(path) in msg and "\n" not in msg


def test_low_above_high_is_refused_by_the_cli_in_one_line(tmp_path):
    path = _child(tmp_path, "[pcie]\nlatency_ns_range = [2000, 500]\n")
    trace = write(tmp_path / "t.parquet", _launches(2))
    proc = subprocess.run([sys.executable, "-m", "replay.frontend.cli", "--protocol", "baseline", "--preset", str(path),
                           str(trace)], capture_output=True, text=True)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "latency_ns_range" in lines[0] and "low must not exceed high" in lines[0]


def test_a_restated_value_drops_the_base_range_and_set_fixes_a_parameter(tmp_path):
    cls = _h100()
    restated = cls.from_preset(str(_child(tmp_path, "[pcie]\nlatency_ns = 3000\nlatency_ns_source = \"assumption: x\"\n")))
    assert "latency_ns" not in restated._preset.ranges.get("pcie", {})  # 3000 lies outside the base's [500, 2000]
    narrowed = cls.from_preset(str(_child(tmp_path, "[pcie]\nlatency_ns_range = [1900, 2100]\n", "n.toml")))
    assert narrowed._preset.ranges["pcie"]["latency_ns"][:2] == (1900, 2100)
    fixed = cls.from_preset("h100-sxm", ["pcie.latency_ns=900"])
    assert "latency_ns" not in fixed._preset.ranges["pcie"] and fixed._preset.fixed_by_set == ("pcie.latency_ns",)
    assert fixed.digest == cls.from_preset("h100-sxm", ["pcie.latency_ns=900"]).digest  # ranges leave digests alone


# ---------------------------------------------------------------------------------------------
# the study, on hand traces


def _launches(n: int, gap: int = 10_000):
    """One thread launching ``n`` 1 us kernels on one stream, then synchronising."""
    ops = []
    for i in range(n):
        call = len(ops)
        ops.append(op("runtime", "cudaLaunchKernel", i * gap, 3_000, thread=1,
                      deps=[(call - 2, "program")] if i else ()))
        ops.append(op("kernel", "k", i * gap + 4_000, 1_000, stream=1, device=0, deps=[(call, "launch")]))
    ops.append(op("sync", "cudaDeviceSynchronize", n * gap, 2_000, thread=1,
                  deps=[(len(ops) - 2, "program"), (len(ops) - 1, "sync")]))
    return ops


def _big_copy(nbytes: int = 256 << 20):
    return [op("runtime", "cudaMemcpyAsync", 0, 5_000, thread=1),
            op("memcpy", "Memcpy HtoD (Pinned -> Device)", 6_000, 5_000_000, stream=1, device=0, bytes=nbytes,
               copy_dir="H2D", host_mem="pinned", deps=[(0, "launch")]),
            op("sync", "cudaStreamSynchronize", 5_000, 5_010_000, thread=1, deps=[(0, "program"), (1, "sync")])]


def _only(tmp_path, ranges: dict[str, tuple]):
    """A preset as h100-sxm whose only ranges are ``ranges`` ({"table.key": (low, high)}): every other
    ranged key is restated without its range (which drops it)."""
    hw = _h100().from_preset("h100-sxm")
    tables: dict[str, list[str]] = {}
    for table, body in hw._preset.ranges.items():
        for key in body:
            value = getattr(getattr(hw.p, table), key)
            lines = tables.setdefault(table, [])
            lines += [f"{key} = {value!r}", f'{key}_source = "test"']
            if f"{table}.{key}" in ranges:
                lo, hi = ranges[f"{table}.{key}"]
                lines += [f"{key}_range = [{lo!r}, {hi!r}]", f'{key}_range_source = "test"']
    body = "\n".join(f"[{t}]\n" + "\n".join(ls) + "\n" for t, ls in tables.items())
    return str(_child(tmp_path, body, "only.toml"))


def _study(tmp_path, ops, preset, protocol="baseline"):
    from replay.pipeline.ranges import RangeStudy
    from replay.pipeline.run import load_graph, replay_graph

    graph, _ = load_graph(write(tmp_path / "t.parquet", ops))
    rep = replay_graph(graph, protocol, preset=preset)
    ref = replay_graph(graph, "none", preset=preset)
    d = RangeStudy(graph, preset=preset).protocol_range(protocol, rep.result.makespan_ns, ref.result.makespan_ns,
                                                         rep.graph)
    return d, rep.result.makespan_ns, ref.result.makespan_ns


def test_the_driver_is_the_parameter_that_dominates(tmp_path):
    # kernel launches: the submission cost moves the result by microseconds per launch, the PCIe
    # latency (a narrow range, and no copy) not at all
    preset = _only(tmp_path, {"submit.kernel_ns": (500, 10_000), "pcie.latency_ns": (1900, 2100)})
    d, m0, r0 = _study(tmp_path, _launches(20), preset)
    assert d["range_driver"] == "submit.kernel_ns"
    lo, hi = d["makespan_range_ns"]
    assert lo < m0 < hi
    # a large pinned copy: the link bandwidth drives it, the submission cost of one call barely
    (tmp_path / "b").mkdir()
    preset = _only(tmp_path / "b", {"submit.copy_ns": (1000, 2000), "pcie.h2d_bandwidth_gb_s": (25.0, 57.0)})
    d, m0, r0 = _study(tmp_path / "b", _big_copy(), preset)
    assert d["range_driver"] == "pcie.h2d_bandwidth_gb_s"
    assert d["ranges"]["makespan_driver"] == "pcie.h2d_bandwidth_gb_s"


def test_monotone_parameters_bracket_the_preset_value(tmp_path):
    # more cost per submission and per crossing, less bandwidth: never faster (one thread, one stream)
    preset = _only(tmp_path, {"submit.kernel_ns": (500, 10_000), "submit.copy_ns": (500, 10_000),
                              "pcie.h2d_bandwidth_gb_s": (25.0, 57.0)})
    first = _launches(5)
    then = _shifted(_big_copy(64 << 20), len(first), 60_000, same_lanes=True)
    then[0]["deps"], then[0]["dep_kinds"] = [len(first) - 1], [then[2]["dep_kinds"][0]]  # after the sync (program)
    d, m0, r0 = _study(tmp_path, first + then, preset)
    rows = {r["parameter"]: r for r in d["ranges"]["parameters"]}
    for name in ("submit.kernel_ns", "submit.copy_ns"):
        at_low, at_high = rows[name]["makespan_ns"]
        assert at_low <= m0 <= at_high and at_low < at_high, name
    slow, fast = rows["pcie.h2d_bandwidth_gb_s"]["makespan_ns"]  # low bandwidth first
    assert fast <= m0 <= slow and fast < slow
    lo, hi = d["makespan_range_ns"]
    corners = d["ranges"]["corners"]
    assert corners["makespan_high"]["makespan_ns"] == hi and corners["makespan_low"]["makespan_ns"] == lo
    assert corners["makespan_high"]["parameters"] == {"pcie.h2d_bandwidth_gb_s": 25.0, "submit.copy_ns": 10_000,
                                                      "submit.kernel_ns": 10_000}
    slo, shi = d["slowdown_range"]
    assert slo <= m0 / r0 <= shi


def _shifted(ops, by: int, t: int, same_lanes: bool = False):
    """``ops`` renumbered to follow ``by`` earlier ops and moved ``t`` ns later (thread 2, stream 2
    unless ``same_lanes``)."""
    out = []
    for o in ops:
        o = dict(o, start_ns=o["start_ns"] + t, deps=[d + by for d in o["deps"]])
        if same_lanes:
            out.append(o)
            continue
        if o["thread"] != -1:
            o["thread"] = 2
        if o["stream"] != -1:
            o["stream"] = 2
        out.append(o)
    return out


def test_unread_parameters_and_unchanged_graphs_cost_no_schedule(tmp_path):
    preset = _only(tmp_path, {"submit.kernel_ns": (500, 10_000), "submit.memset_ns": (500, 10_000),
                              "p2p.sync_ns": (1000, 10_000)})
    d, m0, _ = _study(tmp_path, _launches(3), preset)
    r = d["ranges"]
    assert "p2p.sync_ns" in r["not_read"]  # a one-GPU trace never reads the GPU-to-GPU tables
    memset = next(x for x in r["parameters"] if x["parameter"] == "submit.memset_ns")
    assert memset["makespan_ns"] == [m0, m0] and memset["spread"] == 0  # no memset in the trace
    assert r["points_unchanged"] >= 2


def test_the_range_study_replays_what_the_pipeline_replays(tmp_path):
    # at the preset's values the study's own transform and makespan are the replay's
    from replay.pipeline.ranges import RangeStudy, makespan_of, same_schedule_inputs, transform_tracked
    from replay.pipeline.run import load_graph, replay_graph

    graph, _ = load_graph(write(tmp_path / "t.parquet", _launches(4) + _shifted(_big_copy(8 << 20), 9, 50_000)))
    for protocol in ("baseline", "fastrack"):
        rep = replay_graph(graph, protocol)
        g, reads = transform_tracked(graph, protocol, _h100().from_preset())
        assert reads and same_schedule_inputs(g, rep.graph) and makespan_of(g) == rep.result.makespan_ns
        d = RangeStudy(graph).protocol_range(protocol)  # nothing given: recomputed
        assert d["ranges"]["makespan_ns"] == rep.result.makespan_ns and not d["ranges"]["notes"]


def test_an_adopted_replay_is_neither_transformed_nor_scheduled_again(tmp_path, monkeypatch):
    # replay --ranges and compare --ranges hand the study their own replays (none and the
    # protocol, their transforms' reads recorded): the study's report is the one it computes on
    # its own, without transforming or scheduling either preset point again
    import replay.pipeline.ranges as R
    from replay.pipeline.run import load_graph, replay_graph

    graph, _ = load_graph(write(tmp_path / "t.parquet", _launches(4) + _shifted(_big_copy(8 << 20), 9, 50_000)))
    own = R.RangeStudy(graph).protocol_range("baseline")
    study = R.RangeStudy(graph)
    reps = {p: replay_graph(graph, p, track_reads=True) for p in ("none", "baseline")}
    assert reps["baseline"].reads and "submit.kernel_ns" in reps["baseline"].reads
    assert replay_graph(graph, "baseline").reads is None  # (recorded only when asked for)
    for p, rep in reps.items():
        study.adopt(p, rep)
    calls = []
    real_side = R.RangeStudy._side
    monkeypatch.setattr(R.RangeStudy, "_side", lambda self, *a, **k: calls.append(a[0]) or real_side(self, *a, **k))
    adopted = study.protocol_range("baseline")
    assert calls == [] and adopted == own
    # an adopted protocol is used once; a replay without recorded reads is not adopted
    study.protocol_range("baseline")
    assert calls == ["baseline"]
    fresh = R.RangeStudy(graph)
    fresh.adopt("none", replay_graph(graph, "none"))
    assert fresh._none is None


def test_a_channel_count_is_re_priced_as_lane_sizes(tmp_path):
    # ce.secure_channels_per_direction sets the servers of the secure-channel lanes and of the
    # channel locks: re-priced (the same graph with those lanes resized, the full transform's
    # lanes exactly), and under none, whose graph uses no such lane, the same schedule
    from replay.pipeline.ranges import same_schedule_inputs
    from replay.pipeline.reprice import Repricer
    from replay.plugins import load_protocol

    graph = _graph_of(tmp_path, "random")
    cls = _h100()
    hw, hw2 = cls.from_preset(), cls.from_preset(None, ["ce.secure_channels_per_direction=2"])
    for protocol in ("baseline", "none"):
        transform = load_protocol(protocol)
        g0 = transform(graph, hw)
        rp = Repricer(graph, g0, protocol, transform, hw)
        g2 = rp.at(hw2)
        full = transform(graph, hw2)
        assert g2 is not None and same_schedule_inputs(g2, full)
        assert np.array_equal(g2.lanes.servers, full.lanes.servers)
        assert np.array_equal(g2.lanes.max_servers, full.lanes.max_servers)
        resized = g2.lanes.servers != g0.lanes.servers
        assert resized.any()  # (both directions' channel lanes, and the locks where there are)
        assert (rp.same_prices(g2) and rp.same_used_lanes(g2)) == (protocol == "none")
        assert same_schedule_inputs(g2, g0) == (protocol == "none")


@pytest.mark.parametrize("protocol", ["none", "captured"])
def test_none_and_captured_have_no_range_and_say_so(tmp_path, protocol):
    from replay.pipeline.ranges import RangeStudy, range_line
    from replay.pipeline.run import load_graph

    graph, _ = load_graph(write(tmp_path / "t.parquet", _launches(2)))
    d = RangeStudy(graph).protocol_range(protocol)
    assert d["makespan_range_ns"] is None and d["slowdown_range"] is None and d["range_driver"] is None
    assert range_line(protocol, d) == f"range: {protocol}: no range (the protocol assumes nothing CC-related; " \
                                      "its parameters are not varied)"


def test_the_one_line_text():
    from replay.pipeline.ranges import range_line

    d = {"makespan_range_ns": [1, 2], "slowdown_range": [1.03, 1.258], "range_driver": "submit.kernel_ns",
         "ranges": {}}
    assert range_line("baseline", d, 10, 1.094) == "range: baseline +9.4% (+3.0% to +25.8%; driven by submit.kernel_ns)"
    d["slowdown_range"] = None
    assert range_line("baseline", d, 1_500_000) == ("range: baseline makespan 1.500 ms (0.000 to 0.000 ms; "
                                                     "driven by submit.kernel_ns)")


# ---------------------------------------------------------------------------------------------
# front ends


def test_run_json_and_text_carry_the_range(tmp_path):
    trace = str(write(tmp_path / "t.parquet", _launches(6)))

    def cli(*args):
        proc = subprocess.run([sys.executable, "-m", "replay.frontend.cli", *args], capture_output=True, text=True)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    out = json.loads(cli("--protocol", "baseline", "--ranges", "--json", trace))
    assert set(out) >= {"makespan_range_ns", "slowdown_range", "range_driver", "ranges", "slowdown_vs_none"}
    lo, hi = out["makespan_range_ns"]
    assert lo <= out["makespan_ns"] <= hi and out["slowdown_range"][0] <= out["slowdown_vs_none"] <= out["slowdown_range"][1]
    assert out["range_driver"] in {r["parameter"] for r in out["ranges"]["parameters"]}
    plain = json.loads(cli("--protocol", "baseline", "--json", trace))  # off by default: the keys of before
    assert "makespan_range_ns" not in plain and set(plain) == set(out) - {"makespan_range_ns", "slowdown_range",
                                                                          "range_driver", "ranges"}
    text = cli("--protocol", "baseline", "--ranges", trace).splitlines()
    line = [ln for ln in text if ln.startswith("range: ")]
    assert len(line) == 1 and re.fullmatch(r"range: baseline [+-]\d+\.\d% \([+-]\d+\.\d% to [+-]\d+\.\d%; driven by "
                                           r"[a-z_]+\.[a-z_0-9]+\)", line[0]), line
    cmp = json.loads(cli("compare", "--ranges", "--json", trace))
    rows = {r["protocol"]: r for r in cmp["rows"]}
    assert rows["none"]["makespan_range_ns"] is None and "no range" in rows["none"]["ranges"]["note"]
    assert rows["baseline"]["slowdown_range"] == out["slowdown_range"]


def test_api_ranges(tmp_path):
    import fastrack

    trace = str(write(tmp_path / "t.parquet", _launches(6)))
    r = fastrack.replay(trace, "baseline", ranges=True)
    lo, hi = r.slowdown_range
    assert lo <= r.slowdown <= hi and r.range_driver and r.makespan_range_ns[0] <= r.makespan_ns
    assert r.to_dict()["slowdown_range"] == r.slowdown_range
    assert fastrack.replay(trace, "baseline").slowdown_range is None
    c = fastrack.compare(trace, ["baseline"], ranges=True)
    assert c["baseline"].slowdown_range == r.slowdown_range
    assert c.to_dict()["rows"][0]["range_driver"] == r.range_driver


@pytest.mark.parametrize("protocol", ["baseline", "fastrack", "none"])
def test_a_parameter_the_transform_did_not_read_cannot_change_its_graph(tmp_path, protocol):
    # the skip is exact: every ranged parameter left unread, moved to either end, gives the same
    # schedule inputs (a copy, a memset, a launch and a sync: most of the one-GPU paths)
    from replay.pipeline.ranges import ranged_parameters, same_schedule_inputs, transform_tracked
    from replay.pipeline.run import load_graph
    from replay.plugins import load_protocol

    ops = _launches(2) + _shifted(_big_copy(4 << 20), 5, 40_000)
    ops.append(op("memset", "Memset (Device)", 90_000, 1_000, stream=2, device=0, bytes=4096))
    graph, _ = load_graph(write(tmp_path / "t.parquet", ops))
    cls = _h100()
    hw = cls.from_preset()
    g0, reads = transform_tracked(graph, protocol, hw)
    unread = [r for r in ranged_parameters(hw) if r.name not in reads]
    assert unread and reads
    for r in unread:
        for end in (r.low, r.high):
            g = load_protocol(protocol)(graph, cls.from_preset(None, [f"{r.name}={end}"]))
            assert same_schedule_inputs(g, g0), (r.name, end)


def test_sweep_ranges(tmp_path):
    trace = str(write(tmp_path / "t.parquet", _launches(4)))
    proc = subprocess.run([sys.executable, "-m", "replay.frontend.cli", "sweep", trace, "--protocols", "baseline",
                           "--set", "pcie.latency_ns=800,1200", "-o", str(tmp_path / "s.parquet"), "-j", "1",
                           "--ranges", "--json"], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    spans = json.loads(proc.stdout)["ranges"]
    assert [s["overrides"] for s in spans] == [["pcie.latency_ns=800"], ["pcie.latency_ns=1200"]]
    for s in spans:
        assert s["protocol"] == "baseline" and s["ranges"]["fixed_by_set"] == ["pcie.latency_ns"]
        assert s["slowdown_range"][0] <= s["slowdown_vs_none"] <= s["slowdown_range"][1]


# ---------------------------------------------------------------------------------------------
# re-pricing (replay/pipeline/reprice.py): exact, or not used


def _synth_random(tmp_path, ops: int = 3000):
    out = tmp_path / "random.parquet"
    proc = subprocess.run([sys.executable, "-m", "tracegen.cli", "synth", "random", "--ops", str(ops), "--seed", "0",
                           "-o", str(out)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return out


def _two_ranks():
    """Two ranks, each copying 4 MiB to its GPU and then joining one all-reduce of 1 MiB."""
    ops = []
    for r in (0, 1):
        b = len(ops)
        ops += [op("runtime", "cudaMemcpyAsync", 0, 5_000, thread=1, rank=r),
                op("memcpy", "Memcpy HtoD (Pinned -> Device)", 6_000, 90_000, stream=1, device=0, rank=r,
                   bytes=4 << 20, copy_dir="H2D", host_mem="pinned", deps=[(b, "launch")]),
                op("runtime", "cudaLaunchKernel", 100_000, 1_000, thread=1, rank=r, deps=[(b, "program")])]
    for r in (0, 1):
        call = 3 * r + 2
        ops.append(op("collective", "ncclDevKernel_AllReduce_Sum_f32_RING_LL", 102_000, 3_000, stream=7, device=0,
                      rank=r, deps=[(call, "launch"), (3 * r + 1, "stream")] + ([(6, "collective")] if r else []),
                      coll_type="all_reduce", coll_group="0", coll_seq=0, coll_bytes=1 << 20, bytes=1 << 20))
    return ops


def _graph_of(tmp_path, which: str):
    from pathlib import Path

    from replay.pipeline.run import load_graph

    if which == "random":
        return load_graph(_synth_random(tmp_path))[0]
    if which == "two-ranks":  # a multi-rank graph: collectives (the GPU-to-GPU path is re-transformed)
        return load_graph(write(tmp_path / "ranks.parquet", _two_ranks()))[0]
    return load_graph(Path(__file__).parent.parent / "traces" / which)[0]


@pytest.mark.parametrize("which,preset", [
    ("bert_infer.parquet", None), ("serving.parquet", None), ("serving_offload.parquet", None),
    ("resnet.parquet", None), ("random", None), ("two-ranks", None),
    ("bert_infer.parquet", "b300"), ("random", "b300"),  # (a crossing stage, copies that block the host)
])
def test_a_repriced_point_is_the_full_transform_exactly(tmp_path, which, preset):
    # every parameter the model says changes only prices, at the low and the high end of its range:
    # the re-priced graph has the schedule inputs of the graph the full transform builds, and so its
    # makespan; where the re-pricer declines (structure changes, the GPU-to-GPU path) it says so
    from replay.pipeline.ranges import makespan_of, ranged_parameters, same_schedule_inputs
    from replay.pipeline.reprice import Repricer, repriced_parameters
    from replay.plugins import load_protocol

    graph = _graph_of(tmp_path, which)
    cls = _h100()
    hw = cls.from_preset(preset)
    priced = repriced_parameters(hw)
    params = [r for r in ranged_parameters(hw) if r.name in priced]
    assert len(params) >= 12
    for protocol in ("baseline", "none", "fastrack:direct", "fastrack:auth"):
        transform = load_protocol(protocol)
        g0 = transform(graph, hw)
        rp = Repricer(graph, g0, protocol, transform, hw)
        assert rp.ok == (which != "two-ranks"), (which, protocol)
        repriced = 0
        for r in params:
            for end in (r.low, r.high):
                if end == r.value:
                    continue
                hw1 = cls.from_preset(preset, [f"{r.name}={end!r}" if isinstance(end, float) else f"{r.name}={end}"])
                g1 = rp.at(hw1)
                if g1 is None:
                    continue
                repriced += 1
                full = transform(graph, hw1)
                assert same_schedule_inputs(g1, full), (which, protocol, r.name, end)
                assert makespan_of(g1) == makespan_of(full), (which, protocol, r.name, end)
        if rp.ok:
            assert repriced >= 20, (which, protocol)


def test_the_repriced_stage_parameters_fall_back_when_a_stage_appears(tmp_path):
    # submit.crossing_ns = 0 at the preset: no crossing node; at 330 us one per copy, so that point
    # is re-transformed (the re-pricer declines it), never priced on the wrong graph
    from replay.pipeline.reprice import Repricer
    from replay.plugins import load_protocol

    graph = _graph_of(tmp_path, "bert_infer.parquet")
    cls = _h100()
    hw = cls.from_preset()
    assert hw.crossing_ns() == 0 and hw.doorbell_exit_ns() == 0
    rp = Repricer(graph, load_protocol("baseline")(graph, hw), "baseline", load_protocol("baseline"), hw)
    assert rp.ok
    assert rp.at(cls.from_preset(None, ["submit.crossing_ns=330000"])) is None
    assert rp.at(cls.from_preset(None, ["tee.exits_per_push=1"])) is None
    assert rp.at(cls.from_preset(None, ["submit.crossing_ns=0"])) is not None


def test_a_study_that_reprices_reports_what_one_that_retransforms_does(tmp_path):
    from replay.pipeline.ranges import RangeStudy

    graph = _graph_of(tmp_path, "random")
    fast = RangeStudy(graph)
    slow = RangeStudy(graph)
    slow._repriced = frozenset()  # every point re-transformed
    a, b = fast.protocol_range("baseline"), slow.protocol_range("baseline")
    assert a["ranges"].pop("points_repriced") > 20 and b["ranges"].pop("points_repriced") == 0
    # re-priced points are re-timed (estimates); re-transformed ones are scheduled
    assert a["ranges"].pop("points_retimed") > 20 and b["ranges"].pop("points_retimed") == 0
    assert b["ranges"].pop("points_estimated") == 0 and a["ranges"].pop("points_estimated") >= 0
    for x, y in zip(a["ranges"]["parameters"], b["ranges"]["parameters"]):
        for k, est in enumerate(x.pop("estimated")):  # (an estimate may differ: the ends below may not)
            if est:
                x["makespan_ns"][k] = y["makespan_ns"][k] = x["slowdown"][k] = y["slowdown"][k] = None
        y.pop("estimated")
        x.pop("spread"), y.pop("spread"), x.pop("makespan_spread_ns"), y.pop("makespan_spread_ns")
    assert a == b


@pytest.mark.parametrize("which", ["random", "bert_infer.parquet"])
def test_resizes_no_node_waited_for_are_the_preset_schedule(tmp_path, which):
    """A second secure channel per direction and the bounce pools' other maxima change only lane
    sizes; where no node of the preset schedule waited for those lanes, the study takes the
    preset's makespan without evaluating the point (replay.pipeline.engine.resize_keeps_schedule),
    and that is what a schedule of the point's graph gives."""
    from replay.pipeline.engine import lane_slack, resize_keeps_schedule, schedule
    from replay.pipeline.ranges import RangeStudy, makespan_of

    graph = _graph_of(tmp_path, which)
    study = RangeStudy(graph, reference=False, jobs=1)
    out = study.protocol_range("baseline")
    side = study._side("baseline")
    rp = study._repricer(side)
    s0 = schedule(side.base_graph)
    slack = lane_slack(side.base_graph, s0)
    rows = {r["parameter"]: r for r in out["ranges"]["parameters"]}
    kept = 0
    for name in ("ce.secure_channels_per_direction", "bounce.max_slots"):
        row = rows[name]
        for k, end in enumerate((row["low"], row["high"])):
            g = rp.at(study._model_at({name: end}))
            assert g is not None and rp.same_prices(g)
            if end == row["value"] or rp.same_used_lanes(g):
                continue
            assert resize_keeps_schedule(side.base_graph.lanes, slack, g.lanes.servers, g.lanes.max_servers), (name, end)
            assert row["makespan_ns"][k] == makespan_of(g, schedule(g)) == out["ranges"]["makespan_ns"]
            assert not row["estimated"][k]
            kept += 1
    assert kept == 3  # the channels' high end, the pools' two
    # without the rule the same points are evaluated (re-timed or scheduled), to the same report
    plain = RangeStudy(graph, reference=False, jobs=1)
    plain._resize_keeps = lambda side, g: False
    other = plain.protocol_range("baseline")
    assert other["ranges"]["points_unchanged"] == out["ranges"]["points_unchanged"] - kept
    assert other["ranges"]["points_replayed"] == out["ranges"]["points_replayed"] + kept
    assert [r["makespan_ns"] for r in other["ranges"]["parameters"]] == [r["makespan_ns"] for r in out["ranges"]["parameters"]]
    assert other["makespan_range_ns"] == out["makespan_range_ns"]


def test_a_retransformed_resize_no_node_waited_for_is_not_scheduled(tmp_path):
    """Under `fastrack` (which the re-pricer does not know) the channel count's high end and the
    bounce pools' maxima are re-transformed: the same graph but the lane sizes, so where the rule
    keeps the schedule they are not scheduled, and their makespan is what a schedule gives."""
    from replay.pipeline.engine import schedule
    from replay.pipeline.ranges import RangeStudy, makespan_of
    from replay.plugins import load_protocol

    graph = _graph_of(tmp_path, "bert_infer.parquet")
    study = RangeStudy(graph, reference=False, jobs=1)
    out = study.protocol_range("fastrack")
    row = next(r for r in out["ranges"]["parameters"] if r["parameter"] == "ce.secure_channels_per_direction")
    g = load_protocol("fastrack")(study._graph, study._model_at({row["parameter"]: row["high"]}))
    assert row["makespan_ns"][1] == makespan_of(g, schedule(g)) == out["ranges"]["makespan_ns"]
    plain = RangeStudy(graph, reference=False, jobs=1)
    plain._resize_keeps = lambda side, g: False
    other = plain.protocol_range("fastrack")
    assert other["ranges"]["points_unchanged"] == out["ranges"]["points_unchanged"] - 3  # (those three)
    assert other["ranges"]["parameters"] == out["ranges"]["parameters"]


def test_the_ends_of_a_range_are_exact_schedules(tmp_path):
    """Re-timed points are estimates; the points that decide an end of either range are
    scheduled, so the ranges equal those of a study that schedules every point."""
    from replay.pipeline.ranges import RangeStudy

    for which in ("random", "bert_infer.parquet"):
        graph = _graph_of(tmp_path, which)
        a = RangeStudy(graph).protocol_range("baseline")
        b = RangeStudy(graph, exact=True).protocol_range("baseline")
        assert a["makespan_range_ns"] == b["makespan_range_ns"] and a["slowdown_range"] == b["slowdown_range"]
        assert b["ranges"]["points_retimed"] == 0 and b["ranges"]["points_estimated"] == 0
        assert a["ranges"]["points_retimed"] > 0
        lo, hi = a["makespan_range_ns"]
        for row in a["ranges"]["parameters"]:
            for end, est in zip(row["makespan_ns"], row["estimated"]):
                assert not (est and end in (lo, hi)), row["parameter"]


def test_a_model_without_the_hook_is_always_retransformed():
    from replay.pipeline.reprice import repriced_parameters

    class Bare:
        pass

    assert repriced_parameters(Bare()) == frozenset()


def test_a_repriced_graph_still_refuses_what_a_price_can_break(tmp_path):
    # its structure is the preset graph's (validated when that was scheduled); a negative duration or
    # a sum past the representable time is still refused, naming the node
    from fastrack_core.errors import GraphError
    from replay.pipeline.engine import schedule
    from replay.pipeline.reprice import Repricer, RepricedGraph
    from replay.plugins import load_protocol

    graph = _graph_of(tmp_path, "bert_infer.parquet")
    cls = _h100()
    hw = cls.from_preset()
    rp = Repricer(graph, load_protocol("baseline")(graph, hw), "baseline", load_protocol("baseline"), hw)
    g1 = rp.at(cls.from_preset(None, ["submit.kernel_ns=10000"]))
    assert isinstance(g1, RepricedGraph) and schedule(g1).finish.size == g1.n
    dur = g1.dur.copy()
    dur[-1] = -5
    with pytest.raises(GraphError, match="negative duration"):
        schedule(g1.replace(dur=dur))
    dur[-1] = 1 << 62
    with pytest.raises(GraphError, match="beyond"):
        schedule(g1.replace(dur=dur))


def test_both_engines_give_the_same_ranges(tmp_path):
    """The re-timing has a numba twin: a range study gives the same report on either engine."""
    import twins

    from replay.pipeline.ranges import RangeStudy

    graph = _graph_of(tmp_path, "random")
    got = twins.agree("engine", lambda: RangeStudy(graph).protocol_range("baseline"))
    assert got["ranges"]["points_retimed"] > 20


# ---------------------------------------------------------------------------------------------
# points evaluated at once (RangeStudy(jobs=...), --range-jobs)


@pytest.mark.parametrize("which, exact", [("random", False), ("random", True), ("bert_infer.parquet", False),
                                          ("two-ranks", False)])
def test_the_report_does_not_depend_on_how_many_points_run_at_once(tmp_path, which, exact, monkeypatch):
    """Threads evaluate points (re-priced, re-transformed, the exact ends) at once; each point is a
    function of its values alone and is recorded in the order asked, so the whole report, counts
    included, is the one-at-a-time report."""
    from replay.pipeline import ranges
    from replay.pipeline.ranges import RangeStudy

    monkeypatch.setattr(ranges, "PARALLEL_MEMORY_BYTES", 1 << 40)  # (every slot allowed: the most threads)
    graph = _graph_of(tmp_path, which)
    one = RangeStudy(graph, jobs=1, exact=exact).protocol_range("baseline")
    many = RangeStudy(graph, jobs=4, exact=exact).protocol_range("baseline")
    assert many == one
    assert one["ranges"]["points_replayed"] > 4


def test_points_at_once_stay_within_the_memory_allowance(tmp_path, monkeypatch):
    from replay.pipeline import ranges
    from replay.pipeline.ranges import RangeStudy, graph_bytes

    graph = _graph_of(tmp_path, "random")
    study = RangeStudy(graph, jobs=8)
    side = study._side("baseline")
    g = side.base_graph
    light, heavy = 94 * g.n + 8 * g.dep_src.size, 2 * graph_bytes(g) + 70 * g.n
    assert graph_bytes(g) > g.dur.nbytes + g.dep_src.nbytes
    monkeypatch.setattr(ranges, "PARALLEL_MEMORY_BYTES", 0)
    assert study._slots([side]) == (1, 1)  # nothing extra allowed: one point at a time
    monkeypatch.setattr(ranges, "PARALLEL_MEMORY_BYTES", 2 * heavy)
    assert study._slots([side]) == (min(8, 1 + 2 * heavy // light), 3)  # the allowance: 2 more re-transformed graphs
    monkeypatch.setattr(ranges, "PARALLEL_MEMORY_BYTES", 1 << 50)
    assert study._slots([side]) == (8, 8)  # never more than jobs


def test_a_failing_point_fails_the_study_whatever_the_threads(tmp_path, monkeypatch):
    from replay.pipeline.ranges import RangeStudy

    graph = _graph_of(tmp_path, "random")
    real = RangeStudy._model_at

    def model_at(self, values):
        if "submit.kernel_ns" in values:
            raise ConfigError("planted failure")
        return real(self, values)

    monkeypatch.setattr(RangeStudy, "_model_at", model_at)
    for jobs in (1, 3):
        with pytest.raises(ConfigError, match="planted failure"):
            RangeStudy(graph, jobs=jobs).protocol_range("baseline")


@pytest.mark.parametrize("jobs", [0, -1, 257])
def test_range_jobs_outside_its_range_are_refused(jobs, tmp_path):
    from replay.pipeline.ranges import RangeStudy
    from replay.pipeline.run import load_graph

    graph, _ = load_graph(write(tmp_path / "t.parquet", _launches(2)))
    with pytest.raises(ConfigError, match=r"range jobs: not an integer in 1\.\.256"):
        RangeStudy(graph, jobs=jobs)


def test_range_jobs_on_the_command_line(tmp_path):
    trace = str(write(tmp_path / "t.parquet", _launches(6)))

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "replay.frontend.cli", *args], capture_output=True, text=True)

    one, two = (cli("--protocol", "baseline", "--ranges", "--json", "--range-jobs", j, trace) for j in ("1", "2"))
    assert one.returncode == two.returncode == 0, one.stderr + two.stderr
    assert json.loads(one.stdout) == json.loads(two.stdout)
    bad = cli("--protocol", "baseline", "--ranges", "--range-jobs", "0", trace)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "expected an integer in 1<=x<=256" in bad.stderr


# ---------------------------------------------------------------------------------------------
# rule methods: a point moving only parameters read inside them is compared by the rules' answers


def test_transform_tracked_keeps_the_reads_inside_rule_methods_apart(monkeypatch):
    import replay.plugins as plugins
    from replay.pipeline.ranges import transform_tracked

    hw = _h100().from_preset()
    assert "direct_eligible" in hw.rule_methods

    def by_the_rule(graph, model):  # reads the direct table only through the model's rule
        model.direct_eligible(np.array([1, 2], np.int8), np.array([1, 1], np.int8), np.array([10, 1 << 20]))
        assert model.p.pcie.latency_ns > 0
        return graph

    def also_directly(graph, model):  # reads one of its parameters outside the rule as well
        by_the_rule(graph, model)
        assert model.p.direct.min_bytes >= 0
        return graph

    monkeypatch.setattr(plugins, "load_protocol", lambda name: {"a": by_the_rule, "b": also_directly}[name])
    _, a = transform_tracked("g", "a", hw)
    _, b = transform_tracked("g", "b", hw)
    assert {"direct.h2d", "direct.d2h", "direct.min_bytes", "pcie.latency_ns"} <= a and a == b
    assert a.by_rule == {"direct.h2d", "direct.d2h", "direct.min_bytes"}
    assert b.by_rule == {"direct.h2d", "direct.d2h"}
    method, args, kwargs, answer = a.calls[0]
    assert method == "direct_eligible" and len(a.calls) == 1 and answer.dtype == bool and answer.size == 2
    assert "direct_eligible" not in hw.__dict__  # (the model's own method again)


@pytest.mark.parametrize("which", ["llama_infer.parquet", "resnet.parquet", "serving.parquet", "random"])
def test_rule_answers_that_agree_mean_the_same_graph(tmp_path, which):
    """Wherever the recorded rule calls get the preset's answers at another `direct` setting, the
    full transform there builds the preset's graph (same schedule inputs)."""
    from replay.pipeline.ranges import same_rule_answers, same_schedule_inputs, transform_tracked
    from replay.plugins import load_protocol

    graph = _graph_of(tmp_path, which)
    cls = _h100()
    agreed = differed = 0
    for protocol in ("baseline", "fastrack"):
        g0, reads = transform_tracked(graph, protocol, cls.from_preset())
        assert reads.by_rule >= {"direct.min_bytes"}
        for setting in ("direct.min_bytes=0", "direct.min_bytes=4096", "direct.min_bytes=1048576",
                        "direct.min_bytes=1099511627776", "direct.h2d=none", "direct.d2h=all"):
            hw = cls.from_preset(None, [setting])
            same = same_rule_answers(reads, hw)
            agreed += same
            differed += not same
            assert same_schedule_inputs(load_protocol(protocol)(graph, hw), g0) or not same, (which, protocol, setting)
    assert (differed if which == "random" else agreed)  # (the random trace's copies cross every threshold)


def test_a_study_compares_rule_answers_instead_of_transforming(tmp_path, monkeypatch):
    import replay.plugins as plugins
    from replay.pipeline.ranges import RangeStudy

    graph = _graph_of(tmp_path, "llama_infer.parquet")  # no copy crosses direct.min_bytes' ends
    counted = {"n": 0}
    real = plugins.load_protocol

    def counting(name):
        transform = real(name)

        def call(g, hw):
            counted["n"] += 1
            return transform(g, hw)
        return call

    monkeypatch.setattr(plugins, "load_protocol", counting)
    runs = {}
    for rule in (True, False):
        study = RangeStudy(graph, jobs=1)
        if not rule:
            study._same_rules = lambda side, moved, hw: False
        counted["n"] = 0
        runs[rule] = (study.protocol_range("baseline"), counted["n"])
    (with_rule, n_with), (without, n_without) = runs[True], runs[False]
    assert with_rule == without  # (counts included: both points are unchanged either way)
    assert n_with == n_without - 2  # direct.min_bytes' two ends, not transformed
    row = next(r for r in with_rule["ranges"]["parameters"] if r["parameter"] == "direct.min_bytes")
    assert row["makespan_ns"] == [with_rule["ranges"]["makespan_ns"]] * 2


def test_a_point_whose_rules_answer_alike_is_repriced_like_its_prices_alone(tmp_path):
    """A corner that moves a direct threshold no copy crosses and some prices is re-priced from the
    preset's graph, and that graph has the full transform's schedule inputs and makespan."""
    from replay.pipeline.ranges import RangeStudy, makespan_of, same_schedule_inputs
    from replay.plugins import load_protocol

    graph = _graph_of(tmp_path, "llama_infer.parquet")
    study = RangeStudy(graph, reference=False, jobs=1, exact=True)
    side = study._side("baseline")
    for values in ({"direct.min_bytes": 1048576, "cpu_crypto.core_gb_s": 20.9},
                   {"direct.min_bytes": 4096, "pcie.h2d_bandwidth_gb_s": 40.0, "submit.kernel_ns": 10000}):
        hw = study._model_at(values)
        out = study._evaluate(side, values)
        assert out.repriced and not out.unchanged
        full = load_protocol("baseline")(study._graph, hw)
        assert same_schedule_inputs(study._repricer(side).at(hw), full)
        assert out.makespan == makespan_of(full)
    # a threshold some copy crosses (all copies qualify at 0 bytes under `h2d = all`) is re-transformed
    crossing = {"direct.min_bytes": 0, "direct.h2d": "all", "cpu_crypto.core_gb_s": 20.9}
    assert not study._same_rules(side, {"direct.min_bytes", "direct.h2d"}, study._model_at(crossing))
    assert not study._evaluate(side, crossing).repriced


def test_a_one_job_study_holds_freed_memory_and_a_threaded_one_does_not(tmp_path, monkeypatch):
    # one point at a time, the points' graphs reuse each other's freed pages
    # (fastrack_core.memory.reusing_freed_memory); in threads each glibc arena would keep its own,
    # raising the peak, so a threaded study does not hold them (docs/performance.md)
    import replay.pipeline.ranges as R
    from fastrack_core import memory

    seen, real = [], R.RangeStudy._protocol_range

    def spy(self, *a):
        seen.append(memory._reusing)
        return real(self, *a)

    monkeypatch.setattr(R.RangeStudy, "_protocol_range", spy)
    graph = _graph_of(tmp_path, "random")
    one = R.RangeStudy(graph, jobs=1).protocol_range("baseline")
    two = R.RangeStudy(graph, jobs=2).protocol_range("baseline")
    assert seen == [1, 0] and memory._reusing == 0
    assert one == two  # (never a different result)


@pytest.mark.parametrize("which", ["random", "llama_infer.parquet", "serving_offload.parquet"])
def test_points_of_one_structure_are_repriced_from_the_first_and_agree_with_transforms(tmp_path, monkeypatch, which):
    # points whose structure parameters sit at the same values (the corners: all move
    # direct.min_bytes one way) are one task: the first re-transformed, the others re-priced from
    # its graph. Each such graph has the schedule inputs of the point's own transform, and the
    # study's report is the one it gives with every such point re-transformed
    import replay.pipeline.ranges as R
    from replay.plugins import load_protocol

    graph = _graph_of(tmp_path, which)
    shared, real = [], R.RangeStudy._evaluate_like

    def checked(self, side, moved, rp, m1):
        out = real(self, side, moved, rp, m1)
        hw = self._model_at(moved)
        g = rp.at(hw)
        if g is not None:
            assert R.same_schedule_inputs(g, load_protocol(side.protocol)(self._graph, hw))
            shared.append(dict(moved))
        return out

    monkeypatch.setattr(R.RangeStudy, "_evaluate_like", checked)
    got = R.RangeStudy(graph, jobs=1).protocol_range("baseline")
    monkeypatch.setattr(R.RangeStudy, "_evaluate_like", lambda self, side, moved, rp, m1: self._evaluate(side, moved))
    alone = R.RangeStudy(graph, jobs=1).protocol_range("baseline")
    if which != "llama_infer.parquet":  # (its corners move different structure parameters)
        assert shared, "the corners of this graph share their structure"
    assert got["ranges"]["points_repriced"] == alone["ranges"]["points_repriced"] + len(shared)
    for d in (got, alone):
        del d["ranges"]["points_repriced"]
    assert got == alone
