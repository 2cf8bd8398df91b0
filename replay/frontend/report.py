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
        lines.append("per step:")
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
    busy = sorted(d["resources"], key=lambda r: -r["utilization"])[:8]
    lines.append("busiest resources:")
    for r in busy:
        lines.append(f"  {r['name']:<36} busy {fmt_ns(r['busy_ns']):>14}  {100 * r['utilization']:5.1f}%  ops {r['ops']:,}")
    for note in d.get("notes", []):
        lines.append(f"note: {note}")
    return "\n".join(lines)
