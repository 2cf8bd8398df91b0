"""``replay explain``: what confidential computing costs one workload, in plain words.

One page a researcher can paste into a paper's notes (docs/explain.md):

* **what CC adds**: the H100 CC path as shipped (protocol :data:`CC_PROTOCOL`) against no TEE
  (:data:`~replay.names.NONE`), same model and preset, by mechanism (command submission, CPU
  AES-GCM, PCIe, copy-engine crypto and GPU authentication, bounce-buffer waits, host blocked in
  synchronising calls, collectives) in ms and in % of the no-TEE makespan, twice: the *work added*
  (busy time of the mechanism's nodes, summed over the whole graph) and the change of the
  mechanism's time *on the critical path* (which adds up to the makespan change). Work added but
  not on the path was hidden by overlap. The critical path also moves between host and GPU when CC
  slows the host down; that shift is reported as such, not as added host or GPU work;
* **what each protocol saves** against :data:`CC_PROTOCOL`: every protocol the registry holds
  (``fastrack``, each Fastrack fix alone, and any other installed plug-in such as ``tee-io``),
  aliases left out, or ``--protocols``;
* **what the answer rests on**: every parameter whose preset source says ``assumption`` (not
  measured) is moved alone (to ``[low, high]`` when the preset gives the parameter a range, else by
  ``--factors``), under both :data:`~replay.names.NONE` and :data:`CC_PROTOCOL`, and the change of
  the CC overhead is ranked (the replays run on ``replay sensitivity``'s executors);
* **whether one-time setup dominates**: the setup's share of the CC overhead (``replay run``'s
  ``setup`` line, :func:`replay.pipeline.results.setup_metrics`).

Text, ``--json``, or a report with its figures (``-o report.html``: one self-contained file, the
figures embedded as PNG; ``-o report.md``: Markdown with the figures as PNG files beside it).
"""

from __future__ import annotations

import base64
import html
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import click
import numpy as np

from fastrack_core.cli_support import progress_default, reports_errors
from fastrack_core.errors import ConfigError
from replay.graph import Category
from replay.names import CAPTURED, NONE
from replay.plugins import DEFAULT_MODEL
from replay.frontend.options import (
    check_outputs, complete_protocols, executor_options, json_option, model_options, overwrite_option,
)
from replay.frontend.report import fmt_ns

CC_PROTOCOL = "baseline"  # the H100 CC path as NVIDIA's driver implements it (docs/protocols.md)
DEFAULT_FACTORS = (0.5, 2.0)
SETUP_DOMINATES = 0.5  # setup "dominates" when it is more than half of the CC overhead
# replay run's summary replays CC_PROTOCOL too (a third schedule) only up to this many graph nodes, so a
# large replay keeps its two schedules (docs/performance.md targets); beyond it the summary is the
# replayed protocol's own overhead and `replay explain` gives the rest
SUMMARY_MAX_NODES = 200_000
TOP_ASSUMPTIONS = 8  # assumptions shown in the text and the figure (the JSON has all)
REPORT_FORMATS = ("html", "htm", "md")

# (key, label, category): the mechanisms of the CC overhead, in the order a copy meets them
MECHANISMS = (
    ("submission", "command submission", Category.LAUNCH),
    ("cpu_crypto", "CPU AES-GCM", Category.CPU_CRYPTO),
    ("pcie", "PCIe transfers", Category.PCIE),
    ("ce_crypto", "copy-engine crypto + GPU auth", Category.GPU_CRYPTO),
    ("bounce_wait", "bounce-buffer waits", Category.BOUNCE_WAIT),
    ("host_blocking", "host blocked in syncs", Category.SYNC_WAIT),
    ("collectives", "collectives", Category.COMM),
)
# categories whose critical-path time moves when CC slows one side down, with no work added
# (host work changes where no-TEE's staging of pageable copies becomes CC's CPU encryption)
SHIFTS = (("host", "host work", Category.HOST), ("compute", "GPU compute", Category.COMPUTE))


# ----------------------------------------------------------------------------- facts of one replay

@dataclass
class Facts:
    """What the explanation needs of one replay (its graph and schedule are not kept)."""

    protocol: str
    makespan_ns: int
    critical_path_ns: dict[str, int]
    work_ns: dict[str, int]  # busy time of the nodes of each category; bounce_wait: pool-slot waits
    setup: dict[str, Any]


def facts_of(rep, protocol: str, windowed: bool = False, setup: dict[str, Any] | None = None) -> Facts:
    """:class:`Facts` of a :class:`replay.pipeline.run.Replay` (``setup``: its
    :func:`~replay.pipeline.results.setup_metrics`, when the caller has them already)."""
    from replay.pipeline.results import setup_metrics

    g, s = rep.graph, rep.schedule
    took = (s.finish - s.start).astype(np.int64)
    per_cat = np.bincount(g.category.astype(np.int64), weights=took, minlength=len(Category))
    work = {c.label: int(per_cat[int(c)]) for c in Category}
    work[Category.BOUNCE_WAIT.label] += int(np.maximum(s.slot_wait, 0).sum())
    return Facts(protocol=protocol, makespan_ns=int(rep.result.makespan_ns),
                 critical_path_ns={k: int(v) for k, v in rep.result.critical_path_ns.items()}, work_ns=work,
                 setup=setup if setup is not None else setup_metrics(g, s, windowed) if g.n else {})


def mechanisms(cc: Facts, ref: Facts) -> list[dict[str, Any]]:
    """The CC overhead of ``cc`` against ``ref`` by mechanism: work added, its change on the
    critical path, the part hidden by overlap (work added - on the path, not below 0), in ns and
    as shares of the reference makespan."""
    base = max(1, ref.makespan_ns)
    out = []
    for key, label, cat in MECHANISMS:
        work = cc.work_ns.get(cat.label, 0) - ref.work_ns.get(cat.label, 0)
        path = cc.critical_path_ns.get(cat.label, 0) - ref.critical_path_ns.get(cat.label, 0)
        out.append({"mechanism": key, "label": label, "category": cat.label, "work_added_ns": int(work),
                    "on_path_ns": int(path), "off_path_ns": int(max(0, work - path)),
                    "work_share": round(work / base, 6), "on_path_share": round(path / base, 6)})
    return out


def path_shifts(cc: Facts, ref: Facts) -> list[dict[str, Any]]:
    """How the critical path moved between host and GPU: the change of each side's time on the
    path and of its work (work changes only under a what-if; a protocol adds none)."""
    base = max(1, ref.makespan_ns)
    return [{"side": key, "label": label, "category": cat.label,
             "on_path_ns": int(cc.critical_path_ns.get(cat.label, 0) - ref.critical_path_ns.get(cat.label, 0)),
             "work_added_ns": int(cc.work_ns.get(cat.label, 0) - ref.work_ns.get(cat.label, 0)),
             "on_path_share": round((cc.critical_path_ns.get(cat.label, 0)
                                     - ref.critical_path_ns.get(cat.label, 0)) / base, 6)}
            for key, label, cat in SHIFTS]


def _share(x: float, of: float) -> float | None:
    return round(x / of, 6) if of else None


def ms(ns: float, sign: bool = False) -> str:
    """Milliseconds for people: ``12.345 ms``; below 10 us in us or ns (``1.6 us``, ``3 ns``)."""
    ns = float(ns)
    plus = "+" if sign and ns > 0 else ""
    if abs(ns) >= 10_000:
        return f"{plus}{ns / 1e6:,.3f} ms"
    return plus + fmt_ns(ns)


def pct(x: float | None, sign: bool = True) -> str:
    if x is None or x != x:
        return "n/a"
    return f"{100 * x:+.2f}%" if sign else f"{100 * x:.2f}%"


# ----------------------------------------------------------------------------- the run summary

def reference_with_facts(graph, protocol: str, model: str = DEFAULT_MODEL, preset: str | None = None,
                         overrides: Sequence[str] = (), trace_ops: int | None = None,
                         scales: Mapping[str, float] | None = None, serving: bool = False, setup: bool = False,
                         windowed: bool = False, keep: bool = False):
    """``replay run``'s reference replay (what :func:`replay.pipeline.run.replay_reference` returns)
    and the :class:`Facts` the plain-words summary needs: those of :data:`~replay.names.NONE` and,
    when ``protocol`` is not :data:`CC_PROTOCOL` itself, of :data:`CC_PROTOCOL` (one more replay;
    None when no such protocol is registered, or when the graph has more than
    :data:`SUMMARY_MAX_NODES` nodes: then the summary explains ``protocol``'s own overhead).
    ``keep``: the reference keeps its whole replay (``kept``, with the parameters its transform
    read), for a range study to adopt."""
    from replay.plugins import available_protocols
    from replay.pipeline.run import Reference, replay_graph
    from replay.pipeline.serving import serving_metrics

    rep = replay_graph(graph, NONE, model, preset, overrides, trace_ops=trace_ops, scales=scales, track_reads=keep)
    none = facts_of(rep, NONE, windowed)
    ref = Reference(makespan_ns=rep.result.makespan_ns, serving=serving_metrics(rep.graph, rep.schedule)
                    if serving else None, setup=none.setup if setup else None, kept=rep if keep else None)
    del rep
    cc = None
    if protocol != CC_PROTOCOL and CC_PROTOCOL in available_protocols() and graph.n <= SUMMARY_MAX_NODES:
        cc = facts_of(replay_graph(graph, CC_PROTOCOL, model, preset, overrides, trace_ops=trace_ops, scales=scales),
                      CC_PROTOCOL, windowed)
    return ref, {"none": none, "cc": cc}


def run_summary(facts: Mapping[str, Facts | None], rep, protocol: str, windowed: bool = False,
                setup: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``cc`` part of ``replay run``'s report: what CC (:data:`CC_PROTOCOL`) adds by mechanism,
    what ``protocol`` saves against it, and one line in plain words (``setup``: the replay's
    :func:`~replay.pipeline.results.setup_metrics`, when the caller has them already)."""
    mine = facts_of(rep, protocol, windowed, setup)
    none, cc = facts["none"], facts.get("cc") or (mine if protocol == CC_PROTOCOL else None)
    if cc is None:  # no CC_PROTOCOL registered: explain the protocol's own cost
        cc = mine
    over = cc.makespan_ns - none.makespan_ns
    out = {"cc_protocol": cc.protocol, "cc_makespan_ns": cc.makespan_ns, "none_makespan_ns": none.makespan_ns,
           "overhead_ns": int(over), "overhead_share": _share(over, none.makespan_ns),
           "mechanisms": mechanisms(cc, none), "path_shifts": path_shifts(cc, none)}
    if facts.get("cc") is None and protocol != CC_PROTOCOL:
        out["note"] = (f"'{CC_PROTOCOL}' not replayed (more than {SUMMARY_MAX_NODES:,} nodes): the overhead "
                       f"is {protocol}'s own; replay explain says what it saves")
    if protocol != cc.protocol:
        saves = cc.makespan_ns - mine.makespan_ns
        out.update({"protocol": protocol, "saves_ns": int(saves), "saves_share_of_overhead": _share(saves, over)})
    out["summary"] = summary_line(out)
    return out


def _main_mechanism(mechs: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    best = max(mechs, key=lambda m: m["on_path_ns"], default=None)
    return best if best is not None and best["on_path_ns"] > 0 else None


def summary_line(s: Mapping[str, Any]) -> str:
    """``In plain words: CC ('baseline') adds 2.630 ms (+9.62%) to the 27.333 ms without a TEE,
    mostly command submission (3.318 ms on the critical path); fastrack saves 1.9 us (0.07% of it).``"""
    over = s["overhead_ns"]
    words = (f"in plain words: CC ('{s['cc_protocol']}') adds {ms(over)} ({pct(s['overhead_share'])}) to the "
             f"{ms(s['none_makespan_ns'])} without a TEE")
    top = _main_mechanism(s["mechanisms"])
    if top is not None and over > 0:
        words += f", mostly {top['label']} ({ms(top['on_path_ns'])} on the critical path)"
    if "protocol" in s:
        share = s.get("saves_share_of_overhead")
        saved = s["saves_ns"]
        verb = "saves" if saved >= 0 else "costs"
        words += (f"; {s['protocol']} {verb} {ms(abs(saved))}"
                  + (f" ({pct(abs(share), sign=False)} of it)" if share is not None else ""))
    return words


def format_mechanisms(s: Mapping[str, Any], indent: str = "  ") -> list[str]:
    """The mechanism table of a ``cc`` summary (ms and % of the no-TEE makespan)."""
    lines = [f"{indent}{'mechanism':<30} {'work added':>12} {'':>8}  {'on the critical path':>21}  "
             f"{'hidden by overlap':>17}"]
    for m in s["mechanisms"]:
        if not (m["work_added_ns"] or m["on_path_ns"]):
            continue
        lines.append(f"{indent}{m['label']:<30} {ms(m['work_added_ns'], True):>12} {pct(m['work_share']):>8}  "
                     f"{ms(m['on_path_ns'], True):>12} {pct(m['on_path_share']):>8}  {ms(m['off_path_ns']):>17}")
    moved = [p for p in s["path_shifts"] if p["on_path_ns"]]
    if moved:
        lines.append(f"{indent}critical path moved: " + ", ".join(
            f"{p['label']} {ms(p['on_path_ns'], True)}"
            + (f" (its work {ms(p['work_added_ns'], True)})" if p["work_added_ns"] else "") for p in moved)
            + ("" if any(p["work_added_ns"] for p in moved) else " (no host or GPU work added: CC changed "
                                                                   "which side bounds the run)"))
    lines.append(f"{indent}{'total (makespan change)':<30} {'':>12} {'':>8}  {ms(s['overhead_ns'], True):>12} "
                 f"{pct(s['overhead_share']):>8}")
    return lines


# ----------------------------------------------------------------------------- assumptions

def assumed_parameters(model: str, preset: str | None, overrides: Sequence[str] = ()) -> list[dict[str, Any]]:
    """The numeric parameters of the preset whose source says ``assumption`` (not measured) or that
    carry an uncertainty range (``key_range = [low, high]``, an assumption or a fit), with their
    value, unit, source and range (None without one).
    Parameters fixed by ``--set`` are left out (the user chose them)."""
    from replay.frontend.paraminfo import unit_of
    from replay.plugins import load_model

    hw = load_model(model).from_preset(preset, overrides)
    fixed = {o.partition("=")[0] for o in overrides}
    # key_range = [low, high] of the preset (replay.config.Preset.ranges: table -> key -> (low, high, why))
    ranges = getattr(hw, "ranges", None) or getattr(getattr(hw, "_preset", None), "ranges", None) or {}
    out = []
    for table, values in hw.params.items():
        if not isinstance(values, Mapping):
            continue
        for key, value in values.items():
            name = f"{table}.{key}"
            source = str(hw.sources.get(table, {}).get(key, ""))
            rng = ranges.get(table, {}).get(key) if isinstance(ranges.get(table), Mapping) else None
            if (isinstance(value, bool) or not isinstance(value, (int, float)) or name in fixed
                    or ("assumption" not in source.lower() and rng is None)):
                continue
            out.append({"parameter": name, "value": value, "unit": unit_of(key), "source": source,
                        "range": [rng[0], rng[1]] if rng is not None else None,
                        "range_source": str(rng[2]) if rng is not None and len(rng) > 2 else None})
    return sorted(out, key=lambda r: r["parameter"])


def assumption_sensitivity(trace: str, model: str, preset: str | None, overrides: Sequence[str],
                           none_ns: int, cc_ns: int, factors: Sequence[float] = DEFAULT_FACTORS,
                           executor: str | None = None, jobs: int | None = None,
                           progress: bool | None = False) -> dict[str, Any]:
    """Each assumed parameter alone at its range's ends (or times each factor), replayed under
    :data:`~replay.names.NONE` and :data:`CC_PROTOCOL` on ``replay sensitivity``'s executors; the
    CC overhead at each value, ranked by its largest change."""
    from replay.frontend.study.executors import makespans
    from replay.frontend.study.points import ModelResolver, file_sha256, make_point
    from replay.frontend.study.sensitivity import _perturb
    from replay.frontend.study.spec import override_text

    resolver = ModelResolver(model)
    sha = file_sha256(trace)
    fixed = tuple(sorted(overrides))
    params = assumed_parameters(model, preset, fixed)
    points, rows = [], []
    for p in params:
        values = p["range"] if p["range"] is not None else [_perturb(p["value"], f) for f in factors]
        how = "range" if p["range"] is not None else "factor"
        for i, v in enumerate(values):
            row = {"parameter": p["parameter"], "value": float(v), "how": how,
                   "factor": None if how == "range" else float(factors[i]), "status": "ok", "keys": None}
            if v == p["value"]:
                row["status"] = "same as preset"
            else:
                ovr = tuple(sorted([o for o in fixed if o.partition("=")[0] != p["parameter"]]
                                   + [override_text(p["parameter"], v)]))
                try:
                    pts = [make_point(resolver, trace, sha, proto, preset, ovr) for proto in (NONE, CC_PROTOCOL)]
                except ConfigError as exc:
                    row["status"] = f"rejected: {str(exc).splitlines()[0]}"
                else:
                    row["keys"] = [pt.key for pt in pts]
                    points += pts
            rows.append(row)
    makespan = makespans(points, executor, jobs, progress, "assumptions")
    base = cc_ns - none_ns
    by_param: dict[str, dict[str, Any]] = {p["parameter"]: {**p, "points": []} for p in params}
    for row in rows:
        keys = row.pop("keys")
        if keys is not None:
            n, c = makespan[keys[0]], makespan[keys[1]]
            row.update({"none_makespan_ns": int(n), "cc_makespan_ns": int(c), "overhead_ns": int(c - n),
                        "overhead_change_ns": int((c - n) - base)})
        by_param[row["parameter"]]["points"].append(row)
    out = []
    for p in by_param.values():
        moves = [abs(r["overhead_change_ns"]) for r in p["points"] if "overhead_change_ns" in r]
        p["swing_ns"] = int(max(moves)) if moves else None
        out.append(p)
    out.sort(key=lambda p: (-(p["swing_ns"] if p["swing_ns"] is not None else -1), p["parameter"]))
    return {"protocols": [NONE, CC_PROTOCOL], "factors": [float(f) for f in factors],
            "overhead_ns": int(base), "parameters": out,
            "ranges_from_preset": any(p["range"] is not None for p in params)}


# ----------------------------------------------------------------------------- the explanation

def default_protocols() -> list[str]:
    """Every registered protocol but :data:`~replay.names.NONE`, :data:`CC_PROTOCOL` and aliases of
    another protocol (``cc-multi:*`` name ``baseline`` and ``fastrack`` with options)."""
    from replay.plugins import PROTOCOLS_GROUP, ProtocolAlias, available_protocols, load_entry

    out = []
    for name in available_protocols():
        if name in (NONE, CC_PROTOCOL, CAPTURED):
            continue
        try:
            if isinstance(load_entry(PROTOCOLS_GROUP, "protocol", name), ProtocolAlias):
                continue
        except Exception:  # noqa: BLE001 - a broken plug-in is named when it is replayed
            pass
        out.append(name)
    return out


def gpu_note(trace_source: Mapping[str, Any] | None, model: str | None) -> str | None:
    """A note when a trace recorded on an older GPU (V100, A100) is replayed on the H100 model:
    its kernel and host times are the older machine's. Names only the family, not the metadata."""
    gpu = str((trace_source or {}).get("gpu_model") or "").upper()
    if not model or "h100" not in str(model).lower():
        return None
    for family in ("V100", "A100", "A10", "T4", "L4", "P100"):
        if family in gpu.replace("-", " ").split() or gpu.find(family) >= 0:
            return (f"the trace was recorded on an {family} GPU and is replayed on the H100 model: kernel, copy "
                    f"and host times are the {family}'s as measured (the model prices only what CC adds)")
    return None


def explain(trace: str, protocols: Sequence[str] | None = None, model: str = DEFAULT_MODEL,
            preset: str | None = None, overrides: Sequence[str] = (), factors: Sequence[float] = DEFAULT_FACTORS,
            assumptions: bool = True, executor: str | None = None, jobs: int | None = None,
            progress: bool | None = False) -> dict[str, Any]:
    """The explanation of ``trace`` (see the module docstring) as one JSON-able dict."""
    from replay.frontend.study.points import check_protocols
    from replay.pipeline.results import slowdown
    from replay.pipeline.run import load_graph, replay_graph
    from replay.plugins import load_protocol

    for f in factors:
        if not (f > 0 and math.isfinite(f)) or f == 1:
            raise ConfigError(f"--factors: {f:g} is not a useful factor (give positive numbers other than 1)")
    available = check_protocols([CC_PROTOCOL, NONE])
    if CC_PROTOCOL not in available:
        raise ConfigError(f"protocol '{CC_PROTOCOL}' (the H100 CC path every saving is measured against) "
                          "is not installed")
    protos = default_protocols() if protocols is None else [p.strip() for p in protocols if p.strip()]
    if protocols is not None and not protos:
        raise ConfigError("--protocols is empty: name at least one protocol")
    check_protocols(protos)
    if CAPTURED in protos:
        raise ConfigError(f"--protocols: '{CAPTURED}' has no model; name TEE protocols")
    protos = [p for p in dict.fromkeys(protos) if p not in (NONE, CC_PROTOCOL)]
    graph, tr = load_graph(trace)
    window = tr.metadata.get("window") if isinstance(tr.metadata.get("window"), dict) else None
    windowed = window is not None
    facts: dict[str, Facts] = {}
    info = None
    for p in [NONE, CC_PROTOCOL, *protos]:
        rep = replay_graph(graph, p, model, preset, overrides, trace_ops=tr.num_ops)
        facts[p] = facts_of(rep, p, windowed)
        if info is None:
            info = {"model": rep.result.model, "ranks": len(rep.result.ranks), "ops": rep.result.ops}
        del rep
    del graph
    none, cc = facts[NONE], facts[CC_PROTOCOL]
    over = cc.makespan_ns - none.makespan_ns
    rows = []
    for p in [CC_PROTOCOL, *protos]:
        f = facts[p]
        saves = cc.makespan_ns - f.makespan_ns
        rows.append({"protocol": p, "description": str(getattr(load_protocol(p), "description", "") or ""),
                     "makespan_ns": f.makespan_ns, "slowdown_vs_none": slowdown(f.makespan_ns, none.makespan_ns, 6),
                     "overhead_ns": int(f.makespan_ns - none.makespan_ns),
                     "saves_ns": int(saves), "saves_share_of_overhead": _share(saves, over),
                     "saves_share_of_none": _share(saves, none.makespan_ns),
                     "mechanisms": mechanisms(f, none)})
    split = cc.setup or {}
    setup = {"rule": split.get("rule"), "setup_ns": split.get("setup_ns"), "span_ns": split.get("span_ns"),
             "share": split.get("share"), "reference_setup_ns": (none.setup or {}).get("setup_ns")}
    if split and none.setup:
        extra = int(split["setup_ns"]) - int(none.setup["setup_ns"])
        setup["setup_overhead_ns"] = extra
        setup["setup_overhead_share"] = _share(extra, over) if over > 0 else None
        setup["dominates"] = bool(over > 0 and extra / over > SETUP_DOMINATES)
    if window is not None:
        setup["window"] = {"from": window.get("from"), "before_ns": window.get("before_ns")}
    meta = info["model"] or {}
    trace_source = {k: tr.metadata.get(k) for k in ("source_format", "gpu_model", "device_model", "trace_name")}
    notes = []
    note = gpu_note(trace_source, meta.get("model") or model)
    if note:
        notes.append(note)
    if tr.metadata.get("emulated"):
        notes.append("the trace was captured on an emulated GPU: kernel and host times come from a cost model")
    out = {"trace": str(trace), "trace_name": trace_source.get("trace_name"), "ops": int(info["ops"]),
           "ranks": int(info["ranks"]), "model": meta.get("model", model), "preset": meta.get("preset"),
           "params_digest": meta.get("digest"), "none_makespan_ns": none.makespan_ns, "cc_protocol": CC_PROTOCOL,
           "cc_makespan_ns": cc.makespan_ns, "overhead_ns": int(over), "overhead_share": _share(over, none.makespan_ns),
           "mechanisms": mechanisms(cc, none), "path_shifts": path_shifts(cc, none), "protocols": rows,
           "setup": setup, "notes": notes}
    if assumptions:
        out["assumptions"] = assumption_sensitivity(trace, model, preset, overrides, none.makespan_ns,
                                                    cc.makespan_ns, factors, executor, jobs, progress)
    out["summary"] = plain_words(out)
    return out


def _best_saver(d: Mapping[str, Any]) -> Mapping[str, Any] | None:
    rows = [r for r in d["protocols"] if r["protocol"] != d["cc_protocol"]]
    return max(rows, key=lambda r: r["saves_ns"], default=None)


def plain_words(d: Mapping[str, Any]) -> list[str]:
    """The explanation in three to five sentences."""
    over = d["overhead_ns"]
    out = [f"CC as shipped ('{d['cc_protocol']}') makes this workload {ms(abs(over))} "
           f"{'slower' if over >= 0 else 'faster'} ({pct(d['overhead_share'])} of the {ms(d['none_makespan_ns'])} "
           "without a TEE)."]
    top = _main_mechanism(d["mechanisms"])
    if top is not None and over > 0:
        hidden = sum(m["off_path_ns"] for m in d["mechanisms"])
        out.append(f"Most of it is {top['label']} ({ms(top['on_path_ns'])} on the critical path)"
                   + (f"; {ms(hidden)} of the added work is hidden by overlap." if hidden else "."))
    best = _best_saver(d)
    if best is not None:
        share = best["saves_share_of_overhead"]
        if best["saves_ns"] > 0:
            out.append(f"The best protocol here, {best['protocol']}, saves {ms(best['saves_ns'])}"
                       + (f" ({pct(share, sign=False)} of the CC overhead)." if share is not None else "."))
        else:
            out.append("No protocol here saves anything against it: what CC costs this workload is not what "
                       "they fix.")
        fr = next((r for r in d["protocols"] if r["protocol"] == "fastrack"), None)
        if fr is not None and fr is not best and best["saves_ns"] > 0:
            share = fr["saves_share_of_overhead"]
            out.append(f"Fastrack ('fastrack') saves {ms(fr['saves_ns'])}"
                       + (f" ({pct(share, sign=False)} of it)." if share is not None else "."))
    a = d.get("assumptions")
    if a and a["parameters"] and a["parameters"][0]["swing_ns"]:
        p = a["parameters"][0]
        lo, hi = _overhead_range(p)
        ran = [r for r in p["points"] if "overhead_ns" in r]
        where = (f"at {ms(lo)}" if len(ran) == 1 else f"between {ms(lo)} and {ms(hi)}")
        what = "an assumption" if "assumption" in p["source"].lower() else "uncertain"
        out.append(f"The answer rests most on {p['parameter']} = {_value(p)} ({what}): "
                   f"{_moved_how(p)} puts the CC overhead {where}.")
    s = d.get("setup") or {}
    if s.get("setup_overhead_share") is not None:
        out.append(f"One-time setup is {pct(s['setup_overhead_share'], sign=False)} of the CC overhead: "
                   + ("it dominates; the steady state costs less than the total says."
                      if s.get("dominates") else "it does not dominate."))
    return out


def _overhead_range(p: Mapping[str, Any]) -> tuple[int, int]:
    vals = [r["overhead_ns"] for r in p["points"] if "overhead_ns" in r]
    return (min(vals), max(vals)) if vals else (0, 0)


def _value(p: Mapping[str, Any]) -> str:
    v = p["value"]
    unit = p["unit"] if p["unit"] not in ("", "count", "ratio") else ""
    return (f"{v:,}" if isinstance(v, int) else f"{v:g}") + (f" {unit}" if unit else "")


def _moved_how(p: Mapping[str, Any]) -> str:
    if p.get("range") is not None:
        return f"moving it over its range [{p['range'][0]:g}, {p['range'][1]:g}]"
    fs = [r["factor"] for r in p["points"] if r.get("factor") is not None and "overhead_ns" in r]
    return ("moving it x" + " or x".join(f"{f:g}" for f in fs)) if fs else "moving it"


# ----------------------------------------------------------------------------- text

def format_text(d: Mapping[str, Any]) -> str:
    name = f" ({d['trace_name']})" if d.get("trace_name") else ""
    lines = [f"What CC costs {d['trace']}{name}: {d['ops']:,} ops, {d['ranks']} rank(s); model {d['model']}, "
             f"preset {d['preset']}, params {str(d.get('params_digest') or '')[:12]}",
             f"no TEE ('{NONE}') {ms(d['none_makespan_ns'])};  CC as shipped ('{d['cc_protocol']}') "
             f"{ms(d['cc_makespan_ns'])}: {ms(d['overhead_ns'], True)} ({pct(d['overhead_share'])})", "",
             "What CC adds, by mechanism (% of the no-TEE time):"]
    lines += format_mechanisms(d)
    lines += ["", f"What each protocol saves against '{d['cc_protocol']}':",
              f"  {'protocol':<24} {'makespan':>12} {'vs none':>9} {'saves':>12} {'of the CC overhead':>19}"]
    for r in d["protocols"]:
        if r["protocol"] == d["cc_protocol"]:
            continue
        lines.append(f"  {_clip(r['protocol'], 24):<24} {ms(r['makespan_ns']):>12} {r['slowdown_vs_none']:>8.3f}x "
                     f"{ms(r['saves_ns'], True):>12} {pct(r['saves_share_of_overhead'], sign=False):>19}")
    a = d.get("assumptions")
    if a is not None:
        lines += ["", f"What the answer rests on: unmeasured parameters, each moved alone "
                      f"({_how(a)}"
                      f"); CC overhead {ms(a['overhead_ns'])} at the preset:"]
        shown = [p for p in a["parameters"] if p["swing_ns"]][:TOP_ASSUMPTIONS]
        for p in shown:
            cells = ", ".join(f"{_at(r)}: {ms(r['overhead_ns'])}" for r in p["points"] if "overhead_ns" in r)
            lines.append(f"  {_clip(p['parameter'], 34):<34} {_value(p):>14}  overhead {cells}")
        still = [p for p in a["parameters"] if not p["swing_ns"]]
        if still:
            lines.append(f"  {len(still)} other assumed parameter(s) do not move the overhead on this trace "
                         "(or could not be moved; see --json)")
    s = d.get("setup") or {}
    if s.get("setup_ns") is not None:
        share = s.get("setup_overhead_share")
        lines += ["", f"One-time setup: {ms(s['setup_ns'])} of {ms(s['span_ns'])} ({pct(s['share'], sign=False)}), "
                      f"rule {s['rule']}"
                  + (f"; {ms(s['setup_overhead_ns'], True)} of the CC overhead ({pct(share, sign=False)}): "
                     + ("setup dominates" if s.get("dominates") else "setup does not dominate")
                     if "setup_overhead_ns" in s else "")]
    lines += ["", "In plain words:"] + [f"  {t}" for t in d["summary"]]
    lines += [f"note: {n}" for n in d.get("notes", [])]
    return "\n".join(lines)


def _how(a: Mapping[str, Any]) -> str:
    factors = "x" + ", x".join(f"{f:g}" for f in a["factors"])
    return f"to its preset range where it has one, else {factors}" if a["ranges_from_preset"] else factors


def _at(r: Mapping[str, Any]) -> str:
    return f"x{r['factor']:g}" if r.get("factor") is not None else f"={r['value']:g}"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "~"


# ----------------------------------------------------------------------------- figures

def figure_mechanisms(d: Mapping[str, Any], path: str, fmt: str = "png") -> None:
    """Horizontal bars per mechanism: work added and its part on the critical path (ms)."""
    from replay.frontend.figures import COLUMN_IN, PALETTE, paper_style, save

    rows = [m for m in d["mechanisms"] if m["work_added_ns"] or m["on_path_ns"]]
    with paper_style() as plt:
        fig, ax = plt.subplots(figsize=(COLUMN_IN, 0.32 * max(3, len(rows)) + 0.9))
        y = np.arange(len(rows))[::-1]
        h = 0.38
        work = [m["work_added_ns"] / 1e6 for m in rows]
        on_path = [m["on_path_ns"] / 1e6 for m in rows]
        ax.barh(y + h / 2, work, height=h, color=PALETTE[0], label="work added")
        ax.barh(y - h / 2, on_path, height=h, color=PALETTE[5], label="on the critical path")
        ax.axvline(0, color="black", linewidth=0.6)
        ax.set_yticks(y, [m["label"] for m in rows])
        ax.grid(axis="y", visible=False)
        ax.set_xlabel(f"ms (no TEE: {ms(d['none_makespan_ns'])})")
        ax.set_title(f"what CC adds: {ms(d['overhead_ns'], True)} ({pct(d['overhead_share'])})")
        ax.legend(loc="lower right")
        save(fig, path, fmt)


def figure_protocols(d: Mapping[str, Any], path: str, fmt: str = "png") -> None:
    """The CC overhead of each protocol against no TEE (ms), the saving against the CC path written
    at each bar: the overhead itself, not the makespan, so a few percent is not a sliver."""
    from replay.frontend.figures import COLUMN_IN, GREY, PALETTE, paper_style, save

    rows = d["protocols"]
    with paper_style() as plt:
        fig, ax = plt.subplots(figsize=(COLUMN_IN, 0.3 * max(3, len(rows)) + 0.9))
        y = np.arange(len(rows))[::-1]
        vals = [r["overhead_ns"] / 1e6 for r in rows]
        cols = [GREY if r["protocol"] == d["cc_protocol"] else PALETTE[2] for r in rows]
        ax.barh(y, vals, height=0.6, color=cols)
        top = max([abs(v) for v in vals] + [1e-9])
        for yy, v, r in zip(y, vals, rows):
            text = "CC as shipped" if r["protocol"] == d["cc_protocol"] else f"saves {ms(r['saves_ns'])}"
            ax.text(max(v, 0) + 0.02 * top, yy, text, va="center", ha="left", fontsize=6)
        ax.set_xlim(min(0, min(vals)) * 1.1, top * 1.6)
        ax.set_yticks(y, [_clip(r["protocol"], 22) for r in rows])
        ax.grid(axis="y", visible=False)
        ax.set_xlabel(f"CC overhead vs no TEE (ms; no TEE {ms(d['none_makespan_ns'])})")
        save(fig, path, fmt)


def figure_assumptions(d: Mapping[str, Any], path: str, fmt: str = "png") -> None:
    """A tornado of the CC overhead: each assumed parameter's low and high value (ms)."""
    from replay.frontend.figures import COLUMN_IN, PALETTE, paper_style, save

    a = d["assumptions"]
    params = [p for p in a["parameters"] if p["swing_ns"]][:TOP_ASSUMPTIONS]
    base = a["overhead_ns"] / 1e6
    with paper_style() as plt:
        fig, ax = plt.subplots(figsize=(COLUMN_IN, 0.3 * max(3, len(params)) + 0.9))
        y = np.arange(len(params))[::-1]
        for yy, p in zip(y, params):
            for r in p["points"]:
                if "overhead_ns" not in r:
                    continue
                v = r["overhead_ns"] / 1e6
                low = r["value"] < p["value"]
                ax.barh(yy, v - base, left=base, height=0.6, color=PALETTE[0] if low else PALETTE[5])
        ax.axvline(base, color="black", linewidth=0.6)
        ax.set_yticks(y, [_clip(p["parameter"], 28) for p in params])
        ax.grid(axis="y", visible=False)
        ax.set_xlabel("CC overhead (ms); line: at the preset")
        from matplotlib.patches import Patch

        ax.legend([Patch(color=PALETTE[0]), Patch(color=PALETTE[5])], ["lower value", "higher value"],
                  loc="lower right")
        save(fig, path, fmt)


FIGURES = (("mechanisms", "What CC adds, by mechanism", figure_mechanisms),
           ("protocols", "CC overhead per protocol", figure_protocols),
           ("assumptions", "What the answer rests on", figure_assumptions))


def _figures_for(d: Mapping[str, Any]):
    for key, title, fn in FIGURES:
        if key == "assumptions" and not any(p["swing_ns"] for p in (d.get("assumptions") or {}).get("parameters", [])):
            continue
        yield key, title, fn


# ----------------------------------------------------------------------------- reports

def report_format(path: str) -> str:
    fmt = str(path).rsplit(".", 1)[-1].lower() if "." in str(path) else ""
    if fmt not in REPORT_FORMATS:
        raise ConfigError(f"-o: unknown report format '{fmt}' (use .html or .md)")
    return "html" if fmt in ("html", "htm") else "md"


def figure_paths(path: str) -> dict[str, str]:
    """Where a Markdown report's figures go: ``report.md`` -> ``report.mechanisms.png``, ..."""
    p = Path(path)
    return {key: str(p.with_name(f"{p.stem}.{key}.png")) for key, _t, _f in FIGURES}


def _sections(d: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]] | None, list[str]]]:
    """(title, paragraphs, table rows with a header first, notes) of every report section."""
    mech = [["mechanism", "work added", "% no TEE", "on the critical path", "% no TEE", "hidden by overlap"]]
    for m in d["mechanisms"]:
        if m["work_added_ns"] or m["on_path_ns"]:
            mech.append([m["label"], ms(m["work_added_ns"], True), pct(m["work_share"]), ms(m["on_path_ns"], True),
                         pct(m["on_path_share"]), ms(m["off_path_ns"])])
    mech.append(["total (makespan change)", "", "", ms(d["overhead_ns"], True), pct(d["overhead_share"]), ""])
    moved = [p for p in d["path_shifts"] if p["on_path_ns"]]
    mnotes = [("The critical path moved: " + ", ".join(
        f"{p['label']} {ms(p['on_path_ns'], True)}" + (f" (its work {ms(p['work_added_ns'], True)})"
                                                        if p["work_added_ns"] else "") for p in moved)
               + ("." if any(p["work_added_ns"] for p in moved)
                  else ". No host or GPU work was added: CC changed which side bounds the run."))] if moved else []
    prot = [["protocol", "makespan", "vs none", "saves", "of the CC overhead"]]
    for r in d["protocols"]:
        if r["protocol"] != d["cc_protocol"]:
            prot.append([r["protocol"], ms(r["makespan_ns"]), f"{r['slowdown_vs_none']:.3f}x", ms(r["saves_ns"], True),
                         pct(r["saves_share_of_overhead"], sign=False)])
    out = [("In plain words", list(d["summary"]), None, list(d.get("notes", []))),
           ("What CC adds, by mechanism",
            [f"No TEE ('{NONE}'): {ms(d['none_makespan_ns'])}. CC as shipped ('{d['cc_protocol']}'): "
             f"{ms(d['cc_makespan_ns'])}, {ms(d['overhead_ns'], True)} ({pct(d['overhead_share'])}). Work added is "
             "the busy time of the mechanism's operations over the whole run; the critical-path column is "
             "its change on the path that sets the makespan, and adds up to the makespan change."], mech, mnotes),
           (f"What each protocol saves against '{d['cc_protocol']}'", [], prot,
            [f"{r['protocol']}: {r['description']}" for r in d["protocols"] if r["description"]])]
    a = d.get("assumptions")
    if a is not None:
        how = _how(a)
        tab = [["parameter", "preset value", "overhead at each value", "source"]]
        for p in a["parameters"]:
            if p["swing_ns"]:
                tab.append([p["parameter"], _value(p), ", ".join(f"{_at(r)}: {ms(r['overhead_ns'])}"
                                                                  for r in p["points"] if "overhead_ns" in r),
                            p["source"]])
        still = [p["parameter"] for p in a["parameters"] if not p["swing_ns"]]
        out.append(("What the answer rests on",
                    [f"Every parameter whose preset source says 'assumption' or that has an uncertainty range, "
                     f"moved alone ({how}) under "
                     f"'{NONE}' and '{d['cc_protocol']}'; the CC overhead is {ms(a['overhead_ns'])} at the preset."],
                    tab, [f"Do not move the overhead here: {', '.join(still)}."] if still else []))
    s = d.get("setup") or {}
    if s.get("setup_ns") is not None:
        text = f"{ms(s['setup_ns'])} of {ms(s['span_ns'])} ({pct(s['share'], sign=False)}), rule {s['rule']}."
        if "setup_overhead_ns" in s:
            text += (f" {ms(s['setup_overhead_ns'], True)} of the CC overhead "
                     f"({pct(s.get('setup_overhead_share'), sign=False)}): setup "
                     + ("dominates." if s.get("dominates") else "does not dominate."))
        out.append(("One-time setup", [text], None, []))
    return out


def _png_b64(fn, d) -> str:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        f = Path(tmp) / "fig.png"
        fn(d, str(f), "png")
        return base64.b64encode(f.read_bytes()).decode("ascii")


CSS = ("body{font-family:sans-serif;max-width:52em;margin:2em auto;padding:0 1em;line-height:1.4}"
       "table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #bbb;padding:.2em .5em;"
       "text-align:right}td:first-child,th:first-child{text-align:left}figure{margin:1em 0}"
       "img{max-width:100%}.note{color:#555;font-size:.9em}")


def render_html(d: Mapping[str, Any]) -> str:
    """A self-contained, well-formed (XML-parsable) HTML5 page with the figures embedded."""
    e = html.escape
    title = f"What CC costs {Path(str(d['trace'])).name}"
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8"/>',
             f"<title>{e(title)}</title>", f"<style>{CSS}</style>", "</head>", "<body>", f"<h1>{e(title)}</h1>",
             f"<p>{e(str(d['trace']))}: {d['ops']:,} ops, {d['ranks']} rank(s); model {e(str(d['model']))}, "
             f"preset {e(str(d['preset']))}, params {e(str(d.get('params_digest') or '')[:12])}</p>"]
    figs = {key: (t, fn) for key, t, fn in _figures_for(d)}
    fig_of = {"What CC adds, by mechanism": "mechanisms", "What the answer rests on": "assumptions"}
    for title_, paras, table, notes in _sections(d):
        parts.append(f"<h2>{e(title_)}</h2>")
        parts += [f"<p>{e(p)}</p>" for p in paras]
        if table:
            parts.append("<table>")
            parts.append("<tr>" + "".join(f"<th>{e(c)}</th>" for c in table[0]) + "</tr>")
            parts += ["<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in table[1:]]
            parts.append("</table>")
        parts += [f'<p class="note">{e(n)}</p>' for n in notes]
        key = fig_of.get(title_) or ("protocols" if title_.startswith("What each protocol") else None)
        if key in figs:
            t, fn = figs[key]
            parts.append(f'<figure><img alt="{e(t)}" src="data:image/png;base64,{_png_b64(fn, d)}"/>'
                         f"<figcaption>{e(t)}</figcaption></figure>")
    parts += ["</body>", "</html>", ""]
    return "\n".join(parts)


def render_markdown(d: Mapping[str, Any], figures: Mapping[str, str] | None = None) -> str:
    """Markdown; ``figures``: {key: file name} of the figures written beside it."""
    def cell(c: str) -> str:
        return str(c).replace("|", "\\|")

    parts = [f"# What CC costs {Path(str(d['trace'])).name}", "",
             f"{d['trace']}: {d['ops']:,} ops, {d['ranks']} rank(s); model {d['model']}, preset {d['preset']}, "
             f"params {str(d.get('params_digest') or '')[:12]}", ""]
    fig_of = {"What CC adds, by mechanism": "mechanisms", "What the answer rests on": "assumptions"}
    for title_, paras, table, notes in _sections(d):
        parts += [f"## {title_}", ""]
        for p in paras:
            parts += [p, ""]
        if table:
            parts.append("| " + " | ".join(cell(c) for c in table[0]) + " |")
            parts.append("|" + "|".join([":---"] + ["---:"] * (len(table[0]) - 1)) + "|")
            parts += ["| " + " | ".join(cell(c) for c in row) + " |" for row in table[1:]]
            parts.append("")
        for n in notes:
            parts += [f"*{n}*", ""]
        key = fig_of.get(title_) or ("protocols" if title_.startswith("What each protocol") else None)
        if figures and key in figures:
            parts += [f"![{title_}]({figures[key]})", ""]
    return "\n".join(parts)


def write_report(d: Mapping[str, Any], path: str) -> list[str]:
    """Write the report (and a Markdown report's figures), each file atomically; returns the paths."""
    from fastrack_core.atomic import write_text_atomic

    if report_format(path) == "html":
        write_text_atomic(path, render_html(d))
        return [str(path)]
    paths = figure_paths(path)
    written = {}
    for key, _t, fn in _figures_for(d):
        fn(d, paths[key], "png")
        written[key] = Path(paths[key]).name
    write_text_atomic(path, render_markdown(d, written))
    return [*(paths[k] for k in written), str(path)]


@click.command("explain")
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--protocols", default=None, shell_complete=complete_protocols,
              help="Comma-separated protocols to weigh against the CC path (default: every registered protocol "
                   "but none, baseline and aliases; replay list protocols).")
@model_options
@click.option("--factors", default="0.5,2", show_default=True,
              help="How far to move each assumed parameter that has no range in the preset.")
@click.option("--assumptions/--no-assumptions", default=True, show_default=True,
              help="Replay each assumed parameter moved alone (2 replays per value) to say how far it moves the answer.")
@click.option("-o", "--output", type=click.Path(dir_okay=False),
              help="Write a report with its figures: .html (one self-contained file) or .md (figures beside it).")
@executor_options
@json_option
@overwrite_option
@reports_errors
def command(trace, protocols, model, preset, overrides, factors, assumptions, output, executor, jobs, progress,
            as_json, overwrite):
    """What CC costs TRACE, by mechanism; what each protocol saves; what the answer rests on."""
    from replay.frontend.study.sensitivity import parse_factors

    outputs = [output]
    if output:
        if report_format(output) == "md":
            outputs += list(figure_paths(output).values())
    check_outputs(outputs, [trace], overwrite)
    d = explain(trace, None if protocols is None else protocols.split(","), model, preset, overrides,
                parse_factors(factors), assumptions, executor, jobs, progress_default(progress))
    if output:
        written = write_report(d, output)
    click.echo(json.dumps(d, sort_keys=True) if as_json else format_text(d))
    if output:
        click.echo(f"wrote {', '.join(written)}", err=as_json)


__all__ = ["CC_PROTOCOL", "MECHANISMS", "explain", "format_text", "reference_with_facts", "render_html",
           "render_markdown", "run_summary", "summary_line", "write_report"]
