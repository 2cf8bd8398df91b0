"""``replay sensitivity``: which model parameters matter for a trace under a protocol.

One-at-a-time perturbation around the preset: every numeric model parameter (int or float, not
bool; ``--set`` values fixed first) is multiplied by each factor (``--factors 0.5,2``) while the
others keep their values, and the trace is replayed. Integer parameters are rounded to the
nearest integer; a perturbed value the model rejects (out of range) or one that rounds back to the
preset value, or a zero preset value (a factor cannot move it) is reported with its status and no
makespan. Parameters are ranked by their *swing*: the largest relative change of the makespan
over the factors, ``max |makespan / preset makespan - 1|``. The parameter's unperturbed value is
the column ``preset_value`` (not "baseline", which names a protocol).

The replays run on the same executors as ``replay sweep`` (local process pool by default) and
the trace's graph is built once per worker.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import click

from fastrack_core.atomic import atomic_path
from fastrack_core.cli_support import progress_default, reports_errors
from fastrack_core.errors import ConfigError
from replay.names import CAPTURED
from replay.frontend.options import (
    check_outputs, complete_protocols, executor_options, json_option, model_options, overwrite_option,
)
from replay.plugins import DEFAULT_MODEL
from replay.frontend.study.executors import makespans
from replay.frontend.study.points import ModelResolver, check_protocols, file_sha256, make_point
from replay.frontend.study.spec import override_text, split_values

DEFAULT_FACTORS = "0.5,2"


def _perturb(value: Any, factor: float) -> Any:
    if isinstance(value, int):
        return int(round(value * factor))
    return float(value) * factor


def sensitivity(trace: str, protocol: str, model: str = DEFAULT_MODEL, preset: str | None = None,
                overrides: Sequence[str] = (), factors: Sequence[float] = (0.5, 2.0), executor: str | None = None,
                jobs: int | None = None, progress: bool | None = False, params: Sequence[str] | None = None):
    """One row per (parameter, factor), ranked; returns a pandas DataFrame (the preset's makespan
    in attrs). ``params``: perturb only these (``section.key``) parameters (all numeric ones by default)."""
    import pandas as pd

    if not factors:
        raise ConfigError("--factors: give at least one factor, e.g. 0.5,2")
    for f in factors:
        if not (f > 0 and math.isfinite(f)) or f == 1:
            raise ConfigError(f"--factors: {f:g} is not a useful factor (give positive numbers other than 1)")
    if protocol != CAPTURED:
        check_protocols([protocol])
    resolver = ModelResolver(model)
    fixed = tuple(sorted(overrides))
    resolver.check_names([o.partition("=")[0] for o in fixed], preset)
    sha = file_sha256(trace)
    base_point = make_point(resolver, trace, sha, protocol, preset, fixed)
    base_flat = base_point.resolved.flat
    fixed_names = {o.partition("=")[0] for o in fixed}
    rows: list[dict[str, Any]] = []
    points = [base_point]
    wanted = None if params is None else set(params)
    for name, value in base_flat.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if wanted is not None and name not in wanted:
            continue
        for f in factors:
            row = {"parameter": name, "preset_value": float(value), "factor": float(f), "value": math.nan,
                   "status": "ok", "key": None}
            new = _perturb(value, f)
            if value == 0:
                row["status"] = "zero preset value"
            elif new == value:
                row["status"] = "rounds to preset value"
            else:
                row["value"] = float(new)
                ovr = tuple(sorted([o for o in fixed if o.partition("=")[0] != name] + [override_text(name, new)]))
                try:
                    pt = make_point(resolver, trace, sha, protocol, preset, ovr)
                except ConfigError as exc:
                    row["status"] = f"rejected: {str(exc).splitlines()[0]}"
                else:
                    row["key"] = pt.key
                    points.append(pt)
            row["fixed_by_set"] = name in fixed_names
            rows.append(row)
    if len(points) == 1:
        raise ConfigError(f"model {model} has no numeric parameter to perturb")
    makespan = makespans(points, executor, jobs, progress, "sensitivity")
    base = makespan[base_point.key]
    for row in rows:
        m = makespan.get(row["key"]) if row["key"] else None
        row["makespan_ns"] = m if m is not None else pd.NA
        row["change"] = (m / base - 1.0) if m is not None and base else math.nan
    df = pd.DataFrame(rows).drop(columns=["key"])
    df["makespan_ns"] = df["makespan_ns"].astype("Int64")
    swing = df.groupby("parameter")["change"].apply(lambda s: float(s.abs().max()) if s.notna().any() else math.nan)
    df["swing"] = df["parameter"].map(swing)
    order = swing.fillna(-1).sort_values(ascending=False, kind="mergesort")
    rank = {p: i + 1 for i, p in enumerate(sorted(order.index, key=lambda p: (-order[p], p)))}
    df["rank"] = df["parameter"].map(rank)
    df = df.sort_values(["rank", "factor"], kind="mergesort").reset_index(drop=True)
    df = df[["rank", "parameter", "preset_value", "factor", "value", "makespan_ns", "change", "swing", "status",
             "fixed_by_set"]]
    df.attrs.update({"trace": str(trace), "trace_sha256": sha, "protocol": protocol, "model": model,
                     "preset": base_point.resolved.preset, "params_digest": base_point.resolved.digest,
                     "preset_makespan_ns": int(base)})
    return df


def format_table(df, top: int = 20) -> str:
    a = df.attrs
    lines = [f"trace {a['trace']}  protocol {a['protocol']}  model {a['model']}  preset {a['preset']}  "
             f"makespan at the preset {a['preset_makespan_ns'] / 1e6:.3f} ms",
             f"{'rank':>4}  {'parameter':<34} {'preset':>12} " + " ".join(
                 f"{'x' + format(f, 'g'):>9}" for f in sorted(df['factor'].unique())) + f" {'swing':>8}"]
    for param, g in list(df.groupby("parameter", sort=False))[:top]:
        cells = []
        for _f, r in g.sort_values("factor").iterrows():
            cells.append(f"{r['change'] * 100:+8.2f}%" if r["change"] == r["change"] else f"{'-':>9}")
        sw_ = g["swing"].iloc[0]
        b = g["preset_value"].iloc[0]
        b = f"{int(b):,}" if float(b).is_integer() else f"{b:g}"
        lines.append(f"{int(g['rank'].iloc[0]):>4}  {param:<34} {b:>12} " + " ".join(cells)
                     + (f" {sw_ * 100:7.2f}%" if sw_ == sw_ else f" {'-':>8}"))
    lines.append("cells: change of the makespan when the parameter alone is multiplied by the factor "
                 "('-': not run, see the status column of -o)")
    return "\n".join(lines)


def write_table(df, path: str) -> None:
    import json

    import pyarrow as pa
    import pyarrow.parquet as pq

    if not str(path).lower().endswith(".parquet"):
        raise ConfigError(f"-o {path}: the table must end in .parquet")
    table = pa.Table.from_pandas(df, preserve_index=False)
    md = dict(table.schema.metadata or {})
    md[b"fastrack.sensitivity"] = json.dumps(df.attrs, sort_keys=True).encode()
    with atomic_path(path) as tmp:
        pq.write_table(table.replace_schema_metadata(md), tmp, compression="zstd")


def plot_tornado(df, path: str, top: int = 20) -> None:
    """Horizontal bars per parameter, ranked: the makespan change (%) when the parameter alone is
    multiplied by each factor, the value written at the end of each bar. A (parameter, factor)
    that was not run (zero preset value, rounds to the preset value, rejected by the model) has no bar and
    says so in grey: it is skipped, not "no effect". Tick labels carry the unit and the preset value."""
    from replay.frontend.figures import COLUMN_IN, GREY, PALETTE, check_format, colours, paper_style, save
    from replay.frontend.paraminfo import unit_of

    fmt = check_format(path, "--plot")
    params = list(dict.fromkeys(df["parameter"]))[:top]  # df is ranked; unranked (all skipped) last
    factors = sorted(df["factor"].unique())
    cols = [PALETTE[0], PALETTE[5]] if len(factors) <= 2 else colours(len(factors))
    rows = {(r["parameter"], r["factor"]): r for _, r in df.iterrows()}
    changes = [abs(r["change"]) * 100 for r in rows.values() if r["parameter"] in params and r["change"] == r["change"]]
    span = max(changes, default=0.0) or 1.0
    with paper_style() as plt:
        fig, ax = plt.subplots(figsize=(COLUMN_IN + 1.6, 0.28 * max(4, len(params)) + 0.9))
        h = 0.8 / len(factors)
        y = list(range(len(params)))[::-1]
        for fi, f in enumerate(factors):
            off = (fi - (len(factors) - 1) / 2) * h
            for p, yy in zip(params, y):
                r = rows.get((p, f))
                if r is None:
                    continue
                v = r["change"] * 100 if r["change"] == r["change"] else None
                if v is None:  # not run: say why instead of drawing a zero
                    why = str(r["status"]).split(":")[0]
                    ax.text(0.02 * span, yy + off, f"x{f:g}: skipped ({why})", va="center", ha="left", fontsize=5.5,
                            color=GREY, style="italic")
                    continue
                ax.barh(yy + off, v, height=h * 0.9, color=cols[fi])
                ax.text(v + (0.01 * span if v >= 0 else -0.01 * span), yy + off, _percent(v), va="center",
                        ha="left" if v >= 0 else "right", fontsize=5.5)
        ax.axvline(0, color="black", linewidth=0.6)
        ax.set_xlim(-span * 1.3, span * 1.3)
        ax.set_yticks(y)
        labels = []
        for p in params:
            r = df[df["parameter"] == p].iloc[0]
            unit = unit_of(p)
            b = r["preset_value"]
            b = f"{int(b):,}" if float(b).is_integer() else f"{b:g}"
            labels.append(f"{p} = {b}" + (f" {unit}" if unit and unit not in ("count", "ratio") else ""))
        ax.set_yticklabels(labels, fontsize=6.5)
        ax.grid(axis="y", visible=False)
        ax.set_xlabel("makespan change vs the preset (%)")
        a = df.attrs
        ax.set_title(f"{str(a.get('trace', '')).rsplit('/', 1)[-1]}, {a.get('protocol')}, {a.get('preset')}")
        from matplotlib.patches import Patch

        ax.legend([Patch(color=c) for c, _ in zip(cols, factors)], [f"parameter x{f:g}" for f in factors],
                  loc="lower right", handlelength=1.2)
        save(fig, path, fmt)


def _percent(v: float) -> str:
    """A bar's value: 0% only when the makespan did not move at all."""
    if v == 0:
        return "0%"
    a = abs(v)
    sign = "+" if v > 0 else "-"
    if a < 0.005:
        return f"{sign}0.00%"  # moved, but by less than the last digit shown
    return f"{sign}{a:.0f}%" if a >= 10 else f"{sign}{a:.1f}%" if a >= 1 else f"{sign}{a:.2f}%"


def parse_factors(text: str) -> list[float]:
    """``--factors`` of ``sensitivity`` and ``explain``: comma-separated numbers (a value that is not
    one is named by its position, never repeated)."""
    out = []
    for i, v in enumerate(split_values(text, "--factors"), 1):
        try:
            out.append(float(v))
        except ValueError:
            raise ConfigError(f"--factors: value {i} is not a number") from None
    return out


@click.command("sensitivity")
@click.argument("trace", type=click.Path(dir_okay=False))
@click.option("--protocol", required=True, shell_complete=complete_protocols,
              help="Protocol to study (e.g. baseline, fastrack; replay list protocols).")
@model_options
@click.option("--factors", default=DEFAULT_FACTORS, show_default=True, help="Multiplicative perturbations.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write the table (.parquet).")
@click.option("--plot", type=click.Path(dir_okay=False), help="Write a tornado chart (.png, .svg, .pdf).")
@click.option("--top", type=click.IntRange(min=1), default=20, show_default=True,
              help="Parameters shown in the printed table and the chart (the -o table and --json have all).")
@executor_options
@json_option
@overwrite_option
@reports_errors
def command(trace, protocol, model, preset, overrides, factors, output, plot, top, executor, jobs, progress, as_json,
            overwrite):
    """Rank model parameters by their effect on TRACE's makespan under PROTOCOL (one at a time)."""
    check_outputs([output, plot], [trace], overwrite)
    for o in overrides:
        if "=" not in o or "," in o.partition("=")[2]:
            raise ConfigError(f"--set {o!r}: expected SECTION.KEY=VALUE (one value; use replay sweep to sweep)")
    if plot:
        from replay.frontend.figures import check_format

        check_format(plot, "--plot")  # before the replays
    df = sensitivity(trace, protocol, model, preset, overrides, parse_factors(factors), executor, jobs,
                     progress_default(progress))
    if output:
        write_table(df, output)
    if plot:
        plot_tornado(df, plot, top)
    if as_json:
        click.echo(json_report(df))
    else:
        click.echo(format_table(df, top))
    if plot:
        click.echo(f"wrote {plot} ({min(top, df['parameter'].nunique())} parameters)", err=as_json)


def json_report(df) -> str:
    """The study facts and every row (NaN and missing makespans as null), as one JSON object."""
    import json

    rows = json.loads(df.to_json(orient="records"))  # pandas writes NaN and <NA> as null
    return json.dumps({**{k: v for k, v in df.attrs.items()}, "rows": rows}, sort_keys=True)


__all__ = ["sensitivity", "format_table", "json_report", "plot_tornado", "write_table"]
