"""Every protocol's transformed graph is exactly what it was before the transforms were made fast
(docs/performance.md, "Protocol transforms"): a SHA-256 over every OpGraph field (arrays with
dtype and shape, edge order included; lanes, names, kind names) of each case, against digests
recorded with the code before that work (tests/protocol_digests.json).

Cases: small random synthetic traces (one and two ranks), pageable copy microbenchmarks (H2D,
D2H), and the tiny real fixture, under every installed protocol (the registry, aliases included:
a new protocol is covered without editing this file), with the default model and two settings
that take other paths (CPU crypto on worker threads; small bounce slots). A protocol that refuses
a case (a multi-GPU option on a one-GPU trace) has its one-line refusal recorded instead.

A protocol with no digest recorded fails the test, naming it: record the new cases, leaving every
recorded one as it is, with ``python tests/test_protocol_digests.py --add`` (it rewrites
tests/protocol_digests.json). A deliberate change of what a protocol builds (a model fix) changes
these digests: regenerate them all with ``python tests/test_protocol_digests.py >
tests/protocol_digests.json`` and say why in the commit. A speed change must not."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
DIGESTS = HERE / "protocol_digests.json"
SETTINGS = {"default": (), "threads4": ("cpu_crypto.threads=4",),
            "slot64k": ("bounce.slot_bytes=65536", "bounce.max_slots=16")}


def protocols() -> list[str]:
    """Every installed protocol name, sorted."""
    from replay.plugins import available_protocols

    return available_protocols()


def graph_digest(graph) -> str:
    h = hashlib.sha256()

    def feed(v):
        if isinstance(v, np.ndarray):  # (values, not widths: an index array narrowed to int32 keeps its digest)
            kind = "i" if v.dtype.kind in "iu" else v.dtype.str
            v = v.astype(np.int64) if kind == "i" else v
            h.update(f"{kind}{v.shape}".encode())
            h.update(np.ascontiguousarray(v).tobytes())
        else:
            h.update(repr(v).encode())

    for f in dataclasses.fields(graph):
        v = getattr(graph, f.name)
        h.update(f.name.encode())
        if f.name == "lanes":
            for lf in dataclasses.fields(v):
                feed(getattr(v, lf.name))
        elif f.name == "kind_names":
            feed(sorted(v.items()))
        elif f.name == "calibration":
            feed(None if v is None else json.dumps(v.to_dict(), sort_keys=True))
        else:
            feed(v)
    return h.hexdigest()


def _graphs() -> dict:
    from fastrack_core.traceio import Trace
    from replay.pipeline.build import build_graph
    from replay.pipeline.run import load_graph
    from tracegen import synth

    def synthetic(table):
        return build_graph(Trace(table, {"source_format": "synthetic"}))

    return {
        "random-3000-s3": synthetic(synth.random_table(3000, 3)),
        "random-3000-s4-r2": synthetic(synth.random_table(3000, 4, ranks=2)),
        "memcpy-h2d-pageable": synthetic(synth.memcpy_table(9 << 20, "h2d", "pageable", 3)),
        "memcpy-d2h-pageable": synthetic(synth.memcpy_table(5 << 20, "d2h", "pageable", 3)),
        "a100-tiny": load_graph(HERE / "data" / "a100_cuda_event_sync_tiny.json.gz")[0],
    }


def digests() -> dict[str, str]:
    from fastrack_core.errors import FastrackError
    from replay.plugins import load_model, load_protocol

    out = {}
    for stem, graph in _graphs().items():
        for setting, overrides in SETTINGS.items():
            hw = load_model("h100").from_preset(None, overrides)
            for proto in protocols():
                try:
                    out[f"{stem}/{setting}/{proto}"] = graph_digest(load_protocol(proto)(graph, hw))
                except FastrackError as exc:  # the protocol refuses this case: its refusal is what it does
                    out[f"{stem}/{setting}/{proto}"] = f"refused: {type(exc).__name__}"
    return out


@pytest.fixture(scope="module")
def now() -> dict[str, str]:
    return digests()


def test_every_installed_protocol_has_its_digests(now):
    then = json.loads(DIGESTS.read_text())
    missing = sorted({k.rsplit("/", 1)[1] for k in set(now) - set(then)})
    assert not missing, (f"no digest recorded for protocol(s) {', '.join(missing)}: record them (every recorded "
                         "digest stays as it is) with `python tests/test_protocol_digests.py --add`, which "
                         f"writes {DIGESTS.relative_to(HERE.parent)}")
    gone = sorted({k.rsplit("/", 1)[1] for k in set(then) - set(now)})
    assert not gone, f"digests recorded for protocol(s) no longer installed: {', '.join(gone)}"
    assert {k.rsplit("/", 1)[1] for k in now} == set(protocols())


def test_every_transformed_graph_is_unchanged(now):
    then = json.loads(DIGESTS.read_text())
    changed = [k for k in sorted(set(now) & set(then)) if now[k] != then[k]]
    assert not changed, f"{len(changed)} transformed graph(s) differ, e.g. {changed[:5]}"


def test_digest_sees_a_change_anywhere():
    """The digest covers edge order, values and integer against floating point, but not an integer
    array's width (a test of the test)."""
    from graphs import make_graph

    g = make_graph(3, [(0, 2, 0, 0), (1, 2, 0, 0)], dur=[1, 2, 3])
    swapped = g.replace(dep_src=g.dep_src[::-1].copy())
    floated = g.replace(rank=g.rank.astype(np.float64))
    changed = g.replace(rank=g.rank + 1)
    assert len({graph_digest(g), graph_digest(swapped), graph_digest(floated), graph_digest(changed)}) == 4
    assert graph_digest(g.replace(rank=g.rank.astype(np.int64))) == graph_digest(g)


def _add_missing() -> list[str]:
    """Record the digests of cases not in the file yet; recorded ones are kept as they are."""
    then = json.loads(DIGESTS.read_text())
    added = {k: v for k, v in digests().items() if k not in then}
    DIGESTS.write_text(json.dumps({**then, **added}, indent=1, sort_keys=True) + "\n")
    return sorted(added)


if __name__ == "__main__":
    if sys.argv[1:] == ["--add"]:
        new = _add_missing()
        sys.stderr.write(f"{len(new)} case(s) added to {DIGESTS}\n")
    else:
        sys.stdout.write(json.dumps(digests(), indent=1, sort_keys=True) + "\n")
