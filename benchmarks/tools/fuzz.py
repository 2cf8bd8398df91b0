"""Fuzz the command-line tools with damaged inputs and hostile values (docs/robustness.md).

Every case builds a few files in a fresh directory (a mutated real trace, preset, study file or
Parquet trace; see the generators below), runs one command on them in a child process with a
memory and a time limit, and checks the contract every command keeps on bad input:

* the exit status is 0 or 2; on 2, stderr is exactly one line, starting with ``error:``;
* no Python traceback and no warning ever reaches stderr;
* a planted secret (:data:`SECRET`, put where real traces keep tokens) never reaches stdout,
  stderr or an output's metadata;
* a failed command leaves no new file behind, and no command changes its inputs;
* peak memory stays under ``--mem-mb`` and the command ends within ``--timeout-s``.

Children are forked from this process after it has imported the tools and compiled the replay
engine once, so a case costs what its command costs, not an interpreter start. Case ``i`` of seed
``s`` is generated from ``random.Random(f"{s}:{i}")`` alone: ``--only I`` reruns one case and
``--save DIR`` keeps the files of failing cases. A case whose forked child hangs is run again in
a fresh interpreter (same files, limits and oracle) and judged by that run: a forked child
inherits the parent's state, and one CI run saw a single unreproducible hang of a command that
exits in 0.07 s. A command that hangs in the fresh interpreter too is a failure; the summary
lists the rerun cases (``rerun_after_a_forked_hang``).

    python benchmarks/tools/fuzz.py --cases 2000 --seed 1          # the CI run (tests/test_fuzz.py)
    python benchmarks/tools/fuzz.py --cases 20000 --seed 7 --jobs 2 # a long run
    python benchmarks/tools/fuzz.py --cases 20000 --first 8253 --seed 7 # its cases 8,253 on
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import random
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # benchmarks/<kind>/ -> the repository root
DATA = ROOT / "tests" / "data"
PRESET = ROOT / "models" / "h100" / "presets" / "h100-sxm.toml"
SECRET = "hf_FUZZ0PLANTED0SECRET0a1b2c3d4e5f"
PROTOCOLS = ("captured", "none", "baseline", "fastrack", "fastrack:overlap", "ppcie")


@dataclass
class Case:
    index: int
    generator: str
    tool: str  # "tracegen" | "replay"
    argv: list[str]
    files: dict[str, bytes] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)  # name -> target (symbolic links to plant)
    dirs: list[str] = field(default_factory=list)
    fifos: list[str] = field(default_factory=list)
    secret_may_appear: bool = False  # the secret was planted where a tool may legitimately copy it
    expect: str = ""  # "refuse": must exit 2; "warn": must exit 0 with a ``warning:`` line; "accept": must exit 0


# --------------------------------------------------------------------------------------- corpus


@dataclass
class Corpus:
    kineto: list[tuple[str, dict]]  # (name, parsed document)
    raw: list[tuple[str, bytes]]  # (name, bytes) of every seed file
    traces: list[tuple[str, bytes]]  # valid Parquet traces
    nsys: bytes
    preset: str
    work: Path


def build_corpus(work: Path) -> Corpus:
    from tracegen.cli import main as tracegen_main

    kineto = []
    raw = []
    for name in ("a100_cuda_event_sync_tiny.json.gz", "h100_bert_small_uncased.json.gz",
                 "v100_dlrm_8rank/worker0_step_12.1694128201545.pt.trace.json.gz"):
        data = (DATA / name).read_bytes()
        raw.append((Path(name).name, data))
        kineto.append((Path(name).name, json.loads(gzip.decompress(data))))
    traces = []
    runs = [
        ["convert", str(DATA / "a100_cuda_event_sync_tiny.json.gz"), "-o", str(work / "tiny.parquet")],
        ["synth", "random", "--ops", "300", "--seed", "1", "-o", str(work / "random.parquet")],
        ["synth", "memcpy", "--bytes", "8MiB", "--direction", "h2d", "--memory", "pageable", "--repeat", "3",
         "-o", str(work / "memcpy.parquet")],
        ["convert", str(DATA / "v100_dlrm_8rank/worker0_step_12.1694128201545.pt.trace.json.gz"),
         str(DATA / "v100_dlrm_8rank/worker1_step_12.1694128201556.pt.trace.json.gz"), "-o", str(work / "dlrm2.parquet")],
    ]
    for argv in runs:
        _call(tracegen_main, argv)
        out = Path(argv[argv.index("-o") + 1])
        traces.append((out.name, out.read_bytes()))
    raw += traces
    nsys = _nsys_seed(work / "nsys.sqlite")
    raw.append(("nsys.sqlite", nsys))
    return Corpus(kineto=kineto, raw=raw, traces=traces, nsys=nsys, preset=PRESET.read_text(), work=work)


def _call(main, argv):
    try:
        main(args=argv, standalone_mode=False)
    except SystemExit as exc:
        if exc.code not in (0, None):
            raise RuntimeError(f"corpus command failed: {argv}") from None


def _nsys_seed(path: Path) -> bytes:
    """A small Nsight Systems export, built with the test suite's own scenario builder."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from test_nsys_import import build_scenario
    finally:
        sys.path.pop(0)
    build_scenario(path)
    return path.read_bytes()


# ----------------------------------------------------------------------------------- mutations

NASTY = [None, True, False, -1, 0, 1, 2**31, 2**53 + 1, 2**63 - 1, -(2**63), 2**64, 10**30, 1e300, -1e300, 1.5,
         -0.5, "", "x", "-1", "1e999", SECRET, [], {}, [1, 2], {"k": SECRET}, "\u202e\u0000"]
EVENT_KEYS = ["ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "bp", "s"]
ARG_KEYS = ["correlation", "stream", "device", "bytes", "External id", "Collective name", "In msg nelems",
            "dtype", "Group size", "Process Group Ranks", "cuda_sync_kind", "wait_on_stream",
            "wait_on_cuda_event_record_corr_id", "memory bandwidth (GB/s)"]
TOP_KEYS = ["distributedInfo", "deviceProperties", "schemaVersion", "baseTimeNanoseconds", "traceName", "displayTimeUnit"]


def nasty(rng: random.Random):
    r = rng.random()
    if r < 0.08:
        depth = rng.choice([70, 1000, 100_000])
        return json.loads("[" * depth + "]" * depth) if depth < 900 else _Deep(depth)
    return rng.choice(NASTY)


class _Deep:
    """A value nested ``depth`` levels deep, serialised directly (json.dumps would recurse)."""

    def __init__(self, depth):
        self.depth = depth


def dumps(obj) -> str:
    deep: dict[str, _Deep] = {}

    def default(o):
        if isinstance(o, _Deep):
            token = f"@@DEEP{len(deep)}@@"
            deep[token] = o
            return token
        raise TypeError

    text = json.dumps(obj, default=default, allow_nan=True)
    for token, d in deep.items():
        text = text.replace(f'"{token}"', "[" * d.depth + "]" * d.depth)
    return text


def mutate_kineto(rng: random.Random, doc: dict) -> dict:
    doc = json.loads(json.dumps(doc))  # a private copy
    events = doc.get("traceEvents") or []
    doc.setdefault("deviceProperties", [{}])
    if events:  # a planted secret where real traces keep tokens
        ev = rng.choice(events)
        if isinstance(ev.get("args"), dict):
            ev["args"]["HF_TOKEN"] = SECRET
        doc["HF_TOKEN"] = SECRET
    for _ in range(rng.randint(1, 4)):
        what = rng.random()
        if what < 0.55 and events:
            ev = rng.choice(events)
            if not isinstance(ev, dict):
                continue
            if rng.random() < 0.5 and isinstance(ev.get("args"), dict):
                key = rng.choice(ARG_KEYS)
                target = ev["args"]
            else:
                key = rng.choice(EVENT_KEYS)
                target = ev
            if rng.random() < 0.15:
                target.pop(key, None)
            else:
                target[key] = nasty(rng)
        elif what < 0.7:
            key = rng.choice(TOP_KEYS)
            value = nasty(rng)
            if key == "distributedInfo" and rng.random() < 0.7:
                value = {"rank": nasty(rng), "world_size": nasty(rng), "backend": "nccl"}
            doc[key] = value
        elif what < 0.8 and events:
            events.insert(rng.randrange(len(events) + 1), nasty(rng))
        elif what < 0.9 and events:
            ev = rng.choice(events)
            if isinstance(ev, dict) and isinstance(ev.get("ts"), (int, float)):
                ev["ts"] = rng.choice([-1, -1.7e18, 1.7e18, 0, ev["ts"] * 1000, float("nan"), float("inf")])
        else:
            doc["traceEvents"] = nasty(rng)
    return doc


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        if not b:
            break
        op = rng.random()
        i = rng.randrange(len(b))
        if op < 0.3:
            del b[rng.randrange(len(b) // 2, len(b) + 1):]  # truncate
        elif op < 0.6:
            for _ in range(rng.randint(1, 16)):
                j = rng.randrange(len(b))
                b[j] ^= 1 << rng.randrange(8)
        elif op < 0.75:
            b[i:i] = rng.randbytes(rng.randint(1, 64))
        elif op < 0.9:
            b[i:i + rng.randint(1, 4096)] = bytes(min(4096, len(b) - i))
        else:
            b[i:i] = b"\xff\xfe\xc3\x28" * rng.randint(1, 8)  # invalid UTF-8
    return bytes(b)


INT_EXTREMES = [2**63 - 1, -(2**63), -1, -2, 2**62, 2**50 + 1, 2**40, 2**31 - 1, 2**31, 0]


def mutate_parquet(rng: random.Random, data: bytes) -> bytes:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(io.BytesIO(data))
    meta = dict(table.schema.metadata or {})
    for _ in range(rng.randint(1, 3)):
        what = rng.random()
        if what < 0.6:
            name = rng.choice(table.schema.names)
            col = table.column(name)
            i = table.schema.get_field_index(name)
            n = table.num_rows
            rows = rng.sample(range(n), k=min(n, rng.choice([1, 2, 5, n])))
            if pa.types.is_integer(col.type):
                values = col.to_numpy().astype(np.int64, copy=True)
                values[rows] = rng.choice(INT_EXTREMES)
                try:
                    new = pa.array(values).cast(col.type, safe=False)
                except (pa.ArrowInvalid, OverflowError):
                    continue
            elif pa.types.is_dictionary(col.type) or pa.types.is_string(col.type):
                values = col.to_pylist()
                for r in rows:
                    values[r] = rng.choice([None, "", SECRET, "x" * 5000, "kernel", "nope", "H2D", "P2P"])
                new = pa.array(values, pa.string())
                if pa.types.is_dictionary(col.type) and rng.random() < 0.8:
                    new = new.dictionary_encode()
            elif pa.types.is_list(col.type):
                values = col.to_pylist()
                for r in rows:
                    values[r] = rng.choice([[], [-1], [2**62], [r], [0, 0, 0], None, [n + 5]])
                try:
                    new = pa.array(values, col.type)
                except (pa.ArrowInvalid, OverflowError):
                    continue
            else:
                continue
            table = table.set_column(i, pa.field(name, new.type), new)
        elif what < 0.7:
            name = rng.choice(table.schema.names)
            table = table.drop_columns([name])
        elif what < 0.8:
            name = rng.choice(table.schema.names)
            i = table.schema.get_field_index(name)
            try:
                new = table.column(name).cast(rng.choice([pa.float64(), pa.string(), pa.int8()]))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue
            table = table.set_column(i, pa.field(name, new.type), new)
        else:
            try:
                m = json.loads(meta.get(b"fastrack", b"{}"))
            except (ValueError, RecursionError):
                m = {}
            choice = rng.random()
            if choice < 0.25:
                meta[b"fastrack"] = rng.choice([b"[]", b"null", b"1", b"{", b"\xff\xfe", json.dumps(SECRET).encode()])
            else:
                if not isinstance(m, dict):
                    m = {}
                key = rng.choice(["ranks", "world_size", "schema_version", "emulated", "source_files", "tool_versions",
                                  "HF_TOKEN", "trace_name", "device_model"])
                value = nasty(rng)
                m[key] = 1 if isinstance(value, _Deep) else value
                meta[b"fastrack"] = dumps(m).encode()
    table = table.replace_schema_metadata(meta)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    return buf.getvalue()


def mutate_toml(rng: random.Random, text: str) -> bytes:
    lines = text.splitlines()
    for _ in range(rng.randint(1, 3)):
        idx = [i for i, ln in enumerate(lines) if "=" in ln and not ln.lstrip().startswith("#")]
        if not idx:
            break
        i = rng.choice(idx)
        key = lines[i].split("=", 1)[0]
        op = rng.random()
        if op < 0.6:
            value = rng.choice(["nan", "inf", "-inf", "-1", "0", "1e400", "1e-300", str(2**63), str(2**70), "1.5",
                                '"x"', "[1, 2]", "{a = 1}", "true", '"' + SECRET + '"', "0x10", "1_000"])
            lines[i] = f"{key}= {value}"
        elif op < 0.75:
            del lines[i]
        elif op < 0.85:
            lines.insert(i, f"{key.strip()}_typo = 1")
        else:
            lines[i] = lines[i][: rng.randrange(len(lines[i]) + 1)]
    data = ("\n".join(lines) + "\n").encode()
    if rng.random() < 0.1:
        data = mutate_bytes(rng, data)
    return data


STUDY_FIELDS = {
    "study": ["protocols", "presets", "model", "add_none", "name"],
    "grid": ["pcie.h2d_bandwidth_gb_s", "bounce.slots", "cpu_crypto.threads", "scale.kernel", "nope.key"],
}


def study_file(rng: random.Random) -> bytes:
    values = ['["none", "baseline"]', '["fastrack"]', "[]", '"baseline"', "1", "true", '"no"', '"yes"', "nan",
              "[1, 2]", "[0.5, 2.0]", "[nan]", "[1e400]", "[-1]", "[\"x\"]", "{a = 1}", '"' + SECRET + '"',
              "[2, 4, 8, 16, 32, 64, 128, 256]"]
    out = []
    for table, keys in STUDY_FIELDS.items():
        out.append(f"[{table}]")
        for key in rng.sample(keys, k=rng.randint(0, len(keys))):
            out.append(f"{key} = {rng.choice(values)}" if "." not in key else f'"{key}" = {rng.choice(values)}')
    data = ("\n".join(out) + "\n").encode()
    return mutate_bytes(rng, data) if rng.random() < 0.1 else data


SET_KEYS = ["pcie.h2d_bandwidth_gb_s", "pcie.latency_ns", "bounce.slot_bytes", "bounce.slots", "gpu.copy_engines",
            "cpu_crypto.threads", "ce.crypto_gb_s", "submit.kernel_ns", "direct.min_bytes", "keys.usage_limit",
            "bounce.growth", "direct.h2d", "nope.key", "pcie", "=", ""]
SET_VALUES = ["nan", "inf", "-1", "0", "1", "5e-5", "1e-300", "1e300", str(2**63 - 1), str(2**64), "64.0", "64.5",
              "abc", "", "double", "all", "true", "1_0", "4096"]


# ----------------------------------------------------------------------------------- generators


def gen_kineto(rng, corpus, i):
    name, doc = rng.choice(corpus.kineto)
    text = dumps(mutate_kineto(rng, doc)).encode("utf-8", "surrogatepass")
    if rng.random() < 0.1:
        text = mutate_bytes(rng, text)
    fname = "in.json"
    if rng.random() < 0.5:
        text = gzip.compress(text, compresslevel=1)
        fname += ".gz"
        if rng.random() < 0.1:
            text = text[: rng.randrange(len(text))]
    return Case(i, "kineto-json", "tracegen", ["convert", fname, "-o", "out.parquet"], {fname: text})


def gen_bytes(rng, corpus, i):
    name, data = rng.choice(corpus.raw)
    data = mutate_bytes(rng, data)
    if name.endswith(".parquet"):
        argv = rng.choice([["info", name], ["info", name, "--json"]])
        tool = "tracegen"
        if rng.random() < 0.6:
            tool, argv = "replay", ["--protocol", rng.choice(PROTOCOLS), name, "--json"]
        return Case(i, "bytes-parquet", tool, argv, {name: data})
    fmt = rng.choice(["auto", "auto", "kineto", "nsys"])
    return Case(i, "bytes-" + ("sqlite" if name.endswith(".sqlite") else "json"), "tracegen",
                ["convert", name, "--format", fmt, "-o", "out.parquet"], {name: data})


def gen_parquet(rng, corpus, i):
    name, data = rng.choice(corpus.traces)
    data = mutate_parquet(rng, data)
    r = rng.random()
    if r < 0.25:
        return Case(i, "parquet-values", "tracegen", ["info", "t.parquet"] + (["--json"] if rng.random() < 0.5 else []),
                    {"t.parquet": data}, secret_may_appear=True)
    if r < 0.4:
        argv = ["compare", "t.parquet", "--protocols", "none,baseline,fastrack", "--json"]
    elif r < 0.5:
        argv = ["--protocol", rng.choice(["none", "baseline", "fastrack"]), "--data-parallel", str(rng.choice([2, 4])),
                "t.parquet", "--json"]
    else:
        argv = ["--protocol", rng.choice(PROTOCOLS), "t.parquet", "--json"]
    # names are copied to reports (e.g. the critical path's ops): a secret planted in a name may appear
    return Case(i, "parquet-values", "replay", argv, {"t.parquet": data}, secret_may_appear=True)


SQL_VALUES = ["'text'", "''", "NULL", "-1", "0", str(2**63 - 1), str(-(2**63)), "1e300", "-1e300", "X'FFFE'", "1.5",
              f"'{SECRET}'", "9223372036854775807 * 2"]


def mutate_sqlite(rng: random.Random, data: bytes, work: Path) -> bytes:
    """Change cells, rows or tables of an Nsight export through SQLite itself (a damaged-but-valid
    database, where byte mutation mostly yields an unreadable file)."""
    import sqlite3

    path = work / f"mut-{rng.getrandbits(64):016x}.sqlite"
    path.write_bytes(data)
    try:
        db = sqlite3.connect(path)
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        for _ in range(rng.randint(1, 3)):
            table = rng.choice(tables)
            cols = [r[1] for r in db.execute(f'PRAGMA table_info("{table}")')]
            what = rng.random()
            if what < 0.7 and cols:
                col = rng.choice(cols)
                where = rng.choice(["", f" WHERE rowid = (SELECT rowid FROM \"{table}\" LIMIT 1)"])
                try:
                    db.execute(f'UPDATE "{table}" SET "{col}" = {rng.choice(SQL_VALUES)}{where}')
                except sqlite3.Error:
                    pass
            elif what < 0.85:
                db.execute(f'DELETE FROM "{table}"')
            else:
                db.execute(f'DROP TABLE "{table}"')
                tables.remove(table)
                if not tables:
                    break
        db.commit()
        db.close()
        return path.read_bytes()
    finally:
        path.unlink(missing_ok=True)


def gen_sqlite(rng, corpus, i):
    data = mutate_sqlite(rng, corpus.nsys, corpus.work)
    return Case(i, "nsys-sqlite", "tracegen", ["convert", "in.sqlite", "-o", "out.parquet"], {"in.sqlite": data})


def gen_preset(rng, corpus, i):
    name, data = rng.choice(corpus.traces[:3])
    preset = mutate_toml(rng, corpus.preset)
    return Case(i, "preset", "replay", ["--protocol", rng.choice(["baseline", "fastrack"]), "--preset", "p.toml",
                                        name, "--json"], {name: data, "p.toml": preset})


def gen_study(rng, corpus, i):
    name, data = corpus.traces[1]
    return Case(i, "study", "replay", ["sweep", name, "--study", "s.toml", "-o", "o.parquet", "-j", "1"],
                {name: data, "s.toml": study_file(rng)})


def gen_cli(rng, corpus, i):
    name, data = rng.choice(corpus.traces[:3])
    files = {name: data}
    r = rng.random()
    if r < 0.45:
        argv = ["--protocol", rng.choice(PROTOCOLS), name, "--json"]
        for _ in range(rng.randint(1, 2)):
            argv += ["--set", f"{rng.choice(SET_KEYS)}={rng.choice(SET_VALUES)}"]
        if rng.random() < 0.3:  # a range study over what is left: one point at a time or in threads
            argv += ["--ranges", "--range-jobs", rng.choice(["1", "2"])]
            return Case(i, "cli-set-ranges", "replay", argv, files)
        return Case(i, "cli-set", "replay", argv, files)
    if r < 0.6:
        argv = ["--protocol", rng.choice(PROTOCOLS), name, "--scale",
                f"{rng.choice(['kernel', 'memcpy', 'host', 'collective', 'bogus'])}={rng.choice(SET_VALUES)}"]
        return Case(i, "cli-scale", "replay", argv, files)
    if r < 0.7:
        argv = ["--protocol", "none", name, "--data-parallel", rng.choice(["0", "1", "2", "-3", "100000", "x"]),
                "--bucket-mb", rng.choice(["0", "25", "-1", "nan", "1e300", "0.001"])]
        return Case(i, "cli-dp", "replay", argv, files)
    if r < 0.78:  # the secret typed where a typed option, an option name or an argument belongs
        argv = rng.choice([
            ["--protocol", "baseline", name, "--ranges", "--range-jobs", SECRET],
            ["--protocol", "none", name, "--data-parallel", SECRET],
            ["--protocol", "none", name, "--bucket-mb", SECRET],
            ["--protocol", "none", name, f"--{SECRET}"],
            ["--protocol", "none", name, f"--{SECRET}=1"],
            ["--protocol", "none", name, SECRET],
            ["sweep", name, "--protocols", "none", "-j", SECRET, "-o", "o.parquet"],
        ])
        return Case(i, "cli-secret", "replay", argv, files)
    if r < 0.85:
        sub = rng.choice(["random", "memcpy"])
        if sub == "random":
            argv = ["synth", "random", "--ops", rng.choice(["0", "1", "50", "-5", "1e3", "x", str(2**40)]),
                    "--seed", rng.choice(["0", "-1", str(2**70), "x"]), "-o", "s.parquet"]
        else:
            argv = ["synth", "memcpy", "--bytes", rng.choice(["0", "1", "4KiB", "-1", "1e30", "16TiB", "x", "1.5"]),
                    "--direction", "h2d", "--memory", "pinned", "--repeat", rng.choice(["1", "0", str(2**40)]),
                    "-o", "s.parquet"]
        return Case(i, "cli-synth", "tracegen", argv, {})
    # outputs that must never be written: a directory, a link, the input, under a file, a long name
    # (a FIFO stands for every special file: a fuzzer must never aim at the machine's real devices)
    target = rng.choice(["dir", "link", "input", "under-file", "long", "fifo"])
    out = {"dir": "d", "link": "l.parquet", "input": name, "under-file": f"{name}/x.parquet",
           "long": "n" * 300 + ".parquet", "fifo": "f.parquet"}[target]
    case = Case(i, "outputs", "tracegen", ["convert", str(DATA / "a100_cuda_event_sync_tiny.json.gz"), "-o", out,
                                           *(["--overwrite"] if rng.random() < 0.5 else [])], files)
    if rng.random() < 0.5:
        case.tool = "replay"
        case.argv = [rng.choice(["--protocol", "--protocol"]), "baseline", name, "--timeline", out]
    if target == "dir":
        case.dirs.append("d")
    if target == "link":
        case.links["l.parquet"] = "elsewhere.parquet"
    if target == "fifo":
        case.fifos.append("f.parquet")
    if target == "input" and case.tool == "tracegen":  # convert's own input as its output
        case.files["in.json.gz"] = (DATA / "a100_cuda_event_sync_tiny.json.gz").read_bytes()
        case.argv = ["convert", "in.json.gz", "-o", "in.json.gz", "--overwrite"]
    return case


# ------------------------------------------------------------- structural bombs, every reader


def _gz_members(*parts: tuple[bytes, int]) -> bytes:
    """A multi-member gzip stream, each (block, times) compressed once and repeated: a few MB on
    disk that decompress to hundreds of MB or GiB."""
    return b"".join(gzip.compress(block, compresslevel=9, mtime=0) * times for block, times in parts)


def _et_file(nodes) -> bytes:
    from fastrack_core.chakra import GlobalMetadata, write_et

    buf = io.BytesIO()
    write_et(buf, GlobalMetadata(version="0.0.4"), nodes)
    return buf.getvalue()


def _comp(i, deps=(), dur=5):
    from fastrack_core.chakra import Node, NodeType

    return Node(id=i, name=f"k{i} {SECRET}", type=NodeType.COMP_NODE, data_deps=list(deps), duration_micros=dur)


_RT_EVENT = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 0, "tid": 1, "ts": 0, "dur": 1,
             "args": {"correlation": 1, "HF_TOKEN": SECRET}}
_K_EVENT = {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 1, "dur": 2, "args": {"correlation": 1}}


def gen_bomb(rng, corpus, i):
    """Inputs small on disk whose structure multiplies memory or work in a naive reader:
    each must end in one line naming a limit, or be read in bounded work."""
    from fastrack_core.chakra import Node, NodeType
    from fastrack_core.schema import MAX_DECOMPRESSED_BYTES, MAX_DEPS_PER_NODE, MAX_NAME_CHARS
    from tracegen.importers.jsonwhole import WHOLE_FILE_MAX_BYTES

    kind = rng.choice(["kineto-space", "kineto-name", "kineto-long-name", "kineto-wide-int", "chakra-layers",
                       "chakra-chain", "chakra-fan-in", "chakra-gzip", "chakra-no-durations", "et-gzip", "nsys-name"])
    mib = 1 << 20
    if kind in ("kineto-space", "kineto-name"):
        head = b'{"traceEvents":[' + json.dumps(_RT_EVENT).encode() + (b"," if kind == "kineto-space" else b',{"name":"')
        tail = json.dumps(_K_EVENT).encode() + b"]}" if kind == "kineto-space" else (
            b'","ph":"X","cat":"kernel","pid":0,"tid":7,"ts":1,"dur":2,"args":{"correlation":1}}]}')
        fill = (b" \n\t" if kind == "kineto-space" else b"ab") * (mib // 2)
        # (beyond the whole-file reader's 64 MiB, which holds a document at once and so is bounded
        # already: the streaming readers must refuse it within MAX_EVENT_BYTES)
        times = rng.randint(WHOLE_FILE_MAX_BYTES // mib + 2, 8 * (WHOLE_FILE_MAX_BYTES // mib))
        data = _gz_members((head, 1), (fill[:mib], times), (tail, 1))
        return Case(i, "bomb-" + kind, "tracegen", ["convert", "in.json.gz", "-o", "out.parquet"], {"in.json.gz": data},
                    expect="refuse")
    if kind == "kineto-long-name":
        doc = {"traceEvents": [_RT_EVENT, dict(_K_EVENT, name="n" * (MAX_NAME_CHARS + rng.randint(1, 1000)))]}
        return Case(i, "bomb-" + kind, "tracegen", ["convert", "in.json", "-o", "out.parquet"],
                    {"in.json": json.dumps(doc).encode()}, expect="refuse")
    if kind == "kineto-wide-int":
        big = str(rng.choice([2**64, 2**70 + 3, 10**40]))
        doc = json.dumps({"traceEvents": [_RT_EVENT, dict(_K_EVENT, args={"correlation": 1, "hive_id": 7})]})
        doc = doc.replace('"hive_id": 7', f'"hive_id": {big}')
        if rng.random() < 0.5:
            doc = doc[:-1] + f', "hive": {big}}}'
        return Case(i, "bomb-" + kind, "tracegen", ["convert", "in.json", "-o", "out.parquet"], {"in.json": doc.encode()},
                    expect="accept")
    if kind == "chakra-layers":  # 2^layers paths through no-work nodes, one distinct end
        width, layers = rng.randint(2, 4), rng.randint(20, 64)
        nodes, prev, nid = [_comp(0)], [0], 1
        for _ in range(layers):
            layer = list(range(nid, nid + width))
            nodes += [Node(id=k, type=NodeType.METADATA_NODE, data_deps=list(prev)) for k in layer]
            prev, nid = layer, nid + width
        nodes.append(_comp(nid, prev))
        return Case(i, "bomb-" + kind, "tracegen", ["convert", "in.0.et", "-o", "out.parquet"],
                    {"in.0.et": _et_file(nodes)}, expect="accept")
    if kind == "chakra-chain":  # recursion depth in a naive bridge
        n = rng.randint(2_000, 30_000)
        nodes = [_comp(0)] + [Node(id=k, type=NodeType.METADATA_NODE, data_deps=[k - 1]) for k in range(1, n + 1)]
        nodes.append(_comp(n + 1, [n]))
        return Case(i, "bomb-" + kind, "tracegen", ["convert", "in.0.et", "-o", "out.parquet"],
                    {"in.0.et": _et_file(nodes)}, expect="accept")
    if kind == "chakra-fan-in":
        n = MAX_DEPS_PER_NODE + rng.randint(1, 100)
        nodes = [_comp(k) for k in range(n)] + [_comp(n, range(n))]
        return Case(i, "bomb-" + kind, "tracegen", ["convert", "in.0.et", "-o", "out.parquet"],
                    {"in.0.et": _et_file(nodes)}, expect="refuse")
    if kind == "chakra-gzip":
        body = gzip.compress(_et_file([_comp(0)]))
        times = MAX_DECOMPRESSED_BYTES // mib + rng.randint(1, 64)
        return Case(i, "bomb-" + kind, "tracegen", ["convert", "in.0.et.gz", "-o", "out.parquet"],
                    {"in.0.et.gz": body + _gz_members((bytes(mib), times))}, expect="refuse")
    if kind == "chakra-no-durations":
        nodes = [_comp(0, dur=0), _comp(1, [0], dur=0)]
        return Case(i, "bomb-" + kind, "tracegen", ["convert", "in.0.et", "-o", "out.parquet"],
                    {"in.0.et": _et_file(nodes)}, expect="refuse")
    if kind == "et-gzip":
        from tracegen.importers.pytorch_et import MAX_ET_JSON_BYTES

        head = json.dumps({"schema": "1.0.1", "pid": 1, "nodes": []}).encode()[:-2]
        data = _gz_members((head, 1), (b" " * mib, MAX_ET_JSON_BYTES // mib + rng.randint(1, 16)), (b"]}", 1))
        kin = json.dumps({"traceEvents": [_RT_EVENT, _K_EVENT]}).encode()
        return Case(i, "bomb-" + kind, "tracegen", ["convert", "et.json.gz", "k.json", "-o", "out.parquet"],
                    {"et.json.gz": data, "k.json": kin}, expect="refuse")
    # nsys-name: a kernel name beyond the limit (before the limit: 300 MiB accepted and stored)
    import sqlite3

    path = corpus.work / f"bomb-{rng.getrandbits(64):016x}.sqlite"
    path.write_bytes(corpus.nsys)
    try:
        db = sqlite3.connect(path)
        db.execute("UPDATE StringIds SET value = ? WHERE value LIKE 'gemm%'", ("g" * (MAX_NAME_CHARS + 1),))
        db.commit()
        db.close()
        data = path.read_bytes()
    finally:
        path.unlink(missing_ok=True)
    return Case(i, "bomb-" + kind, "tracegen", ["convert", "in.sqlite", "-o", "out.parquet"], {"in.sqlite": data},
                expect="refuse")


# ------------------------------------------------------------- traces that contradict themselves


def gen_contradiction(rng, corpus, i):
    """A consistent multi-rank trace (tests/test_consistency.py's builder) with one contradiction:
    refused with one line, or replayed with one warning, under every protocol (never silently)."""
    sys.path.insert(0, str(ROOT / "tests"))
    try:
        from test_consistency import _copies, multi_rank
        from tracefactory import table
    finally:
        sys.path.pop(0)
    from fastrack_core.traceio import write_trace

    ranks, colls = rng.randint(2, 8), rng.randint(1, 4)
    r, c = rng.randrange(ranks), rng.randrange(colls)
    kind = rng.choice(["bytes", "type", "group", "seq", "dropped", "collapsed", "early", "no-direction", "p2p-alone"])
    expect, meta = "refuse", {}
    if kind == "bytes":
        ops = multi_rank(ranks, colls, change={(r, c): {"coll_bytes": rng.choice([1 << 44, 1, 3 << 20]),
                                                        "bytes": 1 << 30}})
    elif kind == "type":
        ops = multi_rank(ranks, colls, change={(r, c): {"coll_type": rng.choice(["all_gather", "broadcast", "nope"])}})
    elif kind == "group":
        ops = multi_rank(ranks, colls, change={(r, c): {"coll_group": rng.choice(["1", SECRET, ""])}})
    elif kind == "seq":
        ops = multi_rank(ranks, colls, change={(r, c): {"coll_seq": colls + rng.randint(0, 5)}})
    elif kind == "dropped":  # (the rank keeps another collective: with none, it is simply not in the trace)
        ops = multi_rank(ranks, max(colls, 2), drop=(r, c))
    elif kind == "collapsed":
        ops = multi_rank(ranks, colls)
        for o in ops:
            o["rank"] = 0
    elif kind == "early":
        ops = multi_rank(ranks, colls, kernel_at={(r, c): 100_000 + 10_000 * c - rng.randint(2_000, 100_000)})
        expect = "warn"
    elif kind == "no-direction":
        ops, expect = _copies(None), "warn"
    else:
        ops = _copies("P2P")
    path = corpus.work / f"contra-{rng.getrandbits(64):016x}.parquet"
    try:
        write_trace(path, table(ops), {"source_format": "synthetic", **meta})
        data = path.read_bytes()
    finally:
        path.unlink(missing_ok=True)
    argv = ["--protocol", rng.choice(PROTOCOLS), "t.parquet", "--json"]
    if rng.random() < 0.2:
        argv = ["compare", "t.parquet", "--protocols", "none,baseline", "--json"]
    return Case(i, "contradiction-" + kind, "replay", argv, {"t.parquet": data}, expect=expect)


GENERATORS = [(gen_kineto, 0.19), (gen_bytes, 0.11), (gen_parquet, 0.19), (gen_sqlite, 0.07), (gen_preset, 0.08),
              (gen_study, 0.06), (gen_cli, 0.16), (gen_bomb, 0.07), (gen_contradiction, 0.07)]


ONLY_GENERATORS: set[str] = set()  # --generators: draw only from these (names without gen_)


def make_case(seed: int, i: int, corpus: Corpus) -> Case:
    rng = random.Random(f"{seed}:{i}")
    chosen = [(g, w) for g, w in GENERATORS if not ONLY_GENERATORS or g.__name__[len("gen_"):] in ONLY_GENERATORS]
    gens, weights = zip(*chosen)
    return rng.choices(gens, weights)[0](rng, corpus, i)


# ----------------------------------------------------------------------------------- execution


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""


def _snapshot(d: Path) -> dict[str, str]:
    out = {}
    for root, dirs, files in os.walk(d, followlinks=False):
        for f in files + [x for x in dirs if os.path.islink(os.path.join(root, x))]:
            p = Path(root) / f
            rel = str(p.relative_to(d))
            out[rel] = "link" if p.is_symlink() else "fifo" if p.is_fifo() else _digest(p)
    return out


def prepare(case: Case, d: Path) -> None:
    for name, data in case.files.items():
        (d / name).write_bytes(data)
    for name in case.dirs:
        (d / name).mkdir()
    for name, target in case.links.items():
        os.symlink(target, d / name)
    for name in case.fifos:
        os.mkfifo(d / name)


def child(case: Case, d: Path, mem_mb: int) -> None:
    """Runs in the forked child: never returns."""
    code = 1
    try:
        os.chdir(d)
        limit = mem_mb * 4 << 20  # address space: generous (numba and BLAS reserve much more than they touch)
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        out = os.open("stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        err = os.open("stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, 1)
        os.dup2(err, 2)
        sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", buffering=0), write_through=True)
        sys.stderr = io.TextIOWrapper(os.fdopen(2, "wb", buffering=0), write_through=True)
        if case.tool == "replay":
            from replay.frontend.cli import main
        else:
            from tracegen.cli import main
        try:
            main(args=list(case.argv), prog_name=case.tool)
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001 - reported as a traceback, which the parent counts as a failure
        traceback.print_exc()
        code = 1
    finally:
        with_flush = (sys.stdout, sys.stderr)
        for s in with_flush:
            try:
                s.flush()
            except Exception:  # noqa: BLE001
                pass
        os._exit(code)


@dataclass
class Outcome:
    case: Case
    rc: int | None
    maxrss_mb: float
    seconds: float
    problems: list[str]
    first_line: str
    rerun: bool = False  # its forked child hung, so it was run again in a fresh interpreter (rerun_fresh)


def judge(case: Case, d: Path, rc: int | None, maxrss_mb: float, seconds: float, before: dict[str, str],
          mem_mb: int, timeout_s: float) -> Outcome:
    stdout = (d / "stdout").read_bytes().decode("utf-8", "replace") if (d / "stdout").exists() else ""
    stderr = (d / "stderr").read_bytes().decode("utf-8", "replace") if (d / "stderr").exists() else ""
    problems = []
    if rc is None:
        problems.append(f"hang (killed after {timeout_s:g} s)")
    elif rc not in (0, 2):
        problems.append(f"exit {rc}")
    if "Traceback (most recent call last)" in stderr:
        problems.append("traceback")
    if "Warning" in stderr:
        problems.append("warning on stderr")
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    if rc == 2 and (len(lines) != 1 or not lines[0].startswith("error: ")):
        problems.append(f"{len(lines)}-line error")
    warned = [ln for ln in lines if ln.startswith("warning: ")]
    if case.expect == "refuse" and rc == 0:
        problems.append("accepted an input it must refuse")
    elif case.expect == "warn" and (rc != 0 or not warned):
        problems.append("no warning on a damaged trace" if rc == 0 else "refused an input it must replay with a warning")
    elif case.expect == "accept" and rc == 2:
        problems.append("refused a valid input")
    if case.expect == "warn" and rc == 0 and len(lines) != len(warned):
        problems.append("stderr holds more than the warning lines")
    if not case.secret_may_appear and (SECRET in stdout or SECRET in stderr):
        problems.append("secret echoed")
    if maxrss_mb > mem_mb:
        problems.append(f"memory {maxrss_mb:.0f} MB")
    after = _snapshot(d)
    for name in ("stdout", "stderr"):
        after.pop(name, None)
    for name, digest in before.items():
        if after.get(name) != digest:
            problems.append(f"input changed: {name[:40]}")
    new = sorted(set(after) - set(before))
    if rc != 0 and new:
        problems.append(f"left behind: {new[0][:40]}")
    for name in new:
        if name.endswith(".parquet") and not case.secret_may_appear:
            try:
                import pyarrow.parquet as pq

                md = pq.read_schema(d / name).metadata or {}
                if any(SECRET.encode() in v for v in md.values()):
                    problems.append("secret in output metadata")
            except Exception:  # noqa: BLE001 - an output we cannot read is judged by its command's tests
                pass
    first = lines[0][:160] if lines else ""
    return Outcome(case, rc, maxrss_mb, seconds, problems, first.replace(SECRET, "<SECRET>"))


def run_cases(indices, seed: int, corpus: Corpus, jobs: int, mem_mb: int, timeout_s: float, base: Path,
              save: Path | None, progress: bool, deadline: float | None = None) -> list[Outcome]:
    """Runs the cases, ``jobs`` at a time. With ``deadline`` (a ``time.monotonic()`` value) no
    case starts after it; the cases run are then the first ones of ``indices``, in order."""
    pending = list(indices)
    running: dict[int, tuple[Case, Path, float, dict]] = {}
    outcomes = []
    t_report = time.monotonic()
    while pending or running:
        if deadline is not None and pending and time.monotonic() > deadline:
            pending.clear()
            if not running:
                break
        while pending and len(running) < jobs:
            i = pending.pop(0)
            case = make_case(seed, i, corpus)
            d = base / f"case{i}"
            d.mkdir()
            prepare(case, d)
            before = _snapshot(d)
            pid = os.fork()
            if pid == 0:
                child(case, d, mem_mb)
            running[pid] = (case, d, time.monotonic(), before)
        pid, status, usage = os.wait4(-1, os.WNOHANG)
        now = time.monotonic()
        if pid == 0:
            for p, (case, d, t0, _before) in list(running.items()):
                if now - t0 > timeout_s:
                    os.kill(p, signal.SIGKILL)
                    _, status, usage = os.wait4(p, 0)
                    del running[p]
                    shutil.rmtree(d, ignore_errors=True)
                    outcomes.append(rerun_fresh(case, d, mem_mb, timeout_s, save))
            time.sleep(0.002)
            continue
        case, d, t0, before = running.pop(pid)
        rc = os.waitstatus_to_exitcode(status)
        outcomes.append(_finish(case, d, rc, usage, now - t0, before, mem_mb, timeout_s, save))
        if progress and now - t_report > 10:
            bad = sum(1 for o in outcomes if o.problems)
            print(f"  {len(outcomes)} cases, {bad} failing", file=sys.stderr)
            t_report = now
    return outcomes


RERUN_SNIPPET = ("import sys\n"
                 "if sys.argv[1] == 'replay':\n    from replay.frontend.cli import main\n"
                 "else:\n    from tracegen.cli import main\n"
                 "main(args=sys.argv[2:], prog_name=sys.argv[1])\n")


def rerun_fresh(case: Case, d: Path, mem_mb: int, timeout_s: float, save: Path | None) -> Outcome:
    """A case whose forked child hung, run again in a fresh interpreter (same files, limits and
    oracle). A forked child inherits the parent's state, threads' locks included, so a hang there
    may be the harness's own; a command that hangs here too is a real hang. The outcome says it
    was rerun (``rerun``), and the summary counts such cases."""
    d.mkdir()
    prepare(case, d)
    before = _snapshot(d)
    limit = mem_mb * 4 << 20

    def limits():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [x for x in env.get("PYTHONPATH", "").split(os.pathsep) if x])
    t0 = time.monotonic()
    with open(d / "stdout", "wb") as out, open(d / "stderr", "wb") as err:
        proc = subprocess.Popen([sys.executable, "-c", RERUN_SNIPPET, case.tool, *case.argv], cwd=d, stdout=out,
                                stderr=err, stdin=subprocess.DEVNULL, preexec_fn=limits, env=env)
        rc = None
        while time.monotonic() - t0 <= timeout_s:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                rc = os.waitstatus_to_exitcode(status)
                break
            time.sleep(0.01)
        else:
            proc.kill()
            _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = rc if rc is not None else -9  # (reaped here: keep Popen from waiting again)
    outcome = _finish(case, d, rc, usage, time.monotonic() - t0, before, mem_mb, timeout_s, save)
    outcome.rerun = True
    return outcome


def _finish(case, d, rc, usage, seconds, before, mem_mb, timeout_s, save):
    outcome = judge(case, d, rc, usage.ru_maxrss / 1024, seconds, before, mem_mb, timeout_s)
    if outcome.problems and save is not None:
        dest = save / f"case{case.index}"
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(d, dest, symlinks=True,  # FIFOs are recreated by --only, not copied
                        ignore=lambda root, names: [n for n in names if os.path.exists(os.path.join(root, n))
                                                    and stat.S_ISFIFO(os.lstat(os.path.join(root, n)).st_mode)])
        (dest / "argv.json").write_text(json.dumps({"tool": case.tool, "argv": case.argv}))
    shutil.rmtree(d, ignore_errors=True)
    return outcome


def warm_up(corpus: Corpus, base: Path) -> None:
    """Compile the replay engine once here, so forked children inherit it."""
    from replay.pipeline.run import replay_trace

    p = base / "warm.parquet"
    p.write_bytes(corpus.traces[2][1])
    for protocol in ("captured", "baseline"):
        replay_trace(str(p), protocol=protocol)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--mem-mb", type=int, default=2048, help="peak resident memory a case may use")
    ap.add_argument("--timeout-s", type=float, default=60.0, help="wall time a case may take")
    ap.add_argument("--first", type=int, default=0, metavar="K",
                    help="start at case K (cases K..--cases minus 1): a long run in parts, each part its own cases")
    ap.add_argument("--only", type=int, action="append", help="run only case I (repeatable)")
    ap.add_argument("--generators", help="comma-separated generators to draw from (e.g. bomb,contradiction)")
    ap.add_argument("--save", type=Path, help="copy the files of failing cases here")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--stop-after-s", type=float, metavar="S",
                    help="start no case after S seconds; the summary gives the number run (cases K..K+N-1)")
    args = ap.parse_args(argv)
    if args.cases < 1 or args.jobs < 1 or args.mem_mb < 64 or not 0 < args.timeout_s <= 3600:
        ap.error("--cases, --jobs >= 1; --mem-mb >= 64; 0 < --timeout-s <= 3600")
    if not 0 <= args.first < args.cases:
        ap.error("--first: between 0 and --cases minus 1")
    if args.stop_after_s is not None and not 0 < args.stop_after_s <= 7 * 86400:
        ap.error("--stop-after-s: between 0 and a week of seconds")
    if args.generators:
        names = {g.__name__[len("gen_"):] for g, _ in GENERATORS}
        ONLY_GENERATORS.update(n.strip() for n in args.generators.split(","))
        if not ONLY_GENERATORS <= names:
            ap.error(f"--generators: known generators are {', '.join(sorted(names))}")
    t0 = time.perf_counter()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="fastrack-fuzz-") as tmp:
        base = Path(tmp)
        corpus = build_corpus(base)
        warm_up(corpus, base)
        indices = args.only or range(args.first, args.cases)
        deadline = None if args.stop_after_s is None else started + args.stop_after_s
        outcomes = run_cases(indices, args.seed, corpus, args.jobs, args.mem_mb, args.timeout_s, base, args.save,
                             args.progress, deadline)
    seconds = time.perf_counter() - t0
    failing = [o for o in outcomes if o.problems]
    by_gen = Counter(o.case.generator for o in outcomes)
    by_rc = Counter(str(o.rc) for o in outcomes)
    kinds = Counter(p.split(":")[0] for o in failing for p in o.problems)
    summary = {
        "cases": len(outcomes), "cases_asked": len(indices), "first_case": indices[0], "seed": args.seed, "failing": len(failing), "seconds": round(seconds, 1),
        "cases_per_s": round(len(outcomes) / seconds, 1), "exit_codes": dict(by_rc), "generators": dict(by_gen),
        "problems": dict(kinds), "max_rss_mb": round(max((o.maxrss_mb for o in outcomes), default=0), 1),
        "slowest_s": round(max((o.seconds for o in outcomes), default=0), 2),
        "rerun_after_a_forked_hang": [o.case.index for o in outcomes if o.rerun],
    }
    if args.json:
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        print(f"{summary['cases']} of {len(indices)} cases (seed {args.seed}, from case {indices[0]}) in {seconds:.0f} s ({summary['cases_per_s']} cases/s): "
              f"{len(failing)} failing; exit codes {dict(by_rc)}; max RSS {summary['max_rss_mb']} MB; "
              f"slowest {summary['slowest_s']} s; rerun after a forked child hung: "
              f"{summary['rerun_after_a_forked_hang'] or 'none'}")
        print("generators: " + ", ".join(f"{k} {v}" for k, v in sorted(by_gen.items())))
    for o in failing[:40]:
        print(f"FAIL case {o.case.index} [{o.case.generator}] {o.case.tool} {' '.join(o.case.argv)[:100]}: "
              f"{'; '.join(o.problems)} | {o.first_line}", file=sys.stderr)
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
