"""``replay plot``: a line (or scatter) plot of a ``replay sweep`` results table.

``--x`` is any column (usually a swept parameter such as ``pcie.h2d_bandwidth_gb_s``), ``--y`` a
metric (``makespan_ns``, ``slowdown``, ``cp_<category>_ns``, ...; ``*_ns`` columns are drawn in
ms), ``--hue`` the column that gives each line its colour (``protocol`` by default). Every other
study dimension that still varies after ``--where`` filters (trace, preset, other swept
parameters) splits the lines further and is named in the legend, so a plot never silently
averages points together; ``--facet COL`` puts each value of COL in its own panel instead.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

import click

from fastrack.atomic import atomic_path
from fastrack.cli_support import reports_errors
from fastrack.errors import ConfigError

DIMENSIONS = ("trace", "preset", "protocol", "model")


def _read(path: str):
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except FileNotFoundError:
        raise ConfigError("no such results file", path=path) from None
    except (pa.ArrowInvalid, OSError) as exc:
        raise ConfigError(f"not a Parquet file ({str(exc).splitlines()[0]})", path=path) from None
    meta = json.loads((table.schema.metadata or {}).get(b"fastrack.study", b"{}") or b"{}")
    df: pd.DataFrame = table.to_pandas()
    return df, meta


def _column(df, name: str, option: str, path: str) -> str:
    if name not in df.columns:
        import difflib

        near = difflib.get_close_matches(name, list(df.columns), n=1)
        hint = f"; did you mean {near[0]}?" if near else f"; columns: {', '.join(df.columns[:20])}"
        raise ConfigError(f"{option} {name}: no such column{hint}", path=path)
    return name


def _coerce(series, text: str):
    import pandas as pd

    if pd.api.types.is_bool_dtype(series):
        return text.lower() in ("true", "1", "yes")
    if pd.api.types.is_numeric_dtype(series):
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"--where: '{text}' is not a number") from None
    return text


def _fmt(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    s = str(v)
    return s.rsplit("/", 1)[-1] if "/" in s else s


def plot_study(path: str, x: str, y: str, output: str, hue: str | None = "protocol", facet: str | None = None,
               where: Sequence[str] = (), kind: str = "line", logx: bool = False, logy: bool = False,
               title: str | None = None) -> int:
    """Draw the figure; returns the number of lines drawn."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fmt = str(output).rsplit(".", 1)[-1].lower()
    if fmt not in ("png", "svg", "pdf"):
        raise ConfigError(f"-o {output}: unknown image format '{fmt}' (use .png, .svg or .pdf)")
    df, meta = _read(path)
    _column(df, x, "--x", path)
    _column(df, y, "--y", path)
    if hue:
        _column(df, hue, "--hue", path)
    if facet:
        _column(df, facet, "--facet", path)
    for w in where:
        col, sep, val = w.partition("=")
        if not sep:
            raise ConfigError(f"--where {w!r}: expected COLUMN=VALUE")
        _column(df, col, "--where", path)
        df = df[df[col] == _coerce(df[col], val)]
    if df.empty:
        raise ConfigError("no rows left to plot (check --where)", path=path)
    import pandas as pd

    if not pd.api.types.is_numeric_dtype(df[y]):
        raise ConfigError(f"--y {y}: not a numeric column", path=path)
    swept = [c for c in meta.get("swept", []) if c in df.columns] or [c for c in df.columns if "." in c]
    dims = [c for c in (*DIMENSIONS, *swept) if c in df.columns and c not in (x, hue, facet)]
    scale, unit = (1e-6, " (ms)") if y.endswith("_ns") else (1.0, "")
    ylabel = (y[:-3] if y.endswith("_ns") else y) + unit
    panels = sorted(df[facet].dropna().unique()) if facet else [None]
    fig, axes = plt.subplots(1, len(panels), figsize=(min(4.2 * len(panels) + 1.8, 16), 3.6), squeeze=False, sharey=True)
    hues = sorted(df[hue].dropna().unique(), key=str) if hue else [None]
    cmap = plt.get_cmap("tab10")
    styles = ["-", "--", ":", "-."]
    lines = 0
    for ax, panel in zip(axes[0], panels):
        sub = df if panel is None else df[df[facet] == panel]
        split: list[str] = []  # what still varies in this panel (linked parameters named once)
        for c in dims:
            if sub[c].nunique(dropna=False) > 1 and not any(sub[c].equals(sub[k]) for k in split):
                split.append(c)
        groups = sub.groupby(split, dropna=False, sort=True) if split else [((), sub)]
        for gi, (gkey, g) in enumerate(groups):
            gkey = gkey if isinstance(gkey, tuple) else (gkey,)
            for hi, h in enumerate(hues):
                part = g if h is None else g[g[hue] == h]
                if part.empty:
                    continue
                part = part.sort_values(x, kind="mergesort")
                label = ", ".join(([_fmt(h)] if h is not None else [])
                                  + [f"{c}={_fmt(v)}" for c, v in zip(split, gkey)])
                style = dict(color=cmap(hi % 10), label=label or None)
                if kind == "scatter":
                    ax.scatter(part[x], part[y] * scale, s=18, marker="os^Dv"[gi % 5], **style)
                else:
                    ax.plot(part[x], part[y] * scale, marker="o", markersize=3, linestyle=styles[gi % 4], **style)
                lines += 1
        ax.set_xlabel(x)
        if logx:
            ax.set_xscale("log")
        if logy:
            ax.set_yscale("log")
        ax.grid(True, alpha=0.3)
        if panel is not None:
            ax.set_title(f"{facet} = {_fmt(panel)}", fontsize=9)
    axes[0][0].set_ylabel(ylabel)
    if lines:
        axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1), frameon=False)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    with atomic_path(output) as tmp:
        fig.savefig(tmp, format=fmt, dpi=100)
    plt.close(fig)
    return lines


@click.command("plot")
@click.argument("results", type=click.Path(dir_okay=False))
@click.option("--x", "x", required=True, metavar="COLUMN", help="X axis: usually a swept parameter (section.key).")
@click.option("--y", "y", default="makespan_ns", show_default=True, metavar="METRIC",
              help="Y axis: makespan_ns, slowdown, cp_<category>_ns, ...")
@click.option("--hue", default="protocol", show_default=True, metavar="COLUMN", help="One colour per value.")
@click.option("--facet", default=None, metavar="COLUMN", help="One panel per value.")
@click.option("--where", multiple=True, metavar="COLUMN=VALUE", help="Keep only matching rows (repeatable).")
@click.option("--kind", type=click.Choice(["line", "scatter"]), default="line", show_default=True,
              help="Lines through the points, or the points alone.")
@click.option("--logx", is_flag=True, help="Logarithmic x axis.")
@click.option("--logy", is_flag=True, help="Logarithmic y axis.")
@click.option("--title", default=None, help="Figure title (default: no title).")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Figure (.png, .svg, .pdf).")
@reports_errors
def command(results, x, y, hue, facet, where, kind, logx, logy, title, output):
    """Plot a study: METRIC against a parameter, one line per protocol (and other varying dimension)."""
    n = plot_study(results, x, y, output, hue=hue or None, facet=facet, where=where, kind=kind, logx=logx, logy=logy,
                   title=title)
    click.echo(f"wrote {output} ({n} line(s))")
