"""One serving simulation, as a library call: price the captured steps under each protocol, then
run the request-level loop for each load point (docs/serving.md, "The request-level simulator")."""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from fastrack_core.errors import ConfigError
from replay.names import CAPTURED, NONE
from replay.serve.metrics import added_by_mechanism, metrics
from replay.serve.schedulers import HOST_TIME_MODES, scheduler
from replay.serve.sim import simulate
from replay.serve.steps import price_tables
from replay.serve.workloads import Workload, parse_workload

INTERPOLATION_NOTE = ("step prices: each captured step priced by one replay of its own step graph (mean per shape "
                      "(prefill tokens, decode requests)); other shapes interpolated piecewise-linearly (decode-only "
                      "in the decode count; prefill as an increment in the prefill tokens over the decode-only price), "
                      "extrapolated linearly beyond the captured shapes; context length is not an axis")


def load_points(spec: str) -> list[str]:
    """``poisson:1,2,4`` -> ["poisson:1", "poisson:2", "poisson:4"] (one load point each)."""
    kind, sep, arg = spec.partition(":")
    if kind in ("poisson", "closed") and sep and "," in arg:
        return [f"{kind}:{a}" for a in arg.split(",")]
    return [spec]


def serve(trace: str, protocols: Sequence[str], workload: str, requests: int = 1000, lengths: str = "sharegpt",
          seed: int = 0, scheduler_name: str = "sglang", max_seqs: int = 256, max_batched_tokens: int = 2048,
          host_time: str = "capture", slo: dict[str, float] | None = None, model: str | None = None,
          preset: str | None = None, overrides: Sequence[str] = ()) -> dict[str, Any]:
    from replay.pipeline.run import load_graph
    from replay.plugins import DEFAULT_MODEL

    protocols = [p.strip() for p in protocols if p.strip()]
    if not protocols:
        raise ConfigError("--protocols is empty: name at least one protocol")
    if CAPTURED in protocols:
        raise ConfigError(f"--protocols: '{CAPTURED}' has no hardware model to price steps with; use {NONE}")
    if host_time not in HOST_TIME_MODES:
        raise ConfigError(f"--host-time must be one of {', '.join(HOST_TIME_MODES)}")
    sched = scheduler(scheduler_name)
    specs = load_points(workload)
    works: list[Workload] = [parse_workload(p, requests, lengths, seed) for p in specs]
    slo = slo or {}
    graph, _ = load_graph(trace)
    wanted = list(dict.fromkeys([NONE, *protocols]))
    tables, steps = price_tables(graph, str(trace), wanted, model or DEFAULT_MODEL, preset, tuple(overrides))
    del graph
    points = []
    for spec, w in zip(specs, works):
        rows = {}
        for p in wanted:
            rows[p] = metrics(simulate(w, tables[p], sched, max_seqs, max_batched_tokens, host_time), slo)
        for p in wanted:
            rows[p]["added_by_mechanism_ns_per_token"] = added_by_mechanism(rows[p], rows[NONE])
            ref = rows[NONE]
            rows[p]["vs_none"] = {
                "output_tokens_per_s": _rel(rows[p]["output_tokens_per_s"], ref["output_tokens_per_s"]),
                "ttft_mean": _rel(rows[p]["ttft_ns"]["mean"], ref["ttft_ns"]["mean"]),
                "tpot_mean": _rel(rows[p]["tpot_ns"]["mean"], ref["tpot_ns"]["mean"]),
            }
        points.append({"workload": w.describe, "kind": w.kind, "load": float(spec.partition(":")[2]) if w.kind != "file" else None,
                       "rows": [rows[p] for p in protocols]})
    notes = [INTERPOLATION_NOTE, "where a step hands out tokens is read from the capture's own loop: simulate a "
             "synchronous capture with a synchronous scheduler (vllm, static), an overlap capture (--overlap) with sglang"]
    for p in wanted:
        t = tables[p]
        if t.interpolated:
            notes.append(f"{p}: {len(t.interpolated)} shape(s) interpolated, {len(t.extrapolated)} of them beyond "
                         f"the captured shapes (extrapolated)")
    if host_time != "capture":
        notes.append("host time per step: the capture's plus vLLM v0.5.3's scheduling share (29% of time vs 38% GPU, "
                     "vLLM v0.6.0 performance update) scaled to each step's GPU time")
    return {"trace": str(trace), "scheduler": dataclasses.asdict(sched), "max_seqs": max_seqs,
            "max_batched_tokens": max_batched_tokens, "host_time": host_time, "requests": works[0].n,
            "lengths": lengths if works[0].kind != "file" else "file", "seed": seed,
            "slo_ns": dict(slo), "captured_steps": len(steps),
            "captured_shapes": len(tables[NONE].captured), "points": points, "notes": notes}


def _rel(a, b):
    return None if a is None or not b else (a - b) / b
