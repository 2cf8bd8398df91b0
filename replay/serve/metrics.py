"""Metrics of a simulated serving run, SLOs and goodput.

Per request: TTFT = first token - arrival (the client's view: queueing included); server TTFT =
first token - admission (what a replay's ``arrive`` marker measures); TPOT = (last token - first
token) / (output tokens - 1); end-to-end = last token - arrival. ITL: the gaps between two
consecutive tokens of a request, pooled over requests (the simulator's ``itl_period_ns`` and
``itl_weight``: each decode step gives each of its decoding requests one gap, from the delivery of
the previous step's tokens to that of its own; the first token's wait is TTFT, not a gap), so with
equal output lengths mean ITL and mean TPOT agree. Aggregates: mean, p50, p90, p99. Output tokens/s and
requests/s over the span from the first admission to the last token (the server's clock, as a
replay's request markers measure it; in an open loop the first request is admitted as it arrives). Goodput: requests/s of the requests that meet every SLO given (TTFT and/or TPOT; a
request with one output token meets any TPOT SLO), over the same span.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from fastrack_core.errors import ConfigError
from replay.serve.sim import SimResult

_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_SLO_RE = re.compile(r"^(ttft|tpot)=([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)(ns|us|ms|s)$")
QUANTILES = (50, 90, 99)


def parse_slo(spec: str | None) -> dict[str, float]:
    """``ttft=200ms,tpot=50ms`` -> {"ttft": ns, "tpot": ns}; a value needs a unit (ns, us, ms, s)."""
    if not spec:
        return {}
    out: dict[str, float] = {}
    for i, part in enumerate(spec.split(","), 1):
        m = _SLO_RE.match(part.strip())
        if m is None:
            raise ConfigError(f"--slo: item {i} must be ttft=VALUE or tpot=VALUE with a unit (ns, us, ms, s), "
                              "e.g. ttft=200ms")
        value = float(m.group(2)) * _UNITS[m.group(3)]
        if not math.isfinite(value) or value <= 0:
            raise ConfigError(f"--slo: item {i} must be a finite time > 0")
        out[m.group(1)] = value
    return out


def _stats(x: np.ndarray, w: np.ndarray | None = None) -> dict[str, float | None]:
    if x.size == 0:
        return {"mean": None, **{f"p{q}": None for q in QUANTILES}}
    if w is None:
        return {"mean": float(x.mean()), **{f"p{q}": float(np.percentile(x, q)) for q in QUANTILES}}
    order = np.argsort(x, kind="stable")
    xs, ws = x[order].astype(float), w[order].astype(float)
    cum = np.cumsum(ws)
    total = cum[-1]
    out: dict[str, float | None] = {"mean": float((xs * ws).sum() / total)}
    for q in QUANTILES:
        out[f"p{q}"] = float(xs[min(np.searchsorted(cum, q / 100 * total), xs.size - 1)])
    return out


def metrics(res: SimResult, slo: dict[str, float]) -> dict[str, Any]:
    ok = res.last_ns >= 0
    ttft = (res.first_ns - res.arrival_ns)[ok]
    ttft_server = (res.first_ns - res.admit_ns)[ok]
    e2e = (res.last_ns - res.arrival_ns)[ok]
    multi = ok & (res.output_tokens > 1)
    tpot = (res.last_ns - res.first_ns)[multi] / (res.output_tokens[multi] - 1)
    tokens = int(res.output_tokens[ok].sum())
    span = int(res.last_ns[ok].max() - res.admit_ns[ok].min()) if ok.any() else 0
    per_s = (lambda x: x / (span / 1e9)) if span > 0 else (lambda x: None)
    good = np.ones(int(ok.sum()), bool)
    if "ttft" in slo:
        good &= ttft <= slo["ttft"]
    if "tpot" in slo:
        tp_all = np.zeros(res.output_tokens.size)
        tp_all[multi] = tpot
        good &= tp_all[ok] <= slo["tpot"]
    return {
        "protocol": res.protocol,
        "scheduler": res.scheduler,
        "requests": int(ok.sum()),
        "output_tokens": tokens,
        "span_ns": span,
        "steps": res.steps,
        "output_tokens_per_s": per_s(tokens),
        "requests_per_s": per_s(int(ok.sum())),
        "goodput_requests_per_s": per_s(int(good.sum())) if slo else None,
        "slo_attained": float(good.mean()) if slo and good.size else None,
        "ttft_ns": _stats(ttft),
        "ttft_server_ns": _stats(ttft_server),
        "tpot_ns": _stats(tpot),
        "itl_ns": _stats(res.itl_period_ns, res.itl_weight),
        "e2e_ns": _stats(e2e),
        "mean_batch_tokens": float((res.batch_tokens * res.batch_steps).sum() / max(res.batch_steps.sum(), 1)),
        "busy_ns": res.busy_ns,
        "host_extra_ns": res.host_extra_ns,
        "mechanism_ns": dict(sorted(res.mechanism_ns.items())),
    }


def added_by_mechanism(mine: dict[str, Any], ref: dict[str, Any]) -> dict[str, float]:
    """What the protocol added per mechanism against ``none``, ns per output token (the step
    graphs' critical paths summed over the simulated steps); changes under 0.5 ns left out."""
    a, b = mine["mechanism_ns"], ref["mechanism_ns"]
    ta, tb = max(mine["output_tokens"], 1), max(ref["output_tokens"], 1)
    out = {k: a.get(k, 0.0) / ta - b.get(k, 0.0) / tb for k in set(a) | set(b)}
    return dict(sorted(((k, v) for k, v in out.items() if abs(v) >= 0.5), key=lambda kv: -abs(kv[1])))
