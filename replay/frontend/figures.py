"""The look of every figure (``compare --plot``, ``replay plot``, ``sensitivity --plot``): sized for
a paper's column, colour-blind-safe colours, editable text, one way to save.

* sizes in inches: :data:`COLUMN_IN` (one column of a two-column paper) and :data:`PAGE_IN` (both
  columns), 8-pt text, so a figure placed at its own width needs no scaling;
* colours: the Okabe-Ito palette (Okabe & Ito, "Color Universal Design", 2008; distinct under
  the common colour-vision deficiencies), black and yellow last; :data:`LINESTYLES` and
  :data:`MARKERS` for a second and third dimension, with legend handles long enough to show a
  dash pattern;
* text stays text: ``svg.fonttype: none`` (SVG ``<text>`` elements) and ``pdf.fonttype: 42``
  (TrueType in PDF), so labels can be edited and searched;
* :func:`save`: PNG (200 dpi), SVG or PDF by extension, written atomically and reproducibly: the
  same figure gives the same bytes (no creation date in the SVG or PDF metadata, and a fixed
  ``svg.hashsalt``, so SVG clip-path ids do not change from run to run);
* :func:`text_overlaps`: the pairs of texts of a drawn figure whose boxes intersect (the figures
  test asks for none); :func:`thin_ticks` drops tick labels that would overlap their neighbours.
"""

from __future__ import annotations

import contextlib
from typing import Any

from fastrack_core.atomic import atomic_path
from fastrack_core.errors import ConfigError

COLUMN_IN = 3.5
PAGE_IN = 7.0
FONT_PT = 8
PNG_DPI = 200
FORMATS = ("png", "svg", "pdf")

# Okabe-Ito: blue, orange, bluish green, reddish purple, sky blue, vermillion, yellow, black
PALETTE = ("#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#000000")
GREY = "#999999"
LINESTYLES = ("-", (0, (5, 2)), (0, (1, 1.5)), (0, (5, 1.5, 1, 1.5)), (0, (8, 2, 1, 2, 1, 2)), (0, (3, 3)))
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "*")
HANDLE_LENGTH = 3.2  # legend handles, in font sizes: long enough for two periods of every dash pattern

RC = {
    "font.size": FONT_PT,
    "axes.titlesize": FONT_PT,
    "axes.labelsize": FONT_PT,
    "xtick.labelsize": FONT_PT - 1,
    "ytick.labelsize": FONT_PT - 1,
    "legend.fontsize": FONT_PT - 1,
    "legend.title_fontsize": FONT_PT,
    "legend.handlelength": HANDLE_LENGTH,
    "legend.frameon": False,
    "axes.prop_cycle": None,  # set below (needs matplotlib's cycler)
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
    "grid.linewidth": 0.5,
    "lines.linewidth": 1.3,
    "lines.markersize": 3.5,
    "svg.fonttype": "none",
    "pdf.fonttype": 42,
    "ps.fonttype": 42,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.02,
    "svg.hashsalt": "fastrack",  # deterministic ids (clip paths, glyphs) in SVG output
}
# metadata keys set to None are left out of the file: no creation date, so a figure is reproducible
METADATA = {"png": {"Software": None}, "svg": {"Date": None}, "pdf": {"CreationDate": None, "ModDate": None}}


def check_format(path: Any, option: str) -> str:
    """The image format of ``path`` by extension; a one-line error naming ``option`` otherwise
    (checked before any work is done)."""
    fmt = str(path).rsplit(".", 1)[-1].lower() if "." in str(path) else ""
    if fmt not in FORMATS:
        raise ConfigError(f"{option} {path}: unknown image format '{fmt}' (use .png, .svg or .pdf)")
    return fmt


@contextlib.contextmanager
def paper_style():
    """matplotlib (Agg) with the paper settings above; yields ``pyplot``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from cycler import cycler

    rc = dict(RC, **{"axes.prop_cycle": cycler(color=PALETTE)})
    with matplotlib.rc_context(rc):
        yield plt


def colours(n: int) -> list[str]:
    """``n`` distinct colour-blind-safe colours: the palette, then cividis steps beyond eight."""
    if n <= len(PALETTE):
        return list(PALETTE[:n])
    import matplotlib

    cmap = matplotlib.colormaps["cividis"]
    return [matplotlib.colors.to_hex(cmap(i / max(1, n - 1))) for i in range(n)]


def text_colour(hex_colour: str) -> str:
    """Black or white, whichever reads better on ``hex_colour`` (relative luminance)."""
    import matplotlib

    r, g, b = matplotlib.colors.to_rgb(hex_colour)
    return "black" if 0.2126 * r + 0.7152 * g + 0.0722 * b > 0.45 else "white"


def save(fig, path: Any, fmt: str) -> None:
    """Write ``fig`` to ``path`` atomically (PNG at :data:`PNG_DPI`) and close it."""
    import matplotlib.pyplot as plt

    try:
        with atomic_path(path) as tmp:
            fig.savefig(tmp, format=fmt, dpi=PNG_DPI, metadata=METADATA.get(fmt))
    finally:
        plt.close(fig)


def _drawn_ticklabels(ax):
    """The tick labels matplotlib draws: those of ticks inside the view limits (an axis keeps label
    objects for ticks outside them, which are not drawn)."""
    out = []
    for axis, lim in ((ax.xaxis, ax.get_xlim()), (ax.yaxis, ax.get_ylim())):
        lo, hi = min(lim), max(lim)
        for minor in (False, True):
            ticks = axis.get_minor_ticks() if minor else axis.get_major_ticks()
            locs = axis.get_minorticklocs() if minor else axis.get_majorticklocs()
            for tick, loc in zip(ticks, locs):
                if lo - 1e-12 * abs(hi - lo) <= loc <= hi + 1e-12 * abs(hi - lo):
                    out += [tick.label1, tick.label2]
    return out


def _texts(fig):
    """The visible, non-empty texts of a drawn figure with their boxes (display units): titles,
    axis labels, drawn tick labels, texts placed on axes or the figure, legend entries and titles."""
    renderer = fig.canvas.get_renderer()
    texts = list(fig.texts)
    if getattr(fig, "_suptitle", None) is not None:
        texts.append(fig._suptitle)
    legends = list(fig.legends)
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        texts += [ax.title, ax._left_title, ax._right_title, ax.xaxis.label, ax.yaxis.label, *ax.texts,
                  *_drawn_ticklabels(ax)]
        if ax.get_legend() is not None:
            legends.append(ax.get_legend())
    for leg in legends:
        texts += [*leg.get_texts(), leg.get_title()]
    out, seen = [], set()
    for t in texts:
        if t is None or id(t) in seen or not t.get_visible() or not t.get_text().strip():
            continue
        seen.add(id(t))
        box = t.get_window_extent(renderer)
        if box.width > 0 and box.height > 0:
            out.append((t, box))
    return out


def text_overlaps(fig, tolerance_px: float = 0.5) -> list[tuple[str, str]]:
    """Pairs ``(text a, text b)`` of the drawn ``fig`` whose bounding boxes (matplotlib's window
    extents) intersect by more than ``tolerance_px`` in both directions."""
    fig.canvas.draw()
    texts = _texts(fig)
    pairs = []
    for i, (ta, a) in enumerate(texts):
        for tb, b in texts[i + 1:]:
            w = min(a.x1, b.x1) - max(a.x0, b.x0)
            h = min(a.y1, b.y1) - max(a.y0, b.y0)
            if w > tolerance_px and h > tolerance_px:
                pairs.append((ta.get_text(), tb.get_text()))
    return pairs


def thin_ticks(ax, axis: str = "x", gap_px: float = 2.0) -> None:
    """Hide tick labels of ``ax`` that would touch the last label kept (left to right, or bottom
    to top), so dense or logarithmic ticks in a narrow panel stay readable."""
    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    labels = [t for t in (ax.get_xticklabels() if axis == "x" else ax.get_yticklabels())
              if t.get_visible() and t.get_text().strip()]
    boxes = sorted(((t.get_window_extent(renderer), t) for t in labels),
                   key=lambda bt: bt[0].x0 if axis == "x" else bt[0].y0)
    last = None
    for box, t in boxes:
        if last is not None and ((box.x0 if axis == "x" else box.y0) < (last.x1 if axis == "x" else last.y1) + gap_px):
            t.set_visible(False)
            continue
        last = box


__all__ = ["COLUMN_IN", "GREY", "HANDLE_LENGTH", "LINESTYLES", "MARKERS", "PAGE_IN", "PALETTE", "check_format",
           "colours", "paper_style", "save", "text_colour", "text_overlaps", "thin_ticks"]
