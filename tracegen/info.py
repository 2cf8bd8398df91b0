"""``tracegen info TRACE [--json]``: what a trace holds, at a glance.

Op counts by kind, copied bytes by direction and host memory, ranks, span per rank, dependency
counts by kind, profiler steps and the file's metadata. Reads only the columns it needs, so a
million-op trace takes about a second.
"""

from __future__ import annotations

import json
from typing import Any

import click
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fastrack_core.cli_support import reports_errors
from fastrack_core.outputs import check_input_path
from fastrack_core.schema import CopyDir, DepKind, OpKind
from fastrack_core.setup_time import computes, format_setup, setup_split
from fastrack_core.traceio import read_trace

COLUMNS = ["rank", "kind", "start_ns", "dur_ns", "bytes", "copy_dir", "host_mem", "step", "dep_kinds"]
_META_ORDER = ("trace_name", "source_format", "source_files", "capture_tool", "tool_versions", "gpu_model",
               "emulated", "device_model", "world_size", "ranks", "schema_version", "created_by")


def format_ns(ns: int) -> str:
    """12 ns, 3.456 us, 12.345 ms, 1.234 s."""
    a = abs(ns)
    if a < 1_000:
        return f"{ns} ns"
    if a < 1_000_000:
        return f"{ns / 1e3:.3f} us"
    if a < 1_000_000_000:
        return f"{ns / 1e6:.3f} ms"
    return f"{ns / 1e9:.3f} s"


def format_bytes(n: int) -> str:
    """812 B, 4.00 KiB, 1.50 GiB."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{int(value)} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _counts(col: pa.ChunkedArray) -> dict[str, int]:
    out: dict[str, int] = {}
    for row in pc.value_counts(col).to_pylist():
        key = row["values"]
        out[str(key)] = out.get(str(key), 0) + int(row["counts"])
    return out


def trace_info(path: str) -> dict[str, Any]:
    """All numbers of ``tracegen info`` as one JSON-ready dict."""
    trace = read_trace(path, columns=COLUMNS)
    t = trace.table
    meta = trace.metadata

    by_kind = _counts(t.column("kind"))
    ops_by_kind = {k.label: by_kind.pop(k.label, 0) for k in OpKind}
    ops_by_kind.update(sorted(by_kind.items()))  # unknown kinds, if any (an invalid file)

    copies: dict[str, Any] = {}
    is_copy = pc.is_valid(t.column("copy_dir"))
    rows = (
        t.select(["copy_dir", "host_mem", "bytes"])
        .filter(is_copy)
        .group_by(["copy_dir", "host_mem"])
        .aggregate([("bytes", "sum"), ("bytes", "count")])
        .to_pylist()
    )
    for row in sorted(rows, key=lambda r: (str(r["copy_dir"]), str(r["host_mem"]))):
        d = copies.setdefault(str(row["copy_dir"]), {"count": 0, "bytes": 0, "by_host_mem": {}})
        mem = row["host_mem"] if row["host_mem"] is not None else "unknown"
        d["count"] += int(row["bytes_count"])
        d["bytes"] += int(row["bytes_sum"])
        d["by_host_mem"][mem] = {"count": int(row["bytes_count"]), "bytes": int(row["bytes_sum"])}

    spans = pa.table({
        "rank": t.column("rank"),
        "start": t.column("start_ns"),
        "end": pc.add(t.column("start_ns"), t.column("dur_ns")),
    }).group_by("rank").aggregate([("start", "min"), ("end", "max"), ("start", "count")]).to_pylist()
    span_by_rank = {}
    for row in sorted(spans, key=lambda r: r["rank"]):
        span = int(row["end_max"]) - int(row["start_min"])
        span_by_rank[str(row["rank"])] = {
            "ops": int(row["start_count"]),
            "start_ns": int(row["start_min"]),
            "end_ns": int(row["end_max"]),
            "span_ns": span,
            "span": format_ns(span),
        }
    ranks = [int(r) for r in span_by_rank]

    dk = t.column("dep_kinds").combine_chunks()
    codes = dk.values.to_numpy() if len(dk) else np.zeros(0, np.uint8)
    counts = np.bincount(codes.astype(np.int64), minlength=len(DepKind)) if codes.size else np.zeros(len(DepKind), int)
    deps_by_kind = {k.label: int(counts[k]) for k in DepKind}
    for code in range(len(DepKind), counts.size):  # unknown codes (an invalid file)
        if counts[code]:
            deps_by_kind[f"code{code}"] = int(counts[code])

    steps = pc.unique(pc.filter(t.column("step"), pc.greater_equal(t.column("step"), 0))).to_numpy()
    step_info = {
        "count": int(steps.size),
        "first": int(steps.min()) if steps.size else None,
        "last": int(steps.max()) if steps.size else None,
        "ops_in_steps": int(pc.sum(pc.greater_equal(t.column("step"), 0).cast(pa.int64())).as_py() or 0),
    }

    return {
        "path": path,
        "setup": trace_setup(t, meta),
        "ops": t.num_rows,
        "ops_by_kind": ops_by_kind,
        "copies": copies,
        "ranks": ranks,
        "world_size": int(meta.get("world_size", len(ranks))),
        "span_by_rank": span_by_rank,
        "deps": int(codes.size),
        "deps_by_kind": deps_by_kind,
        "steps": step_info,
        "metadata": {k: meta[k] for k in _META_ORDER if k in meta},
    }


def trace_setup(t: pa.Table, meta: dict[str, Any]) -> dict[str, Any]:
    """One-time setup in the recorded span (:func:`fastrack_core.setup_time.setup_split`; its rule in
    docs/capture.md, "Setup out of the window"), and what a capture window left out."""
    start = t.column("start_ns").to_numpy().astype(np.int64)
    end = start + t.column("dur_ns").to_numpy().astype(np.int64)
    codes = {k.label: int(k) for k in OpKind}
    kind = np.array([codes.get(str(k), -1) for k in t.column("kind").to_pylist()], np.int64)
    dirs = {c.label: int(c) for c in CopyDir}
    copy_dir = np.array([dirs.get(d, 0) for d in t.column("copy_dir").to_pylist()], np.int64)
    window = meta.get("window") if isinstance(meta.get("window"), dict) else None
    out = setup_split(start, end, t.column("step").to_numpy(), computes(kind, copy_dir), windowed=window is not None)
    if window is not None:
        out["window"] = dict(window)
    return out


def _table(rows: list[list[str]], header: list[str], right: set[int]) -> list[str]:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]

    def fmt(r: list[str]) -> str:
        return "  ".join(str(c).rjust(w) if i in right else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths)))

    return ["  " + fmt(header).rstrip(), "  " + "  ".join("-" * w for w in widths)] + ["  " + fmt(r).rstrip() for r in rows]


def render(info: dict[str, Any]) -> str:
    """The human-readable report."""
    out = [f"trace {info['path']}", ""]
    meta = info["metadata"]
    out.append("metadata")
    for key in _META_ORDER:
        if key in meta:
            value = meta[key]
            if key == "tool_versions":
                value = ", ".join(f"{k} {v}" for k, v in sorted(value.items())) or "-"
            elif key in ("source_files", "ranks"):
                value = ", ".join(str(v) for v in value) or "-"
            elif key == "emulated":
                value = "yes (cost model)" if value else "no (real hardware)"
            elif value is None:
                value = "-"
            out.append(f"  {key:<15} {value}")
    out += ["", f"ops: {info['ops']}"]
    total = max(info["ops"], 1)
    rows = [[k, str(v), f"{100 * v / total:.1f}%"] for k, v in info["ops_by_kind"].items() if v]
    out += _table(rows, ["kind", "ops", "share"], {1, 2})

    out += ["", "copies"]
    if info["copies"]:
        rows = []
        for d, c in info["copies"].items():
            rows.append([d, "all", str(c["count"]), str(c["bytes"]), format_bytes(c["bytes"])])
            for mem, m in c["by_host_mem"].items():
                rows.append(["", mem, str(m["count"]), str(m["bytes"]), format_bytes(m["bytes"])])
        out += _table(rows, ["direction", "host memory", "copies", "bytes", "size"], {2, 3, 4})
    else:
        out.append("  none")

    out += ["", f"ranks: {len(info['ranks'])} present of world size {info['world_size']}"]
    rows = [[r, str(s["ops"]), str(s["span_ns"]), s["span"]] for r, s in info["span_by_rank"].items()]
    out += _table(rows, ["rank", "ops", "span (ns)", "span"], {1, 2, 3})

    out += ["", f"dependencies: {info['deps']}"]
    rows = [[k, str(v)] for k, v in info["deps_by_kind"].items() if v]
    out += _table(rows, ["kind", "deps"], {1}) if rows else ["  none"]

    s = info["steps"]
    out.append("")
    if s["count"]:
        out.append(f"steps: {s['count']} (#{s['first']} .. #{s['last']}), {s['ops_in_steps']} op(s) inside a step")
    else:
        out.append("steps: none")
    setup = info.get("setup")
    if setup is not None:
        out += ["", format_setup(setup)]
        w = setup.get("window")
        if w:
            to = f" to the end of {w.get('to')} ({w.get('to_kind')})" if w.get("to") else ""
            out.append(f"  window from {w.get('from')} ({w.get('from_kind')}){to}: left out "
                       f"{w.get('ops_before', 0)} op(s), {format_ns(int(w.get('before_ns') or 0))} before it and "
                       f"{w.get('ops_after', 0)} op(s), {format_ns(int(w.get('after_ns') or 0))} after it")
    return "\n".join(out)


@click.command("info", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("trace", metavar="TRACE")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of tables.")
@reports_errors
def command(trace: str, as_json: bool) -> None:
    """Summarise a Fastrack trace: op counts, copied bytes, ranks and spans, deps, steps, metadata."""
    check_input_path(trace)  # a FIFO or a device would block the Parquet reader
    info = trace_info(trace)
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        click.echo(render(info))


__all__ = ["command", "trace_info", "render", "format_ns", "format_bytes"]
