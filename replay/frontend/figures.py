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
* :func:`save`: PNG (200 dpi), SVG or PDF by extension, written atomically.
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
}


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
            fig.savefig(tmp, format=fmt, dpi=PNG_DPI)
    finally:
        plt.close(fig)


__all__ = ["COLUMN_IN", "GREY", "HANDLE_LENGTH", "LINESTYLES", "MARKERS", "PAGE_IN", "PALETTE", "check_format",
           "colours", "paper_style", "save", "text_colour"]
