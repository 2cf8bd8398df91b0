"""What of an input's own names a trace keeps (docs/robustness.md, "Names from the input").

Profilers name their files after the host and process (Kineto's default is
``<hostname>_<pid>.<timestamp>.pt.trace.json``) and store whatever the device reported as its
name; both travel into ``trace_name``, ``source_files`` and ``gpu_model``, and from there into
``tracegen info``, ``replay --json`` and every timeline. By default an imported trace keeps none
of them:

* ``trace_name``: the output's own base name (what the user chose), without its suffix;
* ``source_files``: ``input1.json.gz``, ``input2.sqlite``, ...: the position and the file type
  only (the type is what a reader of the trace needs to know about its origin);
* ``gpu_model``: the known product whose name the reported one contains (:data:`PRODUCTS`,
  e.g. "NVIDIA H100 80GB HBM3" -> ``NVIDIA H100``), else ``unknown``.

``--keep-source-names`` (``tracegen convert``) keeps them as read.
"""

from __future__ import annotations

import os
import re
from pathlib import PurePath
from typing import Any, Mapping, Sequence

PRODUCTS = (
    # (the product, a pattern its reported names match); most specific first
    ("NVIDIA GH200", r"GH200"), ("NVIDIA GB200", r"GB200"), ("NVIDIA GB300", r"GB300"),
    ("NVIDIA H100 NVL", r"H100\s*NVL"), ("NVIDIA H100 PCIe", r"H100\s*PCIe"), ("NVIDIA H100", r"H100"),
    ("NVIDIA H200", r"H200"), ("NVIDIA H800", r"H800"), ("NVIDIA H20", r"H20"),
    ("NVIDIA B300", r"B300"), ("NVIDIA B200", r"B200"), ("NVIDIA B100", r"B100"),
    ("NVIDIA A100", r"A100"), ("NVIDIA A800", r"A800"), ("NVIDIA A10G", r"A10G"), ("NVIDIA A10", r"A10"),
    ("NVIDIA A30", r"A30"), ("NVIDIA A40", r"A40"), ("NVIDIA A6000", r"A6000"),
    ("NVIDIA L40S", r"L40S"), ("NVIDIA L40", r"L40"), ("NVIDIA L4", r"L4"),
    ("NVIDIA V100", r"V100"), ("NVIDIA T4", r"T4"), ("NVIDIA P100", r"P100"),
    ("NVIDIA RTX 4090", r"4090"), ("NVIDIA RTX 3090", r"3090"),
    ("AMD Instinct MI300X", r"MI300X"), ("AMD Instinct MI300A", r"MI300A"), ("AMD Instinct MI325X", r"MI325X"),
    ("AMD Instinct MI250X", r"MI250X"), ("AMD Instinct MI250", r"MI250"), ("AMD Instinct MI210", r"MI210"),
    ("AMD Instinct MI100", r"MI100"),
)
"""Known products, most specific first. A reported name maps to the first product whose pattern it
holds as a whole word (so "A100-SXM4-80GB" is an A100 and "A1000" is not)."""
_PATTERNS = tuple((name, re.compile(rf"(?<![A-Za-z0-9]){pat}(?![A-Za-z0-9])", re.IGNORECASE)) for name, pat in PRODUCTS)
UNKNOWN = "unknown"
_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json", ".sqlite", ".nsys-rep", ".et.gz", ".et",
             ".parquet", ".gz")


def product_name(reported: object) -> str:
    """The known product a reported GPU name names (:data:`PRODUCTS`), else ``unknown``; several
    GPUs joined by " / " map each (duplicates kept once, in order)."""
    if not isinstance(reported, str) or not reported.strip():
        return UNKNOWN
    out: list[str] = []
    for part in reported.split(" / ")[:64]:
        part = part[:256]  # (a product name is short; longer text is not one)
        name = next((n for n, p in _PATTERNS if p.search(part)), UNKNOWN)
        if name not in out:
            out.append(name)
    return " / ".join(out)


def file_type(name: object) -> str:
    """The known suffix of a file name (``.json.gz``, ``.sqlite``, ...), or ``""``."""
    low = str(name).lower()
    return next((s for s in _SUFFIXES if low.endswith(s)), "")


def output_label(output: str | os.PathLike) -> str:
    """A trace's default name: the output's base name without its known suffix."""
    base = PurePath(os.fspath(output)).name
    suffix = file_type(base)
    return base[: len(base) - len(suffix)] if suffix and len(base) > len(suffix) else base


def scrub(meta: Mapping[str, Any], output: str | os.PathLike | None, keep: bool = False) -> dict[str, Any]:
    """``meta`` with the input's own names replaced as the module docstring says (``keep``: as
    read). ``output``: the file being written (its base name becomes ``trace_name``); ``None``
    (an in-memory import) gives ``trace_name`` = ``imported``."""
    out = dict(meta)
    if keep:
        return out
    out["trace_name"] = output_label(output) if output is not None else "imported"
    files: Sequence[Any] = out.get("source_files") or ()
    if isinstance(files, (list, tuple)):
        out["source_files"] = [f"input{i + 1}{file_type(f)}" for i, f in enumerate(files)]
    if "gpu_model" in out:
        out["gpu_model"] = product_name(out["gpu_model"])
    return out


__all__ = ["PRODUCTS", "UNKNOWN", "product_name", "file_type", "output_label", "scrub"]
