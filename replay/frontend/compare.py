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
    range_jobs_option, serving_option,
)
from replay.plugins import DEFAULT_MODEL
from replay.frontend.report import fmt_ns

DEFAULT_PROTOCOLS = f"{NONE},baseline,fastrack"


def compare(trace: str, protocols: Sequence[str], model: str = DEFAULT_MODEL, preset: str | None = None,
            overrides: Sequence[str] = (), data_parallel: int | None = None,
            bucket_mb: float = DEFAULT_BUCKET_MB, scales: Mapping[str, float] | None = None,
            serving: bool = False, ranges: bool = False, range_jobs: int | None = None) -> dict[str, Any]:
    """Replay ``trace`` under each protocol. Returns {'trace', 'rows': [...]} with slowdowns
    relative to ``none`` (added to the run if missing, as the reference). ``scales``: what-if
    duration factors (:mod:`replay.whatif.scale`), the same for every protocol. Rows carry serving
    metrics (:mod:`replay.pipeline.serving`) when the trace has request markers; ``serving`` demands them.
    ``ranges``: each row also carries its range over the preset's assumption ranges
    (:mod:`replay.pipeline.ranges`: ``makespan_range_ns``, ``slowdown_range``, ``range_driver``, ``ranges``)."""
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
    results, served, spans = {}, {}, {}
    study = None
    if ranges:
        from replay.pipeline.ranges import RangeStudy

        study = RangeStudy(graph, model, preset, overrides, scales, reference=True, jobs=range_jobs)
    for p in dict.fromkeys([NONE, *protocols]):
        rep = replay_graph(graph, p, model, preset, overrides, trace_ops=tr.num_ops, scales=scales,
                           track_reads=study is not None)
        results[p] = rep.result
        if serving:
            served[p] = serving_metrics(rep.graph, rep.schedule)
        if study is not None:
            study.adopt(p, rep)  # (the study's preset point of p: no transform or schedule repeated)
            spans[p] = study.protocol_range(p, rep.result.makespan_ns, results[NONE].makespan_ns, rep.graph,
                                            rep.schedule)
        del rep  # (its graph and schedule are not needed while the next protocol replays)
    dp = {"world": data_parallel, "bucket_mb": bucket_mb} if data_parallel is not None else None
    d = compare_report(trace, {p: results[p] for p in protocols}, results[NONE], dp, served or None)
    if study is not None:
        for row in d["rows"]:
            row.update(spans[row["protocol"]])
    return d


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
    w = _name_width(d)
    head = f"{'protocol':<{w}} {'makespan':>14} {'vs none':>9}  " + "  ".join(f"{c:>12}" for c in cats)
    lines = [f"trace {d['trace']}   model {d.get('model')}  preset {d.get('preset')}  "
             f"params {str(d.get('params_digest') or '')[:12]}"
             + (f"  scaled {', '.join(f'{k} x{v:g}' for k, v in d['scales'].items())}" if d.get("scales") else ""),
             head, "-" * len(head)]
    for r in d["rows"]:
        sd = r["slowdown_vs_none"]
        lines.append(f"{r['protocol']:<{w}} {fmt_ns(r['makespan_ns']):>14} {('%.2fx' % sd) if sd else 'n/a':>9}  "
                     + "  ".join(f"{fmt_ns(r['critical_path_ns'].get(c, 0)):>12}" for c in cats))
    lines.append("columns after 'vs none': time on the critical path by category")
    if any("ranges" in r for r in d["rows"]):
        from replay.pipeline.ranges import range_line

        lines += [range_line(r["protocol"], r, r["makespan_ns"], r["slowdown_vs_none"]) for r in d["rows"]]
    if any("serving" in r for r in d["rows"]):
        lines += ["", serving_table(d)]
    return "\n".join(lines)


def _name_width(d: dict[str, Any]) -> int:
    """The protocol column's width: the longest name, at least 18 (a long name never shifts a row)."""
    return max([18, *(len(str(r["protocol"])) for r in d["rows"])])


def serving_table(d: dict[str, Any]) -> str:
    """Serving metrics per protocol (mean TTFT, mean TPOT, output tokens/s, each vs none), then
    the change of the TTFT and TPOT breakdowns against ``none`` by mechanism."""
    from replay.pipeline.serving import format_serving

    w = _name_width(d)
    head = f"{'protocol':<{w}} {'TTFT mean':>12} {'vs none':>8} {'TPOT mean':>12} {'vs none':>8} {'tokens/s':>11} {'vs none':>8}"
    lines = [head, "-" * len(head)]

    def pct(x):
        return "n/a" if x is None else f"{100 * x:+.1f}%"

    for r in d["rows"]:
        m = r.get("serving") or {}
        if not m.get("complete_requests"):
            lines.append(f"{r['protocol']:<{w}} (no complete request)")
            continue
        o = m.get("overhead_vs_none", {})
        tput = m["output_tokens_per_s"]
        lines.append(f"{r['protocol']:<{w}} {fmt_ns(m['ttft_ns']['mean']):>12} {pct(o.get('ttft_mean')):>8} "
                     f"{fmt_ns(m['tpot_ns']['mean'] or 0):>12} {pct(o.get('tpot_mean')):>8} "
                     f"{'n/a' if tput is None else f'{tput:,.1f}':>11} {pct(o.get('output_tokens_per_s')):>8}")
    for r in d["rows"]:
        m = r.get("serving") or {}
        if m.get("overhead_vs_none") and r["protocol"] != NONE:
            lines.append(f"{r['protocol']}:")
            lines += ["  " + ln for ln in format_serving(m, m["overhead_vs_none"]).splitlines()[4:]]
    return "\n".join(lines)


def plot_breakdown(d: dict[str, Any], path: str) -> None:
    """Two panels, one bar per protocol (the ``none`` reference first, even when not asked for).

    (a) the makespan in ms, the slowdown written above each bar; (b) the CC overhead against
    ``none`` in ms on its own scale, so an overhead of a few percent is not a sliver, stacked by
    where it lands on the critical path: each TEE mechanism's change of critical-path time, and one
    segment for the path moving between host and GPU (the change of host plus compute time on the
    path: a protocol adds no host or GPU work, but a slower host can hide GPU time it used to
    wait for, which a stack of critical-path categories would show as "host time doubled"). The
    segments add up to the makespan change, written at the end of each bar."""
    from replay.frontend.figures import COLUMN_IN, GREY, PAGE_IN, PALETTE, check_format, colours, paper_style, save

    fmt = check_format(path, "--plot")
    rows = list(d["rows"])
    ref = d.get("reference")
    if ref and not any(r["protocol"] == NONE for r in rows):
        rows.insert(0, {"protocol": NONE, "makespan_ns": ref["makespan_ns"], "slowdown_vs_none": 1.0,
                        "critical_path_ns": ref["critical_path_ns"]})
    names = [_short(r["protocol"]) for r in rows]
    spans = [r["makespan_ns"] / 1e6 for r in rows]
    shift_cats = (Category.HOST.label, Category.COMPUTE.label)
    mech = [c.label for c in Category if c.label not in shift_cats]
    palette = dict(zip([c.label for c in Category], colours(len(Category) - 1) + [GREY]))
    dp = d.get("data_parallel")
    with paper_style() as plt:
        width = min(PAGE_IN, max(COLUMN_IN, 0.5 * len(names) + 2.6))
        fig, (ax, bx) = plt.subplots(1, 2, figsize=(width, 2.6), gridspec_kw={"width_ratios": [1, 1.25]})
        top = max(spans) if spans and max(spans) > 0 else 1.0
        ax.bar(names, spans, width=0.7, color=[GREY if r["protocol"] == NONE else PALETTE[0] for r in rows])
        for i, r in enumerate(rows):
            sd = r.get("slowdown_vs_none")
            ax.text(i, spans[i] + 0.015 * top, f"{spans[i]:.4g}" + (f"\n{sd:.2f}x" if sd else ""), ha="center",
                    va="bottom", fontsize=6)
        ax.set_ylim(0, top * 1.25)
        ax.set_ylabel("makespan (ms)")
        ax.set_title("(a) makespan; slowdown vs none", fontsize=7)
        ax.grid(axis="x", visible=False)
        handles = {}
        if ref:
            base = ref["critical_path_ns"]
            delta = {r["protocol"]: {c.label: (r["critical_path_ns"].get(c.label, 0) - base.get(c.label, 0)) / 1e6
                                     for c in Category} for r in rows}
            shown = [c for c in mech if any(abs(delta[r["protocol"]][c]) > 0 for r in rows)]
            pos = [0.0] * len(rows)
            neg = [0.0] * len(rows)
            for c in [*shown, "shift"]:
                vals = [sum(delta[r["protocol"]][k] for k in shift_cats) if c == "shift" else delta[r["protocol"]][c]
                        for r in rows]
                if not any(vals):
                    continue
                bottoms = [p if v >= 0 else n for v, p, n in zip(vals, pos, neg)]
                label = "path moved host<->GPU" if c == "shift" else c.replace("_", " ")
                handles[label] = bx.bar(names, vals, bottom=bottoms, width=0.7,
                                        color="white" if c == "shift" else palette[c],
                                        edgecolor=GREY if c == "shift" else "white",
                                        hatch="////" if c == "shift" else None, linewidth=0.4, label=label)
                pos = [p + max(v, 0) for p, v in zip(pos, vals)]
                neg = [n + min(v, 0) for n, v in zip(neg, vals)]
            over = [(r["makespan_ns"] - ref["makespan_ns"]) / 1e6 for r in rows]
            hi, lo = max(pos + [0.0]), min(neg + [0.0])
            span = (hi - lo) or 1.0
            for i, v in enumerate(over):
                bx.plot([i - 0.42, i + 0.42], [v, v], color="black", linewidth=1.0)
                share = v / (ref["makespan_ns"] / 1e6) if ref["makespan_ns"] else None
                bx.text(i, max(pos[i], v) + 0.02 * span, f"{v:+.3g}" + (f"\n{100 * share:+.1f}%" if share is not None
                                                                        else ""), ha="center", va="bottom", fontsize=6)
            bx.axhline(0, color="black", linewidth=0.5)
            bx.set_ylim(lo - 0.05 * span, hi + 0.3 * span)
            bx.set_ylabel("CC overhead vs none (ms)")
            bx.set_title("(b) overhead by critical-path change", fontsize=7)
            bx.grid(axis="x", visible=False)
            handles["makespan change"] = plt.Line2D([], [], color="black", linewidth=1.0)
        else:
            bx.set_visible(False)
        for a in (ax, bx):
            if len(names) > 3 or max(len(n) for n in names) > 8:
                # upright-to-the-axis names: each takes one line height of the bar pitch, never a neighbour's
                plt.setp(a.get_xticklabels(), rotation=90, ha="center")
        trace = str(d["trace"]).rsplit("/", 1)[-1]
        gpus = f", {dp['world']} GPUs, data-parallel what-if" if dp else ""
        fig.suptitle(f"{trace} ({d.get('preset')}{gpus})", fontsize=7)
        if handles:
            fig.legend(list(handles.values())[::-1], list(handles)[::-1], loc="upper left", bbox_to_anchor=(1.0, 0.9),
                       handlelength=1.2, title="overhead")
        fig.tight_layout()
        save(fig, path, fmt)


def _short(name: str, width: int = 16) -> str:
    """A protocol name short enough for a tick label or a table column."""
    return name if len(name) <= width else name[: width - 1] + "~"


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
@click.option("--ranges/--no-ranges", default=False, show_default=True,
              help="Also give each protocol's range over the preset's assumption ranges (about 2 replays per ranged "
                   "parameter a protocol reads; docs/model.md).")
@range_jobs_option
@overwrite_option
@reports_errors
def command(trace, protocols, model, preset, overrides, as_json, plot, data_parallel, bucket_mb, scale, serving,
            ranges, range_jobs, overwrite):
    """Replay TRACE under several protocols and compare makespan, slowdown and breakdown."""
    from replay.whatif.scale import parse_scales

    check_outputs([plot], [trace], overwrite)
    if plot:
        from replay.frontend.figures import check_format

        check_format(plot, "--plot")  # before the replays
    d = compare(trace, protocols.split(","), model, preset, overrides, data_parallel, bucket_mb, parse_scales(scale),
                serving, ranges, range_jobs)
    if plot:
        plot_breakdown(d, plot)
    click.echo(json.dumps(d, sort_keys=True) if as_json else format_table(d))
    if plot:
        click.echo(f"wrote {plot} ({len(d['rows']) + (not any(r['protocol'] == NONE for r in d['rows']))} bars)",
                   err=as_json)
