#!/usr/bin/env python
"""Digests of every protocol's transformed graph and replay JSON, to prove a speed change changed
nothing (a script, not a test; docs/performance.md "Protocol transforms").

    python benchmarks/tools/protocol_digests.py save FILE    # record today's digests
    python benchmarks/tools/protocol_digests.py check FILE   # compare; exit 1 naming every difference

Cases: the test fixtures of tests/data (converted into benchmarks/out/golden/), random synthetic
traces (one and two ranks) and pageable-copy microbenchmarks (the 8-rank fixture runs the
GPU-to-GPU path); each under every registered protocol (plus the ``+option`` systems where
the graph has collectives) and a few model settings (more CPU crypto threads, small bounce slots,
the AES-NI preset). Per case: a SHA-256 of every OpGraph field of the transformed graph (arrays
with their dtype and shape; lanes, names, kind names, calibration), and a SHA-256 of the replay's
JSON (``ReplayResult.to_dict()``, sorted keys).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent  # benchmarks/<kind>/ -> the repository root
GOLD = ROOT / "benchmarks" / "out" / "golden"
DATA = ROOT / "tests" / "data"

FIXTURES = ("a100_cuda_event_sync_tiny.json.gz", "h100_bert_small_uncased.json.gz", "h100_qwen1.5_0.5b_chat.json.gz",
            "v100_dlrm_8rank")
SYNTH = (("random-20000-s3", ["random", "--ops", "20000", "--seed", "3"]),
         ("random-20000-s4-r2", ["random", "--ops", "20000", "--seed", "4", "--ranks", "2"]),
         ("memcpy-h2d-pageable", ["memcpy", "--bytes", "9MiB", "--direction", "h2d", "--memory", "pageable",
                                  "--repeat", "5"]),
         ("memcpy-d2h-pageable", ["memcpy", "--bytes", "5MiB", "--direction", "d2h", "--memory", "pageable",
                                  "--repeat", "4"]))
SETTINGS = {"default": (None, ()), "threads4": (None, ("cpu_crypto.threads=4",)),
            "slot64k": (None, ("bounce.slot_bytes=65536", "bounce.max_slots=16")),
            "aesni": ("h100-sxm-aesni", ())}


def _traces() -> dict[str, Path]:
    GOLD.mkdir(parents=True, exist_ok=True)
    out = {}
    for name in FIXTURES:
        dst = GOLD / (name.split(".json")[0] + ".parquet")
        if not dst.exists():
            subprocess.run([sys.executable, "-m", "tracegen.cli", "convert", str(DATA / name), "-o", str(dst)],
                           check=True, cwd=ROOT)
        out[dst.stem] = dst
    for stem, args in SYNTH:
        dst = GOLD / f"{stem}.parquet"
        if not dst.exists():
            subprocess.run([sys.executable, "-m", "tracegen.cli", "synth", *args, "-o", str(dst)], check=True, cwd=ROOT)
        out[stem] = dst
    return out


def _feed(h, value) -> None:
    if isinstance(value, np.ndarray):
        h.update(f"{value.dtype.str}{value.shape}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    else:
        h.update(repr(value).encode())


def graph_digest(graph) -> str:
    """SHA-256 over every field of an OpGraph (and of its Lanes), in declaration order."""
    import dataclasses

    h = hashlib.sha256()
    for f in dataclasses.fields(graph):
        v = getattr(graph, f.name)
        h.update(f.name.encode())
        if f.name == "lanes":
            for lf in dataclasses.fields(v):
                _feed(h, getattr(v, lf.name))
        elif f.name == "kind_names":
            _feed(h, sorted(v.items()))
        elif f.name == "calibration":
            _feed(h, None if v is None else json.dumps(v.to_dict(), sort_keys=True))
        else:
            _feed(h, v)
    return h.hexdigest()


def _protocols(graph) -> list[str]:
    from replay.plugins import available_protocols
    from replay.protocols.multigpu import OPTIONS
    from replay.protocols.p2p import has_collectives

    names = [p for p in available_protocols() if p != "captured"]
    if has_collectives(graph):
        names += [f"{s}+{o}" for s in ("baseline", "fastrack") for o in OPTIONS] + ["baseline+batched-meta+keymgmt"]
    else:
        names = [p for p in names if p not in ("cc-multi:batched-meta", "cc-multi:keymgmt", "cc-multi:all")]
    return names


def digests() -> dict[str, dict[str, str]]:
    from replay.plugins import load_model, load_protocol
    from replay.pipeline.run import load_graph, replay_graph

    out = {}
    graphs = {}
    for stem, path in _traces().items():
        graphs[stem] = load_graph(path)[0]
    for stem, graph in graphs.items():
        for setting, (preset, overrides) in SETTINGS.items():
            if setting != "default" and stem not in ("random-20000-s3", "memcpy-h2d-pageable", "memcpy-d2h-pageable", "v100_dlrm_8rank"):
                continue
            hw = load_model("h100").from_preset(preset, overrides)
            for proto in _protocols(graph):
                key = f"{stem}/{setting}/{proto}"
                g = load_protocol(proto)(graph, hw)
                res = replay_graph(graph, proto, "h100", preset, overrides, trace_ops=graph.n).result
                out[key] = {"graph": graph_digest(g),
                            "json": hashlib.sha256(json.dumps(res.to_dict(), sort_keys=True).encode()).hexdigest()}
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[0] not in ("save", "check"):
        print(__doc__, file=sys.stderr)
        return 2
    now = digests()
    path = Path(argv[1])
    if argv[0] == "save":
        path.write_text(json.dumps(now, indent=1, sort_keys=True))
        print(f"{len(now)} cases saved to {path}")
        return 0
    then = json.loads(path.read_text())
    bad = [k for k in sorted(set(then) | set(now)) if then.get(k) != now.get(k)]
    for k in bad:
        print(f"DIFFERS: {k}: {then.get(k)} -> {now.get(k)}")
    print(f"{len(now)} cases, {len(bad)} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
