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
import textwrap
from typing import Any, Sequence

import click

from fastrack_core.cli_support import reports_errors
from fastrack_core.errors import ConfigError, shown
from replay.frontend.options import check_outputs, overwrite_option

DIMENSIONS = ("trace", "preset", "protocol", "model")
MAX_STYLES = 4  # line styles one can tell apart in a column-wide figure; more values get panels
MAX_LOG_TICKS = 8  # a log axis labels each swept value up to this many


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
        raise ConfigError(f"{option} {shown(name)}: no such column{hint}", path=path)
    return name


def _coerce(series, text: str):
    import pandas as pd

    if pd.api.types.is_bool_dtype(series):
        return text.lower() in ("true", "1", "yes")
    if pd.api.types.is_numeric_dtype(series):
        try:
            return float(text)
        except ValueError:
            raise ConfigError(f"--where: the value {shown(text)} is not a number") from None
    return text


def _order(v: Any) -> tuple:
    """Numbers in numeric order (2 before 16), then everything else by its text."""
    try:
        return (0, float(v), "")
    except (TypeError, ValueError):
        return (1, 0.0, str(v))


def _fmt(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    s = str(v)
    return s.rsplit("/", 1)[-1] if "/" in s else s


def plot_study(path: str, x: str, y: str, output: str, hue: str | None = "protocol", facet: str | None = None,
               where: Sequence[str] = (), kind: str = "line", logx: bool = False, logy: bool = False,
               title: str | None = None, style: str | None = None, sharey: bool = False,
               notes: list[str] | None = None) -> int:
    """Draw the figure; returns the number of lines drawn.

    Colour: one per value of ``hue``; line style (and marker): one per value of ``style`` (by
    default the first other study dimension that still varies); markers: one per combination of
    any further varying dimension. The legend has one titled section per dimension. Facets get
    their own y scale unless ``sharey``. Axis labels carry units (:func:`replay.frontend.paraminfo.axis_label`)."""
    import pandas as pd

    from replay.frontend.figures import (
        FONT_PT, GREY, LINESTYLES, MARKERS, PAGE_IN, check_format, colours, paper_style, save, thin_ticks,
    )
    from replay.frontend.paraminfo import axis_label

    fmt = check_format(output, "-o")
    df, meta = _read(path)
    _column(df, x, "--x", path)
    _column(df, y, "--y", path)
    for opt, col in (("--hue", hue), ("--facet", facet), ("--style", style)):
        if col:
            _column(df, col, opt, path)
    for w in where:
        col, sep, val = w.partition("=")
        if not sep:
            raise ConfigError(f"--where {shown(w)}: expected COLUMN=VALUE")
        _column(df, col, "--where", path)
        df = df[df[col] == _coerce(df[col], val)]
    if df.empty:
        raise ConfigError("no rows left to plot (check --where)", path=path)
    if not pd.api.types.is_numeric_dtype(df[y]):
        raise ConfigError(f"--y {y}: not a numeric column", path=path)
    swept = [c for c in meta.get("swept", []) if c in df.columns] or [c for c in df.columns if "." in c]
    dims = [c for c in (*DIMENSIONS, *swept) if c in df.columns and c not in (x, hue, facet, style)]
    split: list[str] = []  # what else varies (linked parameters named once)
    linked: dict[str, list[str]] = {}  # a split column -> the columns that always equal it (one swept axis)
    shown_by = [df[c].reset_index(drop=True) for c in (x, facet) if c]
    for c in dims:
        if any(df[c].reset_index(drop=True).equals(v) for v in shown_by):
            continue  # tied to the x axis or the panels (a+b swept together): they already show it
        if df[c].nunique(dropna=False) > 1:
            twin = next((k for k in split if df[c].reset_index(drop=True).equals(df[k].reset_index(drop=True))), None)
            if twin is None:
                split.append(c)
                linked[c] = [c]
            else:
                linked[twin].append(c)
    if style is None and split:
        style, split = split[0], split[1:]
    if facet is None and style is not None and df[style].nunique() > MAX_STYLES:
        # more line styles than an eye tells apart: one panel per value instead (--facet chooses)
        if notes is not None:
            notes.append(f"one panel per value of {style} ({df[style].nunique()} values: more than {MAX_STYLES} "
                         "line styles cannot be told apart; --facet chooses the panels)")
        facet, style = style, (split[0] if split else None)
        split = split[1:] if split else []
    elif style is not None and df[style].nunique() > MAX_STYLES and notes is not None:
        notes.append(f"{df[style].nunique()} values of {style} share each panel: more than {MAX_STYLES} line styles "
                     f"are hard to tell apart (--facet {style}, or --where to keep fewer)")
    names = {c: "+".join(linked.get(c, [c])) for c in (*split, style) if c}
    yscale = 1e-6 if y.endswith("_ns") else 1.0
    panels = sorted(df[facet].dropna().unique()) if facet else [None]
    hues = sorted(df[hue].dropna().unique(), key=_order) if hue else [None]
    styles = sorted(df[style].dropna().unique(), key=_order) if style else [None]
    others = sorted(df.groupby(split if len(split) > 1 else split[0], dropna=False).groups, key=str) if split else [()]
    others = [o if isinstance(o, tuple) else (o,) for o in others]
    colour = dict(zip(hues, colours(len(hues))))
    marker_of_style = not split  # with no third dimension, the marker follows the line style
    ncols = min(len(panels), 3)
    nrows = -(-len(panels) // ncols)
    with paper_style() as plt:
        # panels fill a page width (two columns) with the legend beside them; one panel fits a column
        panel_in = min(2.4, (PAGE_IN - 1.6) / ncols)
        fig, axes = plt.subplots(nrows, ncols, figsize=(panel_in * ncols, 2.0 * nrows + 0.3),
                                 squeeze=False, sharey=sharey)
        lines = 0
        for ax, panel in zip(axes.flat, panels):
            sub = df if panel is None else df[df[facet] == panel]
            for si, st in enumerate(styles):
                for oi, other in enumerate(others):
                    for h in hues:
                        part = sub
                        if h is not None:
                            part = part[part[hue] == h]
                        if st is not None:
                            part = part[part[style] == st]
                        for c, v in zip(split, other):
                            part = part[part[c].isna()] if pd.isna(v) else part[part[c] == v]
                        if part.empty:
                            continue
                        part = part.sort_values(x, kind="mergesort")
                        mk = MARKERS[(si if marker_of_style else oi) % len(MARKERS)]
                        if kind == "scatter":
                            ax.scatter(part[x], part[y] * yscale, s=14, marker=mk, color=colour[h])
                        else:
                            ax.plot(part[x], part[y] * yscale, marker=mk, linestyle=LINESTYLES[si % len(LINESTYLES)],
                                    color=colour[h])
                        lines += 1
            if logx:
                _log_ticks(ax, sub[x])
            if logy:
                ax.set_yscale("log")
            if panel is not None:
                text = f"{facet}: {_fmt(panel)}" if facet in DIMENSIONS else f"{axis_label(facet)} = {_fmt(panel)}"
                # wrapped to the panel: a long parameter name must not run into the next panel's title
                ax.set_title(textwrap.fill(text, max(12, int(panel_in * 72 / (FONT_PT * 0.62)))))
            ax.set_xlabel(axis_label(x))
        for ax in axes[:, 0]:
            ax.set_ylabel(axis_label(y))
        for ax in list(axes.flat)[len(panels):]:
            ax.set_visible(False)
        handles = _legend_handles(hue, hues, colour, style, styles, split, others, marker_of_style, kind, GREY, names)
        if title:
            fig.suptitle(title, fontsize=FONT_PT + 1)
        fig.tight_layout()
        for ax in list(axes.flat)[:len(panels)]:
            thin_ticks(ax, "x")
        if handles:
            leg = fig.legend([h for h, _ in handles], [t for _, t in handles], loc="upper left",
                             bbox_to_anchor=(1.0, 0.97))
            for text, (_h, t) in zip(leg.get_texts(), handles):
                if t.endswith(":"):  # a section title: the dimension this part of the legend encodes
                    text.set_fontweight("bold")
                    text.set_text(textwrap.fill(t, 26))
        save(fig, output, fmt)
    return lines


def _log_ticks(ax, xs) -> None:
    """A base-10 x axis whose labels are the values a study swept (when there are few), written as
    plain numbers, with no minor-tick labels: decades alone say little about 4..128 GB/s, and minor
    labels collide in a narrow panel."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ax.set_xscale("log")
    vals = sorted({float(v) for v in xs.dropna() if float(v) > 0})
    if 0 < len(vals) <= MAX_LOG_TICKS:
        ax.xaxis.set_major_locator(FixedLocator(vals))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: _fmt(float(f"{v:.6g}"))))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _legend_handles(hue, hues, colour, style, styles, split, others, marker_of_style, kind, grey, names):
    """(handle, text) pairs: a titled section per dimension; a section title is a blank handle."""
    from matplotlib.lines import Line2D

    from replay.frontend.figures import LINESTYLES, MARKERS
    from replay.frontend.paraminfo import axis_label

    line = kind != "scatter"
    blank = Line2D([], [], linestyle="none", marker=None)
    out = []
    if hue and len(hues) > 0:
        out.append((blank, f"{axis_label(hue)}:"))
        out += [(Line2D([], [], color=colour[h], linestyle="-" if line else "none", marker="o" if not line else None),
                 _fmt(h)) for h in hues]
    if style:
        out.append((blank, f"{axis_label(names.get(style, style))}:"))
        out += [(Line2D([], [], color=grey, linestyle=LINESTYLES[i % len(LINESTYLES)] if line else "none",
                        marker=MARKERS[i % len(MARKERS)] if marker_of_style else None), _fmt(s))
                for i, s in enumerate(styles)]
    if split:
        out.append((blank, ", ".join(axis_label(names.get(c, c)) for c in split) + ":"))
        out += [(Line2D([], [], color=grey, linestyle="none", marker=MARKERS[i % len(MARKERS)]),
                 ", ".join(_fmt(v) for v in o)) for i, o in enumerate(others)]
    return out


@click.command("plot")
@click.argument("results", type=click.Path(dir_okay=False))
@click.option("--x", "x", required=True, metavar="COLUMN", help="X axis: usually a swept parameter (section.key).")
@click.option("--y", "y", default="makespan_ns", show_default=True, metavar="METRIC",
              help="Y axis: makespan_ns, slowdown, cp_<category>_ns, ...")
@click.option("--hue", default="protocol", show_default=True, metavar="COLUMN",
              help="One colour per value of COLUMN (e.g. trace or protocol).")
@click.option("--style", default=None, metavar="COLUMN",
              help="One line style and marker per value of COLUMN [the first other dimension that varies].")
@click.option("--facet", default=None, metavar="COLUMN", help="One panel per value of COLUMN.")
@click.option("--sharey/--no-sharey", default=False, show_default=True,
              help="One y scale for every panel (default: each panel its own, so small effects stay visible).")
@click.option("--where", multiple=True, metavar="COLUMN=VALUE", help="Keep only matching rows (repeatable).")
@click.option("--kind", type=click.Choice(["line", "scatter"]), default="line", show_default=True,
              help="line: points joined in x order; scatter: the points alone.")
@click.option("--logx", is_flag=True, help="Logarithmic x axis (base 10), e.g. for bandwidths spanning decades.")
@click.option("--logy", is_flag=True, help="Logarithmic y axis (base 10).")
@click.option("--title", default=None, help="Figure title (default: no title).")
@click.option("-o", "--output", required=True, type=click.Path(dir_okay=False), help="Figure (.png, .svg, .pdf).")
@overwrite_option
@reports_errors
def command(results, x, y, hue, style, facet, sharey, where, kind, logx, logy, title, output, overwrite):
    """Plot a study: METRIC against a parameter, one colour per --hue value, one line style per
    --style value, and a legend section for every other dimension that varies."""
    check_outputs([output], [results], overwrite)
    notes: list[str] = []
    n = plot_study(results, x, y, output, hue=hue or None, facet=facet, where=where, kind=kind, logx=logx, logy=logy,
                   title=title, style=style, sharey=sharey, notes=notes)
    for note in notes:
        click.echo(f"note: {note}", err=True)
    click.echo(f"wrote {output} ({n} line(s))")
