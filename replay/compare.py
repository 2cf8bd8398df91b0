"""``replay compare``: one trace under several protocols, side by side.

The trace's graph is built once; every protocol is applied to that same graph under the same
model and preset, so the differences are the protocols' alone.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

import click

from fastrack.atomic import atomic_path
from fastrack.cli_support import reports_errors
from fastrack.errors import ConfigError
from replay.dataparallel import DEFAULT_BUCKET_MB
from replay.graph import Category
from replay.names import NONE
from replay.options import data_parallel_options, json_option, model_options, scale_option, serving_option
from replay.plugins import DEFAULT_MODEL
from replay.report import fmt_ns

DEFAULT_PROTOCOLS = f"{NONE},baseline,fastrack"


def compare(trace: str, protocols: Sequence[str], model: str = DEFAULT_MODEL, preset: str | None = None,
            overrides: Sequence[str] = (), data_parallel: int | None = None,
            bucket_mb: float = DEFAULT_BUCKET_MB, scales: Mapping[str, float] | None = None,
            serving: bool = False) -> dict[str, Any]:
    """Replay ``trace`` under each protocol. Returns {'trace', 'rows': [...]} with slowdowns
    relative to ``none`` (added to the run if missing, as the reference). ``scales``: what-if
    duration factors (:mod:`replay.whatif`), the same for every protocol. Rows carry serving
    metrics (:mod:`replay.serving`) when the trace has request markers; ``serving`` demands them."""
    from replay.results import JSON_DIGITS, slowdown
    from replay.run import load_graph, replay_graph
    from replay.serving import has_request_markers, overhead, require_markers, serving_metrics
    from replay.whatif import check_scales

    scales = check_scales(scales)

    protocols = [p.strip() for p in protocols if p.strip()]
    if not protocols:
        raise ConfigError("--protocols is empty: name at least one protocol")
    graph, tr = load_graph(trace)
    if serving:
        require_markers(graph, str(trace))
    serving = has_request_markers(graph)
    if data_parallel is not None:  # what-if: the single-GPU trace on N DDP ranks (docs/multi-gpu.md)
        from replay.dataparallel import data_parallel_graph

        graph = data_parallel_graph(graph, data_parallel, bucket_mb, protocols)
    results, served = {}, {}
    for p in dict.fromkeys([NONE, *protocols]):
        rep = replay_graph(graph, p, model, preset, overrides, trace_ops=tr.num_ops, scales=scales)
        results[p] = rep.result.to_dict()
        if serving:
            served[p] = serving_metrics(rep.graph, rep.schedule)
    ref = results[NONE]["makespan_ns"]
    rows = []
    for p in protocols:
        r = results[p]
        rows.append({
            "protocol": p,
            "makespan_ns": r["makespan_ns"],
            "slowdown_vs_none": slowdown(r["makespan_ns"], ref, JSON_DIGITS),
            "critical_path_ns": r["critical_path_ns"],
            "nodes": r["nodes"],
        })
        if serving:
            rows[-1]["serving"] = served[p]
            if served[p]["complete_requests"] and served[NONE]["complete_requests"]:
                rows[-1]["serving"]["overhead_vs_none"] = overhead(served[p], served[NONE])
    first = results[protocols[0]]
    return {"trace": str(trace), "model": first.get("model"), "preset": first.get("preset"),
            "params_digest": first.get("params_digest"), "params": first.get("params"), "scales": dict(scales),
            "rows": rows}


def format_table(d: dict[str, Any]) -> str:
    cats = [c.label for c in Category if any(r["critical_path_ns"].get(c.label) for r in d["rows"])]
    head = f"{'protocol':<18} {'makespan':>14} {'vs none':>9}  " + "  ".join(f"{c:>12}" for c in cats)
    lines = [f"trace {d['trace']}   model {d.get('model')}  preset {d.get('preset')}  "
             f"params {str(d.get('params_digest') or '')[:12]}"
             + (f"  scaled {', '.join(f'{k} x{v:g}' for k, v in d['scales'].items())}" if d.get("scales") else ""),
             head, "-" * len(head)]
    for r in d["rows"]:
        sd = r["slowdown_vs_none"]
        lines.append(f"{r['protocol']:<18} {fmt_ns(r['makespan_ns']):>14} {('%.2fx' % sd) if sd else 'n/a':>9}  "
                     + "  ".join(f"{fmt_ns(r['critical_path_ns'].get(c, 0)):>12}" for c in cats))
    lines.append("columns after 'vs none': time on the critical path by category")
    if any("serving" in r for r in d["rows"]):
        lines += ["", serving_table(d)]
    return "\n".join(lines)


def serving_table(d: dict[str, Any]) -> str:
    """Serving metrics per protocol (mean TTFT, mean TPOT, output tokens/s, each vs none), then
    the change of the TTFT and TPOT breakdowns against ``none`` by mechanism."""
    from replay.serving import format_serving

    head = f"{'protocol':<18} {'TTFT mean':>12} {'vs none':>8} {'TPOT mean':>12} {'vs none':>8} {'tokens/s':>11} {'vs none':>8}"
    lines = [head, "-" * len(head)]

    def pct(x):
        return "n/a" if x is None else f"{100 * x:+.1f}%"

    for r in d["rows"]:
        m = r.get("serving") or {}
        if not m.get("complete_requests"):
            lines.append(f"{r['protocol']:<18} (no complete request)")
            continue
        o = m.get("overhead_vs_none", {})
        tput = m["output_tokens_per_s"]
        lines.append(f"{r['protocol']:<18} {fmt_ns(m['ttft_ns']['mean']):>12} {pct(o.get('ttft_mean')):>8} "
                     f"{fmt_ns(m['tpot_ns']['mean'] or 0):>12} {pct(o.get('tpot_mean')):>8} "
                     f"{'n/a' if tput is None else f'{tput:,.1f}':>11} {pct(o.get('output_tokens_per_s')):>8}")
    for r in d["rows"]:
        m = r.get("serving") or {}
        if m.get("overhead_vs_none") and r["protocol"] != NONE:
            lines.append(f"{r['protocol']}:")
            lines += ["  " + ln for ln in format_serving(m, m["overhead_vs_none"]).splitlines()[4:]]
    return "\n".join(lines)


def plot_breakdown(d: dict[str, Any], path: str) -> None:
    """Stacked bars: critical-path time per category, one bar per protocol."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cats = [c.label for c in Category if any(r["critical_path_ns"].get(c.label) for r in d["rows"])]
    names = [r["protocol"] for r in d["rows"]]
    fig, ax = plt.subplots(figsize=(max(5, 1.2 * len(names) + 2), 4))
    bottom = [0.0] * len(names)
    for c in cats:
        vals = [r["critical_path_ns"].get(c, 0) / 1e6 for r in d["rows"]]
        ax.bar(names, vals, bottom=bottom, label=c)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_ylabel("critical path (ms)")
    ax.set_title(f"{d['trace'].rsplit('/', 1)[-1]} - {d.get('preset')}", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right")
    fig.tight_layout()
    fmt = path.rsplit(".", 1)[-1].lower()
    if fmt not in ("png", "svg", "pdf"):
        raise ConfigError(f"--plot {path}: unknown image format '{fmt}' (use .png, .svg or .pdf)")
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format=fmt, dpi=120)
    plt.close(fig)


@click.command("compare")
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--protocols", default=DEFAULT_PROTOCOLS, show_default=True, help="Comma-separated protocol names.")
@model_options
@json_option
@click.option("--plot", type=click.Path(dir_okay=False), help="Write a stacked breakdown chart (PNG/SVG).")
@data_parallel_options
@scale_option
@serving_option
@reports_errors
def command(trace, protocols, model, preset, overrides, as_json, plot, data_parallel, bucket_mb, scale, serving):
    """Replay TRACE under several protocols and compare makespan, slowdown and breakdown."""
    from replay.whatif import parse_scales

    d = compare(trace, protocols.split(","), model, preset, overrides, data_parallel, bucket_mb, parse_scales(scale),
                serving)
    if plot:
        plot_breakdown(d, plot)
    click.echo(json.dumps(d, sort_keys=True) if as_json else format_table(d))
