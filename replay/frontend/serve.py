"""``replay serve``: the request-level serving simulator over a captured engine trace
(docs/serving.md, "The request-level simulator").

    replay serve T --protocols none,baseline,fastrack --workload poisson:2,4,8 --slo ttft=200ms,tpot=50ms
"""

from __future__ import annotations

import json
from typing import Any

import click

from fastrack_core.cli_support import reports_errors
from fastrack_core.errors import ConfigError
from replay.frontend.options import check_outputs, complete_protocols, json_option, model_options, overwrite_option
from replay.frontend.report import fmt_ns
from replay.serve.schedulers import names as scheduler_names


def _ms(ns) -> str:
    return "n/a" if ns is None else f"{ns / 1e6:.2f}"


def _num(x, spec: str) -> str:
    return "n/a" if x is None else format(x, spec)


def _pct(x) -> str:
    return "" if x is None else f"{100 * x:+.1f}%"


def format_report(d: dict[str, Any], top: int = 5) -> str:
    s = d["scheduler"]
    lines = [f"trace {d['trace']}   scheduler {s['name']} ({s['doc']})   max seqs {d['max_seqs']}, "
             f"token budget {d['max_batched_tokens']}, host time: {d['host_time']}",
             f"{d['requests']} requests, lengths {d['lengths']}, seed {d['seed']}; {d['captured_steps']} captured "
             f"steps, {d['captured_shapes']} shapes"]
    slo = d["slo_ns"]
    head = (f"{'load':<28} {'protocol':<10} {'tok/s':>9} {'vs none':>8} {'req/s':>7} "
            f"{'TTFT ms mean/p50/p90/p99':>26} {'TPOT ms mean/p99':>17} {'ITL ms p99':>10} {'E2E ms mean/p99':>16}"
            + (f" {'goodput':>8}" if slo else ""))
    lines += ["", head, "-" * len(head)]
    for pt in d["points"]:
        for r in pt["rows"]:
            t, tp, itl, e = r["ttft_ns"], r["tpot_ns"], r["itl_ns"], r["e2e_ns"]
            tput = r["output_tokens_per_s"]
            lines.append(
                f"{pt['workload'][:28]:<28} {r['protocol']:<10} {'n/a' if tput is None else f'{tput:,.1f}':>9} "
                f"{_pct(r['vs_none']['output_tokens_per_s']):>8} "
                f"{_num(r['requests_per_s'], '.2f'):>7} "
                f"{'/'.join(_ms(t[k]) for k in ('mean', 'p50', 'p90', 'p99')):>26} "
                f"{_ms(tp['mean']) + '/' + _ms(tp['p99']):>17} {_ms(itl['p99']):>10} "
                f"{_ms(e['mean']) + '/' + _ms(e['p99']):>16}"
                + (f" {r['goodput_requests_per_s'] or 0:>8.2f}" if slo else ""))
    if slo:
        lines.append("goodput: requests/s meeting " + ", ".join(f"{k.upper()} <= {fmt_ns(v)}" for k, v in slo.items()))
    lines.append("")
    lines.append(f"what CC added, by mechanism (ns per output token; step graphs' critical paths), top {top}:")
    for pt in d["points"]:
        for r in pt["rows"]:
            if r["protocol"] == "none":
                continue
            items = list(r["added_by_mechanism_ns_per_token"].items())[:top]
            lines.append(f"  {pt['workload'][:28]:<28} {r['protocol']:<10} "
                         + (", ".join(f"{k} {v:+,.0f}" for k, v in items) or "(nothing)"))
    lines += ["", *("note: " + n for n in d["notes"])]
    return "\n".join(lines)


def plot_latency_vs_load(d: dict[str, Any], path: str) -> None:
    """Mean TTFT and mean TPOT against the load (requests/s or concurrency), one line per protocol,
    in replay/frontend/figures.py's look."""
    from replay.frontend.figures import COLUMN_IN, LINESTYLES, MARKERS, check_format, colours, paper_style, save

    fmt = check_format(path, "--plot")
    pts = [p for p in d["points"] if p["load"] is not None]
    protos = [r["protocol"] for r in pts[0]["rows"]] if pts else []
    kind = pts[0]["kind"] if pts else ""
    with paper_style() as plt:
        fig, axes = plt.subplots(1, 2, figsize=(2 * COLUMN_IN, 2.4))
        for i, (proto, col) in enumerate(zip(protos, colours(len(protos)))):
            x = [p["load"] for p in pts]
            for ax, key in zip(axes, ("ttft_ns", "tpot_ns")):
                y = [next(r for r in p["rows"] if r["protocol"] == proto)[key]["mean"] for p in pts]
                ax.plot(x, [v / 1e6 if v is not None else float("nan") for v in y], color=col,
                        linestyle=LINESTYLES[i % len(LINESTYLES)], marker=MARKERS[i % len(MARKERS)], label=proto)
        for ax, what in zip(axes, ("mean TTFT (ms)", "mean TPOT (ms)")):
            ax.set_xlabel("concurrency" if kind == "closed" else "offered load (requests/s)")
            ax.set_ylabel(what)
            if kind == "closed":
                ax.set_xscale("log", base=2)
        axes[0].legend(title="protocol")
        fig.suptitle(f"{str(d['trace']).rsplit('/', 1)[-1]}: scheduler {d['scheduler']['name']}", fontsize=8)
        save(fig, path, fmt)


@click.command("serve")
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--protocols", default="none,baseline,fastrack", show_default=True, shell_complete=complete_protocols,
              help="Comma-separated protocols (none is always simulated, as the reference).")
@click.option("--workload", required=True, metavar="SPEC",
              help="poisson:RATE[,RATE...] (requests/s), closed:CONCURRENCY[,...] or file:PATH (CSV/JSONL with "
                   "arrival_s,input_tokens,output_tokens).")
@click.option("--requests", type=int, default=1000, show_default=True, help="Requests per load point (poisson, closed).")
@click.option("--lengths", default="sharegpt", show_default=True, metavar="sharegpt|fixed:IN:OUT",
              help="Request lengths for poisson and closed loads.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of arrivals and lengths.")
@click.option("--scheduler", "scheduler_name", default="sglang", show_default=True,
              help=f"Scheduler plug-in (replay/serve/schedulers.py): {', '.join(scheduler_names())}.")
@click.option("--max-seqs", type=int, default=256, show_default=True, help="Requests in the server at once (KV slots).")
@click.option("--max-batched-tokens", type=int, default=2048, show_default=True, help="Token budget of one step.")
@click.option("--host-time", default="capture", show_default=True, type=click.Choice(["capture", "vllm-profile"]),
              help="Engine host time per step: as captured, or plus vLLM's profiled scheduling share.")
@click.option("--slo", default=None, metavar="ttft=200ms,tpot=50ms", help="SLOs for goodput (units ns, us, ms, s).")
@click.option("--plot", "plot_path", default=None, type=click.Path(dir_okay=False),
              help="Latency-vs-load figure (.png, .svg, .pdf).")
@model_options
@json_option
@overwrite_option
@reports_errors
def command(trace, protocols, workload, requests, lengths, seed, scheduler_name, max_seqs, max_batched_tokens,
            host_time, slo, plot_path, model, preset, overrides, as_json, overwrite):
    """Simulate a server at the request level over step prices replayed from TRACE."""
    from replay.frontend.figures import check_format
    from replay.serve.metrics import parse_slo
    from replay.serve.run import serve

    slos = parse_slo(slo)
    if plot_path:
        check_format(plot_path, "--plot")
        if workload.startswith("file:"):
            raise ConfigError("--plot draws latency against load: give poisson:RATE,... or closed:CONCURRENCY,...")
        check_outputs([plot_path], [trace], overwrite)
    d = serve(trace, protocols.split(","), workload, requests, lengths, seed, scheduler_name, max_seqs,
              max_batched_tokens, host_time, slos, model, preset, overrides)
    if plot_path:
        plot_latency_vs_load(d, plot_path)
    click.echo(json.dumps(d, indent=1) if as_json else format_report(d))

