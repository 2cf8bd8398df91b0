"""Human-readable text of replay results (the JSON is the machine-readable form)."""

from __future__ import annotations

from typing import Any


def fmt_ns(ns: int | float) -> str:
    ns = float(ns)
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if abs(ns) >= scale:
            return f"{ns / scale:.3f} {unit}"
    return f"{ns:.0f} ns"


def fmt_pct(x: float | None) -> str:
    return "n/a" if x is None else f"{100 * x:+.2f}%"


def format_summary(d: dict[str, Any]) -> str:
    lines = [f"trace      {d.get('trace', '')}", f"protocol   {d['protocol']}"]
    if d.get("preset"):
        lines.append(f"model      {d.get('model')}  preset {d['preset']}  params {d.get('params_digest', '')[:12]}")
    lines.append(f"ops        {d['ops']:,} ({d['nodes']:,} nodes after transform), ranks {len(d['ranks'])}")
    lines.append(f"makespan   {fmt_ns(d['makespan_ns'])}   captured span {fmt_ns(d['captured_span_ns'])}"
                 f"   ({fmt_pct(d.get('error_vs_captured'))} vs captured)")
    if d.get("emulated"):
        lines.append("note: the trace was captured on an emulated GPU: kernel and host times come from a cost model")
    if d.get("slowdown_vs_none") is not None:
        lines.append(f"slowdown   {d['slowdown_vs_none']:.3f}x vs no TEE ('{d['reference']['protocol']}': "
                     f"{fmt_ns(d['reference']['makespan_ns'])},"
                     f" same model and preset)")
    if len(d["per_rank"]) > 1:
        lines.append("per rank:")
        for r in d["per_rank"]:
            lines.append(f"  rank {r['rank']:<4} {fmt_ns(r['makespan_ns']):>14}  captured {fmt_ns(r['captured_span_ns']):>14}"
                         f"  {fmt_pct(r['error_vs_captured'])}")
    if d["steps"]:
        lines.append("per step (each from its first op to its last; steps overlap, so they may sum to more "
                     "than the makespan):" if _steps_overlap(d) else "per step:")
        for s in d["steps"][:20]:
            cap = s["captured_span_ns"]
            err = (s["makespan_ns"] - cap) / cap if cap else None
            lines.append(f"  rank {s['rank']} step {s['step']:<5} {fmt_ns(s['makespan_ns']):>14}  captured "
                         f"{fmt_ns(cap):>14}  {fmt_pct(err)}")
        if len(d["steps"]) > 20:
            lines.append(f"  ... {len(d['steps']) - 20} more (see --json)")
    total = max(1, d["makespan_ns"])
    lines.append("critical path:")
    for k, v in sorted(d["critical_path_ns"].items(), key=lambda kv: -kv[1]):
        if v:
            lines.append(f"  {k:<12} {fmt_ns(v):>14}  {100 * v / total:5.1f}%")
    if d.get("cc"):
        cc = d["cc"]
        lines.append(f"what CC adds ('{cc['cc_protocol']}' vs '{d['reference']['protocol']}', "
                     f"% of the no-TEE time):")
        from replay.frontend.explain import format_mechanisms

        lines += format_mechanisms(cc)
    busy = sorted(d["resources"], key=lambda r: -r["utilization"])[:8]
    lines.append("busiest resources:")
    for r in busy:
        lines.append(f"  {r['name']:<36} busy {fmt_ns(r['busy_ns']):>14}  {100 * r['utilization']:5.1f}%  ops {r['ops']:,}")
    if d.get("setup"):
        lines.append(format_setup_line(d["setup"]))
    for note in d.get("notes", []):
        lines.append(f"note: {note}")
    from replay.frontend.explain import gpu_note

    gpu = gpu_note(d.get("trace_source"), (d.get("model") or {}).get("model") if isinstance(d.get("model"), dict)
                   else d.get("model"))
    if gpu:
        lines.append(f"note: {gpu}")
    if d.get("cc"):
        if d["cc"].get("note"):
            lines.append(f"note: {d['cc']['note']}")
        lines.append(d["cc"]["summary"][0].upper() + d["cc"]["summary"][1:] + " (why: replay explain)")
    return "\n".join(lines)


def _steps_overlap(d: dict[str, Any]) -> bool:
    """Whether the steps' spans of one rank add up to more than the makespan (a step's GPU work
    still runs while the host issues the next one)."""
    by_rank: dict[int, int] = {}
    for s in d["steps"]:
        by_rank[s["rank"]] = by_rank.get(s["rank"], 0) + int(s["makespan_ns"])
    return any(v > d["makespan_ns"] for v in by_rank.values())


def setup_report(split: dict[str, Any], ref, makespan_ns: int, window: dict[str, Any] | None) -> dict[str, Any]:
    """The JSON ``setup`` of a replay: the one-time setup of the replayed span
    (:func:`replay.pipeline.results.setup_metrics`), with a reference replay (protocol ``none``)
    also the setup's part of the CC overhead, and the capture window's left-out figures."""
    out = dict(split)
    if ref is not None and ref.setup is not None:
        overhead = int(makespan_ns) - int(ref.makespan_ns)
        extra = int(split["setup_ns"]) - int(ref.setup["setup_ns"])
        out["reference_setup_ns"] = int(ref.setup["setup_ns"])
        out["cc_overhead_ns"] = overhead
        out["setup_overhead_ns"] = extra
        out["setup_overhead_share"] = round(extra / overhead, 6) if overhead > 0 else None
    if window is not None:
        out["window"] = dict(window)
    return out


def format_setup_line(s: dict[str, Any]) -> str:
    """``setup      X of Y span (Z%), rule R[; W of the CC overhead V (U%)]``."""
    line = (f"setup      {fmt_ns(s['setup_ns'])} of {fmt_ns(s['span_ns'])} span ({100 * s['share']:.1f}%), "
            f"rule {s['rule']}")
    if "cc_overhead_ns" in s:
        share = s.get("setup_overhead_share")
        line += (f"; {fmt_ns(s['setup_overhead_ns'])} of the CC overhead {fmt_ns(s['cc_overhead_ns'])}"
                 f" ({'n/a' if share is None else f'{100 * share:.1f}%'})")
    w = s.get("window")
    if w:
        line += f"; capture window from {w.get('from')} left out {fmt_ns(int(w.get('before_ns') or 0))} before it"
    return line
