"""Validation of the serving model against public serving figures: regenerates the validation
section of docs/serving.md.

Usage:
    python benchmarks/validation/validate_serving.py                          # print the section (Markdown)
    python benchmarks/validation/validate_serving.py --write docs/serving.md  # replace it between the markers
    python benchmarks/validation/validate_serving.py --work DIR               # keep the captures in DIR (reused)
    python benchmarks/validation/validate_serving.py --sections 2,3           # only these sections
    python benchmarks/validation/validate_serving.py --quick                  # small models, for a smoke test

``--write`` replaces the text between ``<!-- validate_serving:begin -->`` and
``<!-- validate_serving:end -->`` atomically; a file without exactly one pair is refused (one
line, exit 2, nothing written), and so is ``--write`` with ``--sections`` (the block holds every
section). Every workload is captured here with ``tracegen capture`` from ``examples/serving.py``
and ``examples/offload.py`` (deterministic: the same command writes the same trace); the
sections are independent (each prints the same text alone as with the others), so a test can
regenerate some of them. Nothing is fitted to the published figures; the workload settings the
sources do not state are named as assumptions in the output.

1. SGLang PR #15188 [S31]: output-token throughput lost under CC by concurrency 1-256, from the
   request-level simulator (``replay serve``) over captures whose decode batches reach each
   concurrency, with the overlap scheduler, and with SGLang's fix (``--copy-thread``).
2. vLLM PR #52226 [S32]: the two decode mechanisms, read from the TPOT breakdown by mechanism and
   the host's blocked time (replays of whole captured runs).
3. PipeLLM [S27]: throughput lost with weight offloading (OPT-30B, OPT-66B) and KV offloading.
4. Blackwell (Tinfoil [S30]): inter-token latency under the ``b300`` and ``b300-hgx`` presets.
5. Multi-step scheduling (vLLM v0.6.0 [S41]): what scheduling a decode round once per N GPU steps
   (``--multi-step N``) does to CC's loss in the synchronous loop (replays of whole captured runs).
"""

from __future__ import annotations

import argparse
import shlex
from concurrent.futures import ThreadPoolExecutor
import subprocess
import sys
import tempfile
from pathlib import Path

from fastrack_core.docsection import emit_section
from fastrack_core.errors import ConfigError, FastrackError

ROOT = Path(__file__).resolve().parents[2]  # benchmarks/<kind>/ -> the repository root
BEGIN, END = "<!-- validate_serving:begin -->", "<!-- validate_serving:end -->"
PRESET = "h100-sxm"
SECTIONS = (1, 2, 3, 4, 5)

SGLANG_LOSS = {1: 18.40, 4: 16.74, 8: 15.14, 16: 13.85, 32: 9.84, 64: 7.36, 128: 4.80, 256: 2.83}  # [S31], %
PIPELLM_LOSS = {"opt-30b": 52.8, "opt-66b": 88.2}  # [S27], % of throughput, "up to"
TINFOIL_ITL = 1.0  # [S30], % change of inter-token latency on Blackwell with a CC-aware engine ("about")

# Workload settings (assumptions where the sources are silent; see the printed notes)
FULL = {
    "serving_model": "llama3-8b", "concurrency": [1, 4, 8, 16, 32, 64, 128, 256], "input_len": 256, "output_len": 32,
    "requests_per_slot": 2, "sim_requests_per_slot": 8, "sim_min_requests": 64, "mech_concurrency": 8,
    "blackwell_presets": ["b300-hgx", "b300"], "blackwell_concurrency": [1, 8, 64, 256],
    "offload": [("opt-30b", "weights"), ("opt-66b", "weights"), ("opt-30b", "kv")],
    "offload_batch": 32, "prompt_len": 128, "gen_len": 4,
    "multistep_concurrency": [1, 8, 64], "multistep_steps": 8,
}
QUICK = {
    "serving_model": "tiny", "concurrency": [1, 4], "input_len": 32, "output_len": 4,
    "requests_per_slot": 2, "sim_requests_per_slot": 4, "sim_min_requests": 8, "mech_concurrency": 4,
    "blackwell_presets": ["b300"], "blackwell_concurrency": [4],
    "offload": [("tiny", "weights"), ("tiny", "kv")],
    "offload_batch": 4, "prompt_len": 16, "gen_len": 2,
    "multistep_concurrency": [4], "multistep_steps": 4,
}
SCHEDULER = "sglang"  # replay serve's overlap scheduler, for the --overlap captures
FIX_FLAG = "--copy-thread"  # examples/serving.py: input copies (and the readback) on copy threads, SGLang's fix


class _Out:
    def __init__(self):
        self.lines: list[str] = []

    def __call__(self, text: str = "") -> None:
        self.lines.append(text)


def capture(work: Path, name: str, script: str, args: list[str], device: str | None = None) -> tuple[Path, str]:
    """``tracegen capture`` of ``script`` into ``work/name.parquet`` (kept if already there), on the
    emulated machine ``device`` (a preset name; the default cost model when None)."""
    out = work / f"{name}.parquet"
    dev = ["--device", device] if device else []
    argv = ["capture", "--host-time", "modelled", *dev, "-o", str(out), f"examples/{script}", "--", *args]
    shown = "tracegen " + shlex.join(argv).replace(str(out), f"{name}.parquet")
    if not out.exists():
        print(f"$ {shown}", file=sys.stderr, flush=True)
        rc = subprocess.run([sys.executable, "-m", "tracegen.cli", *argv], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if rc.returncode != 0:
            last = (rc.stderr.strip().splitlines() or ["?"])[-1]
            raise FastrackError(f"capture of {name} failed: {last}")
    return out, shown


def serving_args(w: dict, c: int, *extra: str) -> list[str]:
    """``examples/serving.py`` options of one serving workload: decode in CUDA graphs, as vLLM and
    SGLang run it."""
    return ["--model", w["serving_model"], "--concurrency", str(c), "--requests", str(w["requests_per_slot"] * c),
            "--input-len", str(w["input_len"]), "--output-len", str(w["output_len"]),
            "--max-len", str(max(2048, w["input_len"] + w["output_len"])), "--cuda-graphs", *extra]


def offload_args(w: dict, model: str, what: str) -> list[str]:
    return ["--model", model, "--offload", what, "--batch", str(w["offload_batch"]),
            "--prompt-len", str(w["prompt_len"]), "--gen-len", str(w["gen_len"])]


def _name(w: dict, c: int, tag: str = "") -> str:
    return f"serving_{w['serving_model']}_c{c}{tag}"


def captures(w: dict, sections) -> list[tuple]:
    """Every capture the chosen sections need: (name, script, options[, device]), without repeats."""
    out: dict[str, tuple] = {}

    def add(name, script, args, *device):
        out.setdefault(name, (name, script, args, *device))

    conc = set()
    if 1 in sections:
        conc |= set(w["concurrency"])
    if 4 in sections:
        conc |= set(w["blackwell_concurrency"])
    if 2 in sections:
        conc.add(w["mech_concurrency"])
    for c in sorted(conc):  # the overlap captures and the fix, largest work first
        add(_name(w, c), "serving.py", serving_args(w, c, "--overlap"))
        add(_name(w, c, "_thread"), "serving.py", serving_args(w, c, "--overlap", FIX_FLAG))
    if 4 in sections:  # each Blackwell preset's own machine: capture and replay describe one machine
        for preset in w["blackwell_presets"]:
            for c in w["blackwell_concurrency"]:
                add(_name(w, c, f"_{preset}"), "serving.py", serving_args(w, c, "--overlap"), preset)
                add(_name(w, c, f"_{preset}_thread"), "serving.py", serving_args(w, c, "--overlap", FIX_FLAG), preset)
    if 2 in sections:
        c = w["mech_concurrency"]
        add(_name(w, c, "_async"), "serving.py", serving_args(w, c, "--overlap", "--async-h2d"))
        add(_name(w, c, "_sync"), "serving.py", serving_args(w, c))
    if 5 in sections:
        n = w["multistep_steps"]
        for c in w["multistep_concurrency"]:
            add(_name(w, c, "_sync"), "serving.py", serving_args(w, c))
            add(_name(w, c, f"_ms{n}"), "serving.py", serving_args(w, c, "--multi-step", str(n)))
    if 3 in sections:
        for model, what in w["offload"]:
            add(f"offload_{model}_{what}", "offload.py", offload_args(w, model, what))
    return sorted(out.values(), key=lambda job: -_weight(job))


def _weight(job) -> int:
    """Rough cost of a capture, to start the long ones first (largest concurrency)."""
    args = job[2]
    return int(args[args.index("--concurrency") + 1]) if "--concurrency" in args else 64


def capture_all(work: Path, w: dict, sections, jobs: int) -> None:
    """Run the captures ``jobs`` at a time up front (each is its own process; the traces are the
    same as one at a time); the sections then find them in ``work``."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for f in [pool.submit(capture, work, *job) for job in captures(w, sections)]:
            f.result()


def host_waits(graph, sched) -> dict[str, int]:
    """ns the host threads sat blocked (idle between one node's finish and the next one's start
    on the same thread), summed by the mechanism of the node the thread was waiting to run: the
    kind, suffixed ``h2d``/``d2h`` for a node of a host<->GPU copy (replay/pipeline/serving.py's labels).
    The TPOT breakdown walks the critical path, where such a wait shows as the GPU work waited
    for (``kernel``); this says which call the host was stuck in."""
    import numpy as np

    from replay.graph import LaneType

    on_lane = graph.lane >= 0
    host = np.flatnonzero(on_lane & (graph.lanes.type[np.where(on_lane, graph.lane, 0)] == int(LaneType.HOST_THREAD)))
    out: dict[str, int] = {}
    for lane in np.unique(graph.lane[host]):
        idx = host[graph.lane[host] == lane]
        idx = idx[np.argsort(sched.start[idx], kind="stable")]
        gap = sched.start[idx[1:]] - np.maximum.accumulate(sched.finish[idx[:-1]])
        for n in np.flatnonzero(gap > 0):
            node = idx[1 + n]
            label = graph.kind_label(int(graph.kind[node])) + {1: " h2d", 2: " d2h"}.get(int(graph.copy_dir[node]), "")
            out[label] = out.get(label, 0) + int(gap[n])
    return out


def replay(path: Path, protocols: list[str], overrides=(), waits: bool = False) -> dict[str, dict]:
    """Serving metrics (replay.pipeline.serving) of one whole trace under each protocol (``waits``:
    and the host's blocked time by mechanism, ``host_waits``)."""
    from replay.pipeline.run import load_graph, replay_graph
    from replay.pipeline.serving import serving_metrics

    graph, tr = load_graph(path)
    out = {}
    for p in protocols:
        rep = replay_graph(graph, p, preset=PRESET, overrides=overrides, trace_ops=tr.num_ops)
        out[p] = serving_metrics(rep.graph, rep.schedule)
        out[p]["makespan_ns"] = rep.result.makespan_ns
        if waits:
            out[p]["host_waits"] = host_waits(rep.graph, rep.schedule)
    return out


def sim_requests(w: dict, c: int) -> int:
    return max(w["sim_min_requests"], w["sim_requests_per_slot"] * c)


def lengths(w: dict) -> str:
    return f"fixed:{w['input_len']}:{w['output_len']}"


def serve_cmd(name: str, w: dict, c: int, protocols: list[str], preset: str = PRESET, host_time: str = "capture") -> str:
    """The ``replay serve`` command line of one load point (what ``simulate`` computes)."""
    argv = ["serve", f"{name}.parquet", "--protocols", ",".join(protocols), "--workload", f"closed:{c}",
            "--requests", str(sim_requests(w, c)), "--lengths", lengths(w), "--scheduler", SCHEDULER]
    if preset != PRESET:
        argv += ["--preset", preset]
    if host_time != "capture":
        argv += ["--host-time", host_time]
    return "replay " + shlex.join(argv)


def simulate(path: Path, w: dict, c: int, protocols: list[str], preset: str = PRESET,
             host_times: tuple[str, ...] = ("capture",)) -> dict[str, dict[str, dict]]:
    """``replay serve`` (replay/serve/run.py) at closed-loop concurrency ``c``: the captured steps
    priced once per protocol, then the request-level loop per host-time mode; ``{host_time:
    {protocol: metrics}}``, each metrics with ``extrapolated`` (shapes priced beyond the captured ones)."""
    from replay.pipeline.run import load_graph
    from replay.plugins import DEFAULT_MODEL
    from replay.serve.metrics import metrics
    from replay.serve.schedulers import scheduler
    from replay.serve.sim import simulate as run_loop
    from replay.serve.steps import price_tables
    from replay.serve.workloads import parse_workload

    graph, _ = load_graph(path)
    tables, _ = price_tables(graph, str(path), list(dict.fromkeys(["none", *protocols])), DEFAULT_MODEL, preset)
    del graph
    work = parse_workload(f"closed:{c}", sim_requests(w, c), lengths(w), 0)
    sched = scheduler(SCHEDULER)
    out: dict[str, dict[str, dict]] = {}
    for ht in host_times:
        out[ht] = {}
        for p, t in tables.items():
            m = metrics(run_loop(work, t, sched, 256, 2048, ht), {})
            m["extrapolated"] = len(t.extrapolated)
            out[ht][p] = m
    return out


def loss(m: dict, ref: dict) -> float:
    """Output-token throughput lost against ``ref``, %."""
    return 100.0 * (1.0 - m["output_tokens_per_s"] / ref["output_tokens_per_s"])


def change(m: dict, ref: dict, key: str) -> float:
    """Relative change of the mean of ``key`` against ``ref``, %."""
    return 100.0 * (m[key]["mean"] / ref[key]["mean"] - 1.0)


def _ms(ns) -> str:
    return "n/a" if ns is None else f"{ns / 1e6:.2f}"


def _pct(v) -> str:
    return "n/a" if v is None else f"{v:.1f}%"


def sglang(out: _Out, work: Path, w: dict) -> None:
    m = w["serving_model"]
    out("### 1. Throughput lost under CC by concurrency (SGLang PR #15188 [S31])")
    out()
    out(f"Captures (`examples/serving.py`, one per concurrency c): {m}, `--concurrency c --requests "
        f"{w['requests_per_slot']}c`, prompts of {w['input_len'] // 2}-{w['input_len']} tokens and "
        f"{w['output_len'] // 2}-{w['output_len']} output tokens, decode-only steps in CUDA graphs (`--cuda-graphs`, "
        "as SGLang and vLLM run decode), `--overlap` (the overlap scheduler SGLang runs by default), bf16, "
        "temperature sampling on the GPU; so each capture's decode steps reach batch c. Simulation (`replay serve`, "
        f"scheduler `{SCHEDULER}`): closed loop at concurrency c, {w['sim_requests_per_slot']}c requests (at least "
        f"{w['sim_min_requests']}), every request `{lengths(w)}` (the capture's longest prompt and output: its "
        "CUDA graphs price decode attention at that context), token budget 2048, over the step prices of the "
        "capture at the same c. `loss` = 1 - (tokens/s under the protocol) / (tokens/s under `none`). "
        "**Assumptions**: the PR states neither the model, the GPU nor the request lengths; an 8B model is "
        "consistent with its 173 output tokens/s at concurrency 1 on one GPU. `host time`: `capture` is the "
        "capture's modelled host time (ATen dispatch, module calls, CUDA calls; not the engine's own Python); "
        "`vllm-profile` adds vLLM v0.5.3's profiled scheduling share [S41] to every step (an upper bound for a "
        f"current engine). The fix column re-captures with `{FIX_FLAG}` (the input copies and the token "
        "readback on copy threads of their own, SGLang's fix).")
    out()
    out("| concurrency | tokens/s none | tokens/s baseline | loss baseline | loss baseline, host time "
        f"`vllm-profile` | loss fastrack | loss baseline with `{FIX_FLAG}` | loss (SGLang) |")
    out("|---:|---:|---:|---:|---:|---:|---:|---:|")
    cmds, extra = [], []
    for c in w["concurrency"]:
        path, cmd = capture(work, _name(w, c), "serving.py", serving_args(w, c, "--overlap"))
        fpath, fcmd = capture(work, _name(w, c, "_thread"), "serving.py", serving_args(w, c, "--overlap", FIX_FLAG))
        cmds += [cmd, serve_cmd(_name(w, c), w, c, ["none", "baseline", "fastrack"]),
                 serve_cmd(_name(w, c), w, c, ["none", "baseline"], host_time="vllm-profile"),
                 fcmd, serve_cmd(_name(w, c, "_thread"), w, c, ["none", "baseline"])]
        r = simulate(path, w, c, ["baseline", "fastrack"], host_times=("capture", "vllm-profile"))
        f = simulate(fpath, w, c, ["baseline"])["capture"]
        cap, prof = r["capture"], r["vllm-profile"]
        pub = SGLANG_LOSS.get(c)
        ex = max(x["extrapolated"] for x in [*cap.values(), *f.values()])
        if ex:
            extra.append(f"c={c}: {ex}")
        out(f"| {c} | {cap['none']['output_tokens_per_s']:,.1f} | {cap['baseline']['output_tokens_per_s']:,.1f} | "
            f"{loss(cap['baseline'], cap['none']):.1f}% | {loss(prof['baseline'], prof['none']):.1f}% | "
            f"{loss(cap['fastrack'], cap['none']):.1f}% | {loss(f['baseline'], f['none']):.1f}% | "
            f"{_pct(pub)} |")
    out()
    out("Step shapes priced beyond the captured ones (linear extrapolation, by concurrency): "
        + (", ".join(extra) if extra else "none") + ". Commands:")
    out()
    out("```")
    out("\n".join(cmds))
    out("```")
    out()


def _top(delta: dict[str, float], n: int = 6) -> str:
    items = sorted(delta.items(), key=lambda kv: -abs(kv[1]))[:n]
    return ", ".join(f"`{k}` {v / 1e3:+.1f}" for k, v in items) or "-"


def vllm(out: _Out, work: Path, w: dict) -> None:
    from replay.pipeline.serving import overhead

    c = w["mech_concurrency"]
    out("### 2. The decode mechanisms of vLLM PR #52226 [S32]")
    out()
    out(f"Concurrency {c}, the captures of section 1's workload, each replayed whole (the batches the capture ran). "
        "Decode in CUDA graphs (`--cuda-graphs`). `sync loop` is vLLM's synchronous step (inputs copied on the "
        "compute stream into the graph's static buffers, "
        "tokens read back with `.tolist()` before the next step is prepared); `overlap` schedules one step "
        "ahead (vLLM's async scheduling, SGLang's overlap scheduler); `--async-h2d` puts the input copies on "
        f"a copy stream of the same thread, `{FIX_FLAG}` on copy threads. The columns are the change of the mean "
        "TPOT against `none` and its largest terms by mechanism (us per output token; `sync_wait h2d`: the "
        "calling thread blocked in a host-synchronous H2D copy; `cpu_decrypt d2h`: the token readback "
        "decrypted on the CPU; `cc_submit`: encrypted command submission per launch).")
    out()
    names = {"sync loop": ("_sync", serving_args(w, c)),
             "overlap": ("", serving_args(w, c, "--overlap")),
             "overlap + `--async-h2d`": ("_async", serving_args(w, c, "--overlap", "--async-h2d")),
             f"overlap + `{FIX_FLAG}`": ("_thread", serving_args(w, c, "--overlap", FIX_FLAG))}
    runs, cmds = {}, []
    for label, (tag, args) in names.items():
        path, cmd = capture(work, _name(w, c, tag), "serving.py", args)
        cmds.append(cmd)
        runs[label] = replay(path, ["none", "baseline"], waits=True)
    out("| loop | TPOT none (ms) | TPOT baseline (ms) | change | largest changes by mechanism (us/token) |")
    out("|---|---:|---:|---:|---|")
    for name, r in runs.items():
        o = overhead(r["baseline"], r["none"])
        d = o["breakdown_delta"]["tpot_per_token_ns"]["mechanism"]
        out(f"| {name} | {_ms(r['none']['tpot_ns']['mean'])} | {_ms(r['baseline']['tpot_ns']['mean'])} | "
            f"{100 * (o['tpot_mean'] or 0):+.1f}% | {_top(d)} |")
    out()
    out("Where the host threads sat blocked, by the call they were waiting in (us per output token over the "
        "whole run, all host threads; `sync`: a stream, event or device synchronisation; `sync_wait h2d`: a "
        "host-synchronous H2D copy waiting for earlier work on its stream; `cpu_decrypt d2h`: a host-synchronous "
        "D2H readback waiting for its data to land):")
    out()
    out("| loop | none | baseline |")
    out("|---|---|---|")
    for name, r in runs.items():
        cells = []
        for p in ("none", "baseline"):
            tok = r[p]["output_tokens"] or 1
            waits = sorted(r[p].get("host_waits", {}).items(), key=lambda kv: -kv[1])[:4]
            cells.append(", ".join(f"`{k}` {v / tok / 1e3:.1f}" for k, v in waits) or "-")
        out(f"| {name} | {cells[0]} | {cells[1]} |")
    out()
    out("```")
    out("\n".join(cmds))
    out("```")
    out()


def pipellm(out: _Out, work: Path, w: dict) -> None:
    out("### 3. Offloading under CC (PipeLLM [S27])")
    out()
    out(f"`examples/offload.py`: batch {w['offload_batch']}, prompt {w['prompt_len']}, {w['gen_len']} generated "
        "tokens, fp16, every layer's weights (or KV cache) copied in from pinned host memory each forward, "
        "one layer ahead on a copy stream; each trace replayed whole. `baseline (own data)` sets "
        "`direct.h2d=none`: offloaded weights and "
        "KV are the VM's own plaintext, not client ciphertext, so the baseline makes one CPU pass, not two; "
        "`baseline (default rule)` keeps the preset's rule (pinned copies of 64 KiB or more count as client "
        "data: two CPU passes). PipeLLM's figures are \"up to\" losses of output throughput on H100 CC. "
        "**Assumption**: PipeLLM's batch and lengths are not restated here; a short generation (the loss is "
        "per forward, the same at every step) keeps the capture small.")
    out()
    out("| model | offload | tokens/s none | loss baseline (own data) | loss baseline (default rule) | "
        "loss fastrack | PipeLLM |")
    out("|---|---|---:|---:|---:|---:|---:|")
    cmds = []
    for model, what in w["offload"]:
        args = offload_args(w, model, what)
        path, cmd = capture(work, f"offload_{model}_{what}", "offload.py", args)
        cmds.append(cmd)
        r = replay(path, ["none", "baseline", "fastrack"])
        own = replay(path, ["baseline"], overrides=("direct.h2d=none",))["baseline"]
        pub = PIPELLM_LOSS.get(model) if what == "weights" else None
        out(f"| {model} | {what} | {r['none']['output_tokens_per_s']:,.1f} | {loss(own, r['none']):.1f}% | "
            f"{loss(r['baseline'], r['none']):.1f}% | {loss(r['fastrack'], r['none']):.1f}% | "
            f"{'up to %.1f%%' % pub if pub is not None else 'n/a'} |")
    out()
    out("```")
    out("\n".join(cmds))
    out("```")
    out()


def blackwell(out: _Out, work: Path, w: dict) -> None:
    out("### 4. Inter-token latency on Blackwell (Tinfoil engineering blog [S30])")
    out()
    out("The overlap workload of section 1 captured on each preset's own emulated machine (`tracegen capture "
        "--device P`: its kernels priced by that preset's compute half; `h100-sxm` rows are section 1's "
        "captures) and simulated with `replay serve --preset P` as in section 1. The inter-token latency is the mean TPOT (each request's mean gap "
        "between its output tokens, from the simulated token times), its change against `none` under the same "
        f"preset. `CC-aware engine` is the `{FIX_FLAG}` capture under `baseline`. The blog reports about "
        f"+{TINFOIL_ITL:.0f}% ITL for a CC-aware engine on Blackwell (model, GPU count and load not stated). "
        "`b300-hgx` is the datasheet hardware with the H100 CC path, `b300` the same with the bridge calibrated "
        "to the Blackwell microbenchmarks [S38].")
    out()
    out("| preset | concurrency | ITL none (ms) | change baseline | change CC-aware engine | "
        "change fastrack | Tinfoil |")
    out("|---|---:|---:|---:|---:|---:|---:|")
    cmds = []
    for preset in [PRESET, *w["blackwell_presets"]]:
        for c in w["blackwell_concurrency"]:
            tag, dev = ("", None) if preset == PRESET else (f"_{preset}", preset)
            path, cmd = capture(work, _name(w, c, tag), "serving.py", serving_args(w, c, "--overlap"), dev)
            fpath, fcmd = capture(work, _name(w, c, f"{tag}_thread"), "serving.py",
                                  serving_args(w, c, "--overlap", FIX_FLAG), dev)
            if preset != PRESET:
                cmds += [cmd, fcmd, serve_cmd(_name(w, c, tag), w, c, ["none", "baseline", "fastrack"], preset),
                         serve_cmd(_name(w, c, f"{tag}_thread"), w, c, ["none", "baseline"], preset)]
            r = simulate(path, w, c, ["baseline", "fastrack"], preset)["capture"]
            f = simulate(fpath, w, c, ["baseline"], preset)["capture"]
            pub = f"about +{TINFOIL_ITL:.0f}%" if preset != PRESET else "n/a"
            out(f"| `{preset}` | {c} | {_ms(r['none']['tpot_ns']['mean'])} | "
                f"{change(r['baseline'], r['none'], 'tpot_ns'):+.1f}% | "
                f"{change(f['baseline'], f['none'], 'tpot_ns'):+.1f}% | "
                f"{change(r['fastrack'], r['none'], 'tpot_ns'):+.1f}% | {pub} |")
    out()
    out("```")
    out("\n".join(cmds))
    out("```")
    out()


def multistep(out: _Out, work: Path, w: dict) -> None:
    from replay.pipeline.serving import overhead

    n = w["multistep_steps"]
    out("### 5. Multi-step scheduling under CC (vLLM v0.6.0 [S41])")
    out()
    out("Section 1's workload in vLLM's synchronous loop (no `--overlap`; decode in CUDA graphs): `sync loop` "
        f"schedules every step, `--multi-step {n}` schedules a decode-only step once per {n} GPU steps (vLLM's "
        f"`--num-scheduler-steps {n}`): the round's inputs are prepared on the host and copied H2D once, advanced "
        "on the GPU between its steps, and each step's tokens are read back after the next step is launched; a "
        "step with a prefill chunk runs alone, and a request that finishes inside a round keeps its row to the "
        "round's end. Each trace is replayed whole (the batches and rounds the capture ran). `GPU steps`: the "
        "engine steps of the capture; `dropped`: decode rows computed for requests that already had every token, "
        "% of the rows; `H2D/token`: input copies per output token; `readback wait`: the time the host threads "
        "sat blocked in the host-synchronous token readback under `baseline` (`cpu_decrypt d2h`, us per output "
        "token); the last column the largest changes of the mean TPOT against `none` by mechanism (us per output "
        "token, as in section 2). `loss` = 1 - (tokens/s under the protocol) / (tokens/s under `none`).")
    out()
    out("| concurrency | loop | GPU steps | dropped | H2D/token | tokens/s none | tokens/s baseline | loss baseline | "
        "loss fastrack | readback wait | largest changes by mechanism (us/token) |")
    out("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    cmds = []
    for c in w["multistep_concurrency"]:
        for label, tag, extra in (("sync loop", "_sync", ()),
                                  (f"`--multi-step {n}`", f"_ms{n}", ("--multi-step", str(n)))):
            path, cmd = capture(work, _name(w, c, tag), "serving.py", serving_args(w, c, *extra))
            cmds.append(cmd)
            r = replay(path, ["none", "baseline", "fastrack"], waits=True)
            steps, rows, h2d = _step_rows_h2d(path)
            base = r["baseline"]
            tok = base["output_tokens"] or 1
            dropped = rows + base["complete_requests"] - base["output_tokens"]
            wait = base["host_waits"].get("cpu_decrypt d2h", 0)
            d = overhead(base, r["none"])["breakdown_delta"]["tpot_per_token_ns"]["mechanism"]
            out(f"| {c} | {label} | {steps} | {100 * dropped / max(rows, 1):.1f}% | {h2d / tok:.2f} | "
                f"{r['none']['output_tokens_per_s']:,.1f} | {base['output_tokens_per_s']:,.1f} | "
                f"{loss(base, r['none']):.1f}% | {loss(r['fastrack'], r['none']):.1f}% | {wait / tok / 1e3:,.1f} | "
                f"{_top(d, 4)} |")
    out()
    out("```")
    out("\n".join(cmds))
    out("```")
    out()


def _step_rows_h2d(path: Path) -> tuple[int, int, int]:
    """(engine steps, decode rows over all steps, H2D copies) of a captured trace, from its
    engine-step markers and copies."""
    import pyarrow.parquet as pq

    t = pq.read_table(path, columns=["kind", "name", "copy_dir"]).to_pydict()
    marks = [nm.split(":") for nm in t["name"] if nm.startswith("range_push:engine_step:")]
    h2d = sum(1 for k, d in zip(t["kind"], t["copy_dir"]) if k == "memcpy" and d == "H2D")
    return len(marks), sum(int(m[3]) for m in marks), h2d


def parse_sections(spec: str | None) -> tuple[int, ...]:
    if spec is None:
        return SECTIONS
    allowed = ", ".join(str(s) for s in SECTIONS)
    try:
        got = tuple(sorted({int(s) for s in spec.split(",") if s.strip()}))
    except ValueError:
        raise ConfigError(f"--sections must be a comma-separated list of {allowed}") from None
    if not got or any(s not in SECTIONS for s in got):
        raise ConfigError(f"--sections must be a comma-separated list of {allowed}")
    return got


def split_sections(text: str) -> dict[int, str]:
    """The generated text by section: 0 the heading line(s), N the text from ``### N.`` to the next one."""
    import re

    parts = re.split(r"(?m)^(?=### \d+\. )", text)
    out = {0: parts[0]}
    for part in parts[1:]:
        out[int(part[4:part.index(".")])] = part
    return out


def section(work: Path, quick: bool, jobs: int = 1, sections=SECTIONS) -> str:
    w = QUICK if quick else FULL
    capture_all(work, w, sections, jobs)
    out = _Out()
    out("Generated by `python benchmarks/validation/validate_serving.py --write docs/serving.md`"
        + (" (**--quick**: small models, a smoke test, not the validation)" if quick else "")
        + f"; preset `{PRESET}` unless named; traces captured under emulation (cost model `h100-sxm`, modelled "
        "host time).")
    out()
    for s, fn in ((1, sglang), (2, vllm), (3, pipellm), (4, blackwell), (5, multistep)):
        if s in sections:
            fn(out, work, w)
    return "\n".join(out.lines).rstrip() + "\n"


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", type=Path, default=None, help="replace the section between the markers of this file")
    ap.add_argument("--work", type=Path, default=None,
                    help="directory for the captured traces (existing ones are reused); default: a temporary one")
    ap.add_argument("--quick", action="store_true", help="small models: a smoke test of this script")
    ap.add_argument("--jobs", type=int, default=2, help="captures run at once (default 2)")
    ap.add_argument("--sections", default=None, help="comma-separated sections to print (default: all; not with --write)")
    args = ap.parse_args(argv)
    try:
        sections = parse_sections(args.sections)
        if args.write is not None:
            if sections != SECTIONS:
                raise ConfigError(f"--write {args.write}: --sections would leave out part of the block; nothing written")
        with tempfile.TemporaryDirectory(prefix="validate_serving_") as tmp:
            work = args.work or Path(tmp)

            def make() -> str:
                work.mkdir(parents=True, exist_ok=True)
                return section(work.resolve(), args.quick, args.jobs, sections)

            emit_section(args.write, BEGIN, END, make)  # --write checked before the captures
    except FastrackError as exc:
        print(f"validate_serving: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
