"""Workloads of the serving simulator: who sends which request when.

* ``poisson``: open loop, exponential inter-arrival times at ``rate`` requests/s from a seeded
  generator (numpy PCG64: the same seed gives the same arrivals);
* ``closed``: a closed loop of ``concurrency`` clients, each sending its next request the moment
  its previous one has its last token (SGLang's and vLLM's ``--max-concurrency``); arrivals are
  therefore decided by the simulation;
* ``file``: a request file, CSV (header ``arrival_s,input_tokens,output_tokens``) or JSONL (one
  object per line with those keys): arrival times in seconds from 0, non-decreasing; token counts
  integers >= 1.

Lengths for ``poisson`` and ``closed``: ``fixed:IN:OUT`` or ``sharegpt`` (the ShareGPT-like table
``data/sharegpt_like.csv``, drawn with replacement by the seed). That table is generated, not
copied: :func:`sharegpt_like` draws 1000 (input, output) pairs from two log-normal distributions
(assumption: medians 100 input / 180 output tokens, log-sigma 1.0 / 0.9, clipped to [4, 2048] and
[1, 1024]; the long-tailed shape published ShareGPT histograms show, mean input about 160 and
mean output about 270 tokens; a plausible range for either mean is 100-400 tokens).
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from fastrack_core.errors import ConfigError

DATA = Path(__file__).resolve().parent / "data"
SHAREGPT_FILE = DATA / "sharegpt_like.csv"
SHAREGPT_SEED = 20240905
SHAREGPT_ROWS = 1000
# assumption (module docstring): log-normal medians and log-sigmas of the generated table
SHAREGPT_INPUT = (100.0, 1.0, 4, 2048)  # median tokens, log-sigma, min, max
SHAREGPT_OUTPUT = (180.0, 0.9, 1, 1024)
FIELDS = ("arrival_s", "input_tokens", "output_tokens")


@dataclass(frozen=True)
class Workload:
    """Requests in id order: input and output tokens; ``arrival_ns`` for open loops (None for a
    closed loop, whose arrivals the simulation decides); ``concurrency`` for a closed loop."""

    kind: str
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    arrival_ns: np.ndarray | None = None
    concurrency: int = 0
    describe: str = ""

    @property
    def n(self) -> int:
        return int(self.input_tokens.size)


def sharegpt_like(seed: int = SHAREGPT_SEED, rows: int = SHAREGPT_ROWS) -> np.ndarray:
    """The generated ShareGPT-like table, (rows, 2) int64 of (input, output) tokens."""
    rng = np.random.Generator(np.random.PCG64(seed))
    cols = []
    for med, sig, lo, hi in (SHAREGPT_INPUT, SHAREGPT_OUTPUT):
        cols.append(np.clip(np.round(rng.lognormal(math.log(med), sig, rows)), lo, hi).astype(np.int64))
    return np.stack(cols, axis=1)


def sharegpt_csv(table: np.ndarray) -> str:
    out = io.StringIO()
    out.write("input_tokens,output_tokens\n")
    for a, b in table.tolist():
        out.write(f"{a},{b}\n")
    return out.getvalue()


def _lengths(spec: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    if spec == "sharegpt":
        table = np.loadtxt(SHAREGPT_FILE, delimiter=",", skiprows=1, dtype=np.int64)
        pick = rng.integers(0, table.shape[0], n)
        return table[pick, 0].copy(), table[pick, 1].copy()
    parts = spec.split(":")
    if len(parts) == 3 and parts[0] == "fixed" and all(p.isdigit() and int(p) >= 1 for p in parts[1:]):
        return np.full(n, int(parts[1]), np.int64), np.full(n, int(parts[2]), np.int64)
    raise ConfigError("--lengths must be 'sharegpt' or 'fixed:IN:OUT' (integers >= 1)")


def parse_workload(spec: str, requests: int, lengths: str, seed: int) -> Workload:
    """``poisson:RATE`` (requests/s), ``closed:CONCURRENCY`` or ``file:PATH``."""
    kind, _, arg = spec.partition(":")
    if kind == "file":
        return read_request_file(arg)
    if requests < 1:
        raise ConfigError("--requests must be at least 1")
    rng = np.random.Generator(np.random.PCG64(seed))
    if kind == "poisson":
        try:
            rate = float(arg)
        except ValueError:
            raise ConfigError("--workload poisson:RATE: the rate is not a number") from None
        if not math.isfinite(rate) or rate <= 0:
            raise ConfigError("--workload poisson:RATE: the rate must be a finite number > 0 (requests/s)")
        gaps = rng.exponential(1.0 / rate, requests)
        arrival = np.round(np.cumsum(gaps) * 1e9).astype(np.int64)
        arrival -= arrival[0]
        inp, out = _lengths(lengths, requests, rng)
        return Workload("poisson", inp, out, arrival_ns=arrival, describe=f"Poisson {rate:g} req/s, seed {seed}")
    if kind == "closed":
        if not arg.isdigit() or int(arg) < 1:
            raise ConfigError("--workload closed:CONCURRENCY: the concurrency must be an integer >= 1")
        inp, out = _lengths(lengths, requests, rng)
        return Workload("closed", inp, out, concurrency=int(arg), describe=f"closed loop, concurrency {int(arg)}")
    raise ConfigError("--workload must be poisson:RATE, closed:CONCURRENCY or file:PATH")


def read_request_file(path: str) -> Workload:
    """A CSV or JSONL request file (module docstring); ConfigError naming the file, the row and
    the field on the first problem."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError:
        raise ConfigError("cannot read the request file", path=path) from None
    rows: list[dict] = []
    if p.suffix.lower() in (".jsonl", ".ndjson"):
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                raise ConfigError(f"line {i}: not a JSON object", path=path) from None
            if not isinstance(obj, dict):
                raise ConfigError(f"line {i}: not a JSON object", path=path)
            rows.append({"_row": f"line {i}", **obj})
    else:
        reader = csv.DictReader(io.StringIO(text))
        missing = [f for f in FIELDS if f not in (reader.fieldnames or [])]
        if missing:
            raise ConfigError(f"header: missing field '{missing[0]}' (want {','.join(FIELDS)})", path=path)
        for i, r in enumerate(reader, 2):
            rows.append({"_row": f"line {i}", **r})
    if not rows:
        raise ConfigError("no requests", path=path)
    arr, inp, out = [], [], []
    for r in rows:
        where = r["_row"]
        for f in FIELDS:
            if f not in r:
                raise ConfigError(f"{where}: missing field '{f}'", path=path)
        try:
            a = float(r["arrival_s"])
        except (TypeError, ValueError):
            raise ConfigError(f"{where}: field 'arrival_s' is not a number", path=path) from None
        if not math.isfinite(a) or a < 0:
            raise ConfigError(f"{where}: field 'arrival_s' must be a finite time >= 0 (seconds)", path=path)
        if arr and a * 1e9 < arr[-1]:
            raise ConfigError(f"{where}: field 'arrival_s' goes back in time (arrivals must be non-decreasing)",
                              path=path)
        vals = []
        for f in ("input_tokens", "output_tokens"):
            v = r[f]
            try:
                iv = int(v) if not isinstance(v, float) or v.is_integer() else None
            except (TypeError, ValueError):
                iv = None
            if iv is None or iv < 1:
                raise ConfigError(f"{where}: field '{f}' must be an integer >= 1", path=path)
            vals.append(iv)
        arr.append(int(round(a * 1e9)))
        inp.append(vals[0])
        out.append(vals[1])
    return Workload("file", np.array(inp, np.int64), np.array(out, np.int64), arrival_ns=np.array(arr, np.int64),
                    describe=f"request file ({len(rows)} requests)")
