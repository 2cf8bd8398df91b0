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
from replay.options import data_parallel_options, json_option, model_options, scale_option
from replay.plugins import DEFAULT_MODEL
from replay.report import fmt_ns

DEFAULT_PROTOCOLS = f"{NONE},baseline,fastrack"


def compare(trace: str, protocols: Sequence[str], model: str = DEFAULT_MODEL, preset: str | None = None,
            overrides: Sequence[str] = (), data_parallel: int | None = None,
            bucket_mb: float = DEFAULT_BUCKET_MB, scales: Mapping[str, float] | None = None) -> dict[str, Any]:
    """Replay ``trace`` under each protocol. Returns {'trace', 'rows': [...]} with slowdowns
    relative to ``none`` (added to the run if missing, as the reference). ``scales``: what-if
    duration factors (:mod:`replay.whatif`), the same for every protocol."""
    from replay.run import load_graph, replay_graph
    from replay.whatif import check_scales

    scales = check_scales(scales)

    protocols = [p.strip() for p in protocols if p.strip()]
    if not protocols:
        raise ConfigError("--protocols is empty: name at least one protocol")
    graph, tr = load_graph(trace)
    if data_parallel is not None:  # what-if: the single-GPU trace on N DDP ranks (docs/multi-gpu.md)
        from replay.dataparallel import data_parallel_graph

        graph = data_parallel_graph(graph, data_parallel, bucket_mb, protocols)
    results = {}
    for p in dict.fromkeys([NONE, *protocols]):
        results[p] = replay_graph(graph, p, model, preset, overrides, trace_ops=tr.num_ops, scales=scales).result
    return compare_report(trace, {p: results[p] for p in protocols}, results[NONE].makespan_ns)


def compare_report(trace: Any, results: Mapping[str, Any], reference_ns: int | None) -> dict[str, Any]:
    """The report of :func:`compare` from replay results ({protocol: ReplayResult}, in row order)
    and the ``none`` makespan (the reference of every slowdown); also used by ``fastrack.compare``."""
    from replay.results import JSON_DIGITS, slowdown

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
    first = next(iter(dicts.values()))
    return {"trace": str(trace), "model": first.get("model"), "preset": first.get("preset"),
            "params_digest": first.get("params_digest"), "params": first.get("params"),
            "scales": dict(first.get("scales") or {}), "rows": rows}


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
@reports_errors
def command(trace, protocols, model, preset, overrides, as_json, plot, data_parallel, bucket_mb, scale):
    """Replay TRACE under several protocols and compare makespan, slowdown and breakdown."""
    from replay.whatif import parse_scales

    d = compare(trace, protocols.split(","), model, preset, overrides, data_parallel, bucket_mb, parse_scales(scale))
    if plot:
        plot_breakdown(d, plot)
    click.echo(json.dumps(d, sort_keys=True) if as_json else format_table(d))
