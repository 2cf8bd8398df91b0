"""``replay compare``: one trace under several protocols, side by side.

The trace's graph is built once; every protocol is applied to that same graph under the same
model and preset, so the differences are the protocols' alone.
"""

from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

import click

from fastrack_core.cli_support import reports_errors
from fastrack_core.errors import ConfigError
from replay.whatif.dataparallel import DEFAULT_BUCKET_MB
from replay.graph import Category
from replay.names import NONE
from replay.frontend.options import (
    check_outputs, complete_protocols, data_parallel_options, json_option, model_options, overwrite_option, scale_option,
    serving_option,
)
from replay.plugins import DEFAULT_MODEL
from replay.frontend.report import fmt_ns

DEFAULT_PROTOCOLS = f"{NONE},baseline,fastrack"


def compare(trace: str, protocols: Sequence[str], model: str = DEFAULT_MODEL, preset: str | None = None,
            overrides: Sequence[str] = (), data_parallel: int | None = None,
            bucket_mb: float = DEFAULT_BUCKET_MB, scales: Mapping[str, float] | None = None,
            serving: bool = False) -> dict[str, Any]:
    """Replay ``trace`` under each protocol. Returns {'trace', 'rows': [...]} with slowdowns
    relative to ``none`` (added to the run if missing, as the reference). ``scales``: what-if
    duration factors (:mod:`replay.whatif.scale`), the same for every protocol. Rows carry serving
    metrics (:mod:`replay.pipeline.serving`) when the trace has request markers; ``serving`` demands them."""
    from replay.pipeline.run import load_graph, replay_graph
    from replay.pipeline.serving import has_request_markers, require_markers, serving_metrics
    from replay.whatif.scale import check_scales

    scales = check_scales(scales)

    protocols = [p.strip() for p in protocols if p.strip()]
    if not protocols:
        raise ConfigError("--protocols is empty: name at least one protocol")
    graph, tr = load_graph(trace)
    if serving:
        require_markers(graph, str(trace))
    serving = has_request_markers(graph)
    if data_parallel is not None:  # what-if: the single-GPU trace on N DDP ranks (docs/multi-gpu.md)
        from replay.whatif.dataparallel import data_parallel_graph

        graph = data_parallel_graph(graph, data_parallel, bucket_mb, protocols)
    results, served = {}, {}
    for p in dict.fromkeys([NONE, *protocols]):
        rep = replay_graph(graph, p, model, preset, overrides, trace_ops=tr.num_ops, scales=scales)
        results[p] = rep.result
        if serving:
            served[p] = serving_metrics(rep.graph, rep.schedule)
        del rep  # (its graph and schedule are not needed while the next protocol replays)
    dp = {"world": data_parallel, "bucket_mb": bucket_mb} if data_parallel is not None else None
    return compare_report(trace, {p: results[p] for p in protocols}, results[NONE], dp, served or None)


def compare_report(trace: Any, results: Mapping[str, Any], reference: Any,
                   data_parallel: Mapping[str, Any] | None = None,
                   served: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The report of :func:`compare` from replay results ({protocol: ReplayResult}, in row order)
    and the ``none`` replay (``reference``: the reference of every slowdown, also drawn as the first
    bar of the chart); also used by ``fastrack.compare``. ``data_parallel``: {world, bucket_mb} of a
    data-parallel what-if. ``served``: serving metrics per protocol, ``none`` included (rows then
    carry them and their overhead against ``none``)."""
    from replay.pipeline.results import JSON_DIGITS, slowdown
    from replay.pipeline.serving import overhead

    reference_ns = reference.makespan_ns if reference is not None else None
    dicts = {p: r.to_dict() for p, r in results.items()}
    rows = []
    for p, r in dicts.items():
        rows.append({
            "protocol": p,
            "makespan_ns": r["makespan_ns"],
            "slowdown_vs_none": slowdown(r["makespan_ns"], reference_ns, JSON_DIGITS) if reference_ns else None,
            "critical_path_ns": r["critical_path_ns"],
            "nodes": r["nodes"],
        })
        if served:
            rows[-1]["serving"] = served[p]
            if served[p]["complete_requests"] and served[NONE]["complete_requests"]:
                rows[-1]["serving"]["overhead_vs_none"] = overhead(served[p], served[NONE])
    first = next(iter(dicts.values()))
    return {"trace": str(trace), "model": first.get("model"), "preset": first.get("preset"),
            "params_digest": first.get("params_digest"), "params": first.get("params"),
            "scales": dict(first.get("scales") or {}), "rows": rows,
            "reference": None if reference is None else {
                "protocol": NONE, "makespan_ns": reference.makespan_ns,
                "critical_path_ns": dict(reference.critical_path_ns)},
            "data_parallel": dict(data_parallel) if data_parallel else None}


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
    from replay.pipeline.serving import format_serving

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
    """Stacked bars, one per protocol (the ``none`` reference first, even when not asked for):
    critical-path time per category in ms, the makespan and the slowdown written above each bar,
    large segments labelled, the legend in stack order (top segment first)."""
    from replay.frontend.figures import COLUMN_IN, GREY, check_format, colours, paper_style, save, text_colour

    fmt = check_format(path, "--plot")
    rows = list(d["rows"])
    ref = d.get("reference")
    if ref and not any(r["protocol"] == NONE for r in rows):
        rows.insert(0, {"protocol": NONE, "makespan_ns": ref["makespan_ns"], "slowdown_vs_none": 1.0,
                        "critical_path_ns": ref["critical_path_ns"]})
    cats = [c.label for c in Category if any(r["critical_path_ns"].get(c.label) for r in rows)]
    names = [r["protocol"] for r in rows]
    totals = [sum(r["critical_path_ns"].get(c, 0) for c in cats) / 1e6 for r in rows]
    top = max(totals) if totals and max(totals) > 0 else 1.0
    palette = dict(zip([c.label for c in Category], colours(len(Category) - 1) + [GREY]))
    with paper_style() as plt:
        width = max(COLUMN_IN, 0.42 * len(names) + 1.9)
        fig, ax = plt.subplots(figsize=(width, 2.7))
        bottom = [0.0] * len(names)
        handles = []
        for c in cats:
            vals = [r["critical_path_ns"].get(c, 0) / 1e6 for r in rows]
            bars = ax.bar(names, vals, bottom=bottom, width=0.7, color=palette[c], label=c.replace("_", " "),
                          edgecolor="white", linewidth=0.4)
            handles.append(bars)
            for b, v, y0 in zip(bars, vals, bottom):
                if v >= 0.08 * top:  # label a segment only where the number fits inside it
                    ax.text(b.get_x() + b.get_width() / 2, y0 + v / 2, f"{v:.3g}", ha="center", va="center",
                            fontsize=6, color=text_colour(palette[c]))
            bottom = [b + v for b, v in zip(bottom, vals)]
        for i, r in enumerate(rows):
            sd = r.get("slowdown_vs_none")
            label = f"{totals[i]:.3g}" + (f"\n{sd:.2f}x" if sd else "")
            ax.text(i, totals[i] + 0.015 * top, label, ha="center", va="bottom", fontsize=6.5)
        ax.set_ylim(0, top * 1.22)
        ax.set_ylabel("critical-path time (ms)")
        dp = d.get("data_parallel")
        ax.set_xlabel(f"protocol ({dp['world']} GPUs, data-parallel what-if)" if dp else "protocol")
        ax.grid(axis="x", visible=False)
        trace = str(d["trace"]).rsplit("/", 1)[-1]
        gpus = f", {dp['world']} GPUs" if dp else ""
        ax.set_title(f"{trace} ({d.get('preset')}{gpus}); above bars: makespan (ms), slowdown vs none", fontsize=7)
        # legend in stack order: the top segment first, as the eye reads the bars
        ax.legend(handles[::-1], [h.get_label() for h in handles[::-1]], loc="upper left", bbox_to_anchor=(1.01, 1),
                  handlelength=1.2, title="critical path")
        if len(names) > 4 or max(len(n) for n in names) > 9:
            plt.setp(ax.get_xticklabels(), rotation=30, ha="right", rotation_mode="anchor")
        save(fig, path, fmt)


@click.command("compare")
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--protocols", default=DEFAULT_PROTOCOLS, show_default=True, shell_complete=complete_protocols,
              help="Comma-separated protocol names (replay list protocols).")
@model_options
@json_option
@click.option("--plot", type=click.Path(dir_okay=False),
              help="Write a stacked critical-path chart, one bar per protocol and the none reference (.png, .svg, .pdf).")
@data_parallel_options
@scale_option
@serving_option
@overwrite_option
@reports_errors
def command(trace, protocols, model, preset, overrides, as_json, plot, data_parallel, bucket_mb, scale, serving,
            overwrite):
    """Replay TRACE under several protocols and compare makespan, slowdown and breakdown."""
    from replay.whatif.scale import parse_scales

    check_outputs([plot], [trace], overwrite)
    if plot:
        from replay.frontend.figures import check_format

        check_format(plot, "--plot")  # before the replays
    d = compare(trace, protocols.split(","), model, preset, overrides, data_parallel, bucket_mb, parse_scales(scale),
                serving)
    if plot:
        plot_breakdown(d, plot)
    click.echo(json.dumps(d, sort_keys=True) if as_json else format_table(d))
    if plot:
        click.echo(f"wrote {plot} ({len(d['rows']) + (not any(r['protocol'] == NONE for r in d['rows']))} bars)",
                   err=as_json)
