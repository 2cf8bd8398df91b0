"""Validation of the CC model's presets: regenerates the "Validation" block of docs/model.md.

Usage:
    python benchmarks/validation/validate_cc.py                          # print the block (Markdown)
    python benchmarks/validation/validate_cc.py --write docs/model.md   # replace it between the markers

``--write`` replaces the text between ``<!-- validate_cc:begin -->`` and ``<!-- validate_cc:end -->``
of the file, atomically; a file without exactly one pair of markers is refused (one line, exit 2,
nothing written). What it computes (nothing here is fitted, and nothing was fitted to it):

1. The calibration inputs reproduced. Every preset of the H100 model whose source strings say a
   value was fitted (or read) by ``replay calibrate`` from a measurement file is found from the
   registry; each such value is shown as the preset states it (model API), next to the base preset's
   value, and the file's microbenchmark points are replayed the way ``cc_microbench.py --simulate``
   replays them (``tracegen synth memcpy`` loops under ``none`` and ``baseline`` with plaintext
   buffers, ``direct.*=none``) and compared with the published figure behind each point.
2. One copy table per preset of the registry: pinned and pageable H2D and D2H copies of 4 KiB,
   64 KiB, 1 MiB, 64 MiB and 1 GiB (``tracegen synth memcpy --repeat 1``) under none, baseline,
   fastrack and tee-io with the preset's own ``[direct]`` rule, and baseline with plaintext buffers.
3. Where the model disagrees with its inputs or with itself, as computed lists (the reasons are the
   prose of docs/model.md around the block).
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from functools import lru_cache
from pathlib import Path

from fastrack_core.docsection import between, emit_section, replace_section
from fastrack_core.errors import FastrackError
from fastrack_core.traceio import Trace
from replay.frontend.calibrate import MICROBENCH_SETS, SMALL_MAX_BYTES, load_measurements
from replay.frontend.paraminfo import unit_of
from replay.pipeline.build import build_graph
from replay.pipeline.run import replay_graph
from replay.plugins import load_model
from tracegen.synth import memcpy_table

ROOT = Path(__file__).resolve().parents[2]  # benchmarks/<kind>/ -> the repository root
BEGIN, END = "<!-- validate_cc:begin -->", "<!-- validate_cc:end -->"
MODEL = "h100"  # the CC model whose presets are validated
SIZES = [("4 KiB", 4 << 10), ("64 KiB", 64 << 10), ("1 MiB", 1 << 20), ("64 MiB", 64 << 20), ("1 GiB", 1 << 30)]
PROTOCOLS = ["none", "baseline", "fastrack", "tee-io"]
TABLE_REPEAT = 1  # one copy per trace: `tracegen synth memcpy --repeat 1`, as `replay compare` shows it
GRAPH_KERNELS = 100  # cc_microbench.py's default graph size (not used by the copy figures)
PLAINTEXT = list(MICROBENCH_SETS)  # host-built buffers: no copy counts as client ciphertext
GIB = float(1 << 30)

# The published figure behind each point of a shipped measurement file (the file stores latencies
# derived from them, as its "notes" say). Keyed by the file's name, then (direction, memory, bytes).
# kind: "toll" = CC-on minus CC-off per call (ns), "ratio" = CC-off / CC-on latency (= the CC-on /
# CC-off bandwidth ratio), "rate" = bytes / CC-on latency (GiB/s).
PUBLISHED = {
    "b300-cc-microbench.json": ("[S38] arXiv 2606.23969", {
        ("h2d", "pinned", 4096): ("toll", 330_000.0),
        ("d2h", "pinned", 4096): ("toll", 330_000.0),
        ("h2d", "pinned", 1 << 30): ("ratio", 0.203),
        ("d2h", "pinned", 1 << 30): ("ratio", 0.211)}),
    "h200-cc-microbench.json": ("[S14] vLLM issue #55428", {
        ("h2d", "pinned", 1 << 30): ("rate", 4.9)}),
}
FIGURE_NAMES = {"toll": "CC cost per call", "ratio": "bandwidth CC-on / CC-off", "rate": "CC-on rate"}
CALIBRATED = re.compile(r"(?:fit by replay calibrate to|read from) ([\w.+-]+\.json)")
POINT_LABELS = re.compile(r"copies\[\d+\]|non_blocking_blocks_host|graph_launch|launch|d2d")


class _Out:
    def __init__(self):
        self.lines: list[str] = []

    def __call__(self, text: str = "") -> None:
        self.lines.append(text)


def _microbench():
    """benchmarks/cc_microbench.py, loaded by path (its ``simulate`` replays the calibration loops)."""
    path = ROOT / "benchmarks" / "cc_microbench.py"
    spec = importlib.util.spec_from_file_location("cc_microbench", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _t(ns: float) -> str:
    return f"{ns / 1e3:,.3f} us" if ns < 1e6 else f"{ns / 1e6:,.3f} ms"


def _pct(model: float, ref: float) -> str:
    return f"{100 * (model / ref - 1):+.2f}%"


def _value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1e4 else f"{v:,.0f}"
    return f"`{v}`"


@lru_cache(maxsize=None)
def _hw(preset: str):
    return load_model(MODEL).from_preset(preset)


def _ranges(hw) -> dict:
    # key_range = [low, high] of the preset (replay.config.Preset.ranges: table -> key -> (low, high, why))
    return getattr(getattr(hw, "_preset", None), "ranges", None) or {}


def _own_rule(hw) -> list[str]:
    """The preset's own ``[direct]`` rule as ``--set`` overrides (to undo the plaintext default of a loop)."""
    return [f"direct.{k}={v}" for k, v in sorted(hw.params["direct"].items())]


# ---------------------------------------------------------------------------------------------
# 1. calibration inputs


def calibrated_presets() -> dict[Path, dict[str, list[str]]]:
    """measurement file -> preset name -> the keys its sources say ``replay calibrate`` fitted or read
    from that file (found from the registry's presets and their source strings)."""
    found: dict[Path, dict[str, list[str]]] = {}
    for name in load_model(MODEL).available_presets():
        hw = _hw(name)
        for table, srcs in hw.sources.items():
            for key, src in srcs.items():
                m = CALIBRATED.search(str(src))
                if m:
                    path = (Path(hw.preset_path).parent / m.group(1)).resolve()
                    found.setdefault(path, {}).setdefault(name, []).append(f"{table}.{key}")
    return found


@lru_cache(maxsize=None)
def _simulated(preset: str, sets: tuple[str, ...], sizes: tuple[int, ...], repeat: int) -> dict:
    """cc_microbench.py --simulate PRESET --set ... as a dict: (direction, memory, bytes) -> (on, off)."""
    out = _microbench().simulate(preset, list(sets), list(sizes), repeat, GRAPH_KERNELS)
    return {(c["direction"], c["memory"], c["bytes"]): (c["cc_on_ns"], c["cc_off_ns"]) for c in out["copies"]}


def _figure(kind: str, on: float, off: float, nbytes: int) -> float:
    return {"toll": on - off, "ratio": off / on, "rate": nbytes / (on / 1e9) / GIB}[kind]


def _show_figure(kind: str, v: float) -> str:
    return {"toll": f"+{v / 1e3:,.1f} us", "ratio": f"{v:.3f}x", "rate": f"{v:.2f} GiB/s"}[kind]


def base_preset(preset: str) -> str:
    """The preset a calibrated preset ``extends`` (its TOML's ``[preset] extends``, resolved next to it
    as the loader does): the values before calibration."""
    import tomllib

    path = Path(_hw(preset).preset_path)
    ref = tomllib.loads(path.read_text()).get("preset", {}).get("extends", "")
    if not ref:
        return preset
    cand = path.parent / (ref if ref.endswith(".toml") else f"{ref}.toml")
    return str(cand.resolve()) if cand.is_file() else ref


def calibration(out: _Out, path: Path, presets: dict[str, list[str]]) -> list[dict]:
    """The parameter table and the reproduced points of one measurement file; returns the points' figures
    (for section 3)."""
    meas = load_measurements(path)
    cite, published = PUBLISHED.get(path.name, (meas.source or "(no published source named)", {}))
    copies = [p for p in meas.points if p.what == "copy"]
    sizes = tuple(sorted({p.nbytes for p in copies}))
    rows: list[dict] = []
    for preset, keys in presets.items():
        hw = _hw(preset)
        base = base_preset(preset)
        base_name = _hw(base).preset_name
        out(f"**`{preset}`**, calibrated from `{_shown(path)}` "
            f"(published: {cite}; {meas.repeat} iterations per loop); it extends `{base_name}`, whose values are "
            "those before calibration. The calibrated values as the preset states them:")
        out()
        out(f"| parameter | unit | `{preset}` | range | `{base_name}` (base) | fitted to |")
        out("|---|---|---|---|---|---|")
        ranges = _ranges(hw)
        for name in keys:
            table, key = name.split(".", 1)
            rng = ranges.get(table, {}).get(key)
            pts = ", ".join(dict.fromkeys(POINT_LABELS.findall(str(hw.sources[table][key]))))
            out(f"| `{name}` | {unit_of(name) or '-'} | {_value(hw.params[table][key])} | "
                f"{f'{_value(rng[0])} to {_value(rng[1])}' if rng else '-'} | "
                f"{_value(_hw(base).params[table][key])} | {pts or 'every point of the file'} |")
        out()
        cal = _simulated(preset, (), sizes, meas.repeat)
        own = _simulated(preset, tuple(_own_rule(hw)), sizes, meas.repeat)
        unc = _simulated(base, (), sizes, meas.repeat)
        out(f"Reproduced: each point's loop replayed under `{preset}` (`cc_microbench.py --simulate {preset}`: "
            "plaintext buffers, as the fit replayed them), under the preset's own `[direct]` rule, and under the "
            f"uncalibrated `{base_name}`; the residual is against the published figure; the file's CC-off latencies "
            "are the model's own `none` replays when the file was written, set against today's:")
        out()
        out(f"| point | copy | figure | published | file | `{preset}` | residual | `{preset}`, own `direct` rule | "
            f"`{base_name}` (base) | CC-off: file -> model | CC-off residual |")
        out("|---|---|---|---|---|---|---|---|---|---|---|")
        for p in copies:
            k = (p.direction, p.memory, p.nbytes)
            kind, pub = published.get(k, ("toll" if p.nbytes <= SMALL_MAX_BYTES else "ratio", None))
            file_v = _figure(kind, p.cc_on_ns, p.cc_off_ns, p.nbytes)
            model_v = _figure(kind, *cal[k], p.nbytes)
            ref = pub if pub is not None else file_v
            row = dict(preset=preset, label=p.label, direction=p.direction, memory=p.memory, nbytes=p.nbytes,
                       kind=kind, published=pub, file=file_v, model=model_v,
                       own=_figure(kind, *own[k], p.nbytes), base=_figure(kind, *unc[k], p.nbytes),
                       on=cal[k][0], off=cal[k][1], own_on=own[k][0], own_off=own[k][1],
                       on_file=p.cc_on_ns, off_file=p.cc_off_ns)
            rows.append(row)
            out(f"| {p.label} | {p.direction.upper()} {p.memory} {_size(p.nbytes)} | {FIGURE_NAMES[kind]} | "
                f"{_show_figure(kind, pub) if pub is not None else '-'} | {_show_figure(kind, file_v)} | "
                f"{_show_figure(kind, model_v)} | {_pct(model_v, ref)} | {_show_figure(kind, row['own'])} | "
                f"{_show_figure(kind, row['base'])} | {_t(p.cc_off_ns)} -> {_t(cal[k][1])} | "
                f"{_pct(cal[k][1], p.cc_off_ns)} |")
        blocks = bool(hw.copy_blocks_host(_h2d()))
        out()
        out(f"`non_blocking` copies block the host under `{preset}`: {'yes' if blocks else 'no'}"
            + (f" (file: {'yes' if meas.blocks_host else 'no'})." if meas.blocks_host is not None else
               " (the file does not say)."))
        out()
    return rows


def _shown(path: Path) -> str:
    """A measurement file as the repository names it (models/h100/presets/...)."""
    top = Path(load_model(MODEL).presets_dir).resolve().parents[2]
    return str(path.relative_to(top)) if path.is_relative_to(top) else path.name


def _h2d():
    from fastrack_core.schema import CopyDir

    return CopyDir.H2D


def _size(nbytes: int) -> str:
    for label, size in SIZES:
        if size == nbytes:
            return label
    return f"{nbytes:,} B"


# ---------------------------------------------------------------------------------------------
# 2. copy tables


@lru_cache(maxsize=None)
def _copy_graph(size: int, direction: str, memory: str):
    return build_graph(Trace(table=memcpy_table(size, direction, memory, TABLE_REPEAT), metadata={}))


def copy_row(preset: str, size: int, direction: str, memory: str) -> dict[str, float | None]:
    """Time of one copy (the call, the copy, the stream sync) per protocol under the preset's own
    rules, and ``plaintext``: baseline with ``direct.*=none``; ``None`` for tee-io on a preset without
    ``[tee_io]``."""
    g = _copy_graph(size, direction, memory)
    has_teeio = _hw(preset).params.get("tee_io") is not None
    t: dict[str, float | None] = {}
    for p in PROTOCOLS:
        if p == "tee-io" and not has_teeio:
            t[p] = None
            continue
        t[p] = replay_graph(g, p, MODEL, preset, []).result.makespan_ns / TABLE_REPEAT
    t["plaintext"] = replay_graph(g, "baseline", MODEL, preset, PLAINTEXT).result.makespan_ns / TABLE_REPEAT
    return t


def copy_table(out: _Out, preset: str) -> list[dict]:
    hw = _hw(preset)
    rule = ", ".join(f"{k} = {v}" for k, v in sorted(hw.params["direct"].items()))
    out(f"**`{preset}`** ({hw.preset_description}); `[direct]`: {rule}.")
    out()
    out("| copy | size | none | baseline | fastrack | tee-io | baseline / none | fastrack / none | tee-io / none | "
        "baseline, plaintext | plaintext / none |")
    out("|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for direction in ("h2d", "d2h"):
        for memory in ("pinned", "pageable"):
            for label, size in SIZES:
                t = copy_row(preset, size, direction, memory)
                rows.append(dict(preset=preset, direction=direction, memory=memory, size=size, label=label, **t))
                cell = {p: "-" if v is None else _t(v) for p, v in t.items()}
                ratio = {p: "-" if v is None else f"{v / t['none']:.2f}x" for p, v in t.items()}
                out(f"| {direction.upper()} {memory} | {label} | {cell['none']} | {cell['baseline']} | "
                    f"{cell['fastrack']} | {cell['tee-io']} | {ratio['baseline']} | {ratio['fastrack']} | "
                    f"{ratio['tee-io']} | {cell['plaintext']} | {ratio['plaintext']} |")
    out()
    return rows


# ---------------------------------------------------------------------------------------------
# 3. disagreements, computed


def disagreements(out: _Out, cal_rows: list[dict], table_rows: list[dict]) -> None:
    out("**Where the model disagrees** (computed from the tables above; the reasons are in the text after "
        "this block):")
    out()
    n = 0
    for r in cal_rows:
        if r["nbytes"] <= SMALL_MAX_BYTES:
            continue
        n += 1
        out(f"- `{r['preset']}` {r['direction'].upper()} {r['memory']} {_size(r['nbytes'])}: CC-on / CC-off "
            f"latency {r['on'] / r['off']:.2f}x with plaintext buffers (the calibration's reading), "
            f"{r['own_on'] / r['own_off']:.2f}x under the preset's own `direct` rule; the file's "
            f"{r['on_file'] / r['off_file']:.2f}x.")
    by_preset: dict[str, dict[str, dict]] = {}
    for r in cal_rows:
        if r["kind"] == "ratio" and r["published"] is not None and r["memory"] == "pinned":
            by_preset.setdefault(r["preset"], {})[r["direction"]] = r
    for preset, d in by_preset.items():
        if "h2d" in d and "d2h" in d:
            pub = "D2H" if d["d2h"]["published"] > d["h2d"]["published"] else "H2D"
            mod = "D2H" if d["d2h"]["model"] > d["h2d"]["model"] else "H2D"
            n += 1
            out(f"- `{preset}`: the published figures give {pub} the better bandwidth ratio, the model {mod} "
                f"(D2H {d['d2h']['model']:.3f}x against H2D {d['h2d']['model']:.3f}x)"
                + ("." if pub == mod else ": the order is reversed."))
    drift = [r for r in cal_rows if abs(r["off"] / r["off_file"] - 1) > 0.005]
    if drift:
        n += 1
        out("- The model's CC-off latency has moved since the measurement files were written: "
            + "; ".join(f"`{r['preset']}` {r['label']} {r['direction'].upper()} {r['memory']} {_size(r['nbytes'])} "
                        f"{_t(r['off_file'])} -> {_t(r['off'])} ({_pct(r['off'], r['off_file'])})" for r in drift)
            + ". The fit matched each point's CC cost (CC-on minus CC-off), which the tables above still reproduce.")
    faster = [r for r in table_rows if r["baseline"] < r["none"]]
    if faster:
        n += 1
        groups: dict[tuple, list[str]] = {}
        for r in faster:
            groups.setdefault((r["preset"], r["direction"], r["memory"]), []).append(
                f"{r['label']} {r['baseline'] / r['none']:.2f}x")
        out("- CC copies faster than the same copy without CC (baseline / none below 1): "
            + "; ".join(f"`{p}` {d.upper()} {m}: {', '.join(v)}" for (p, d, m), v in groups.items()) + ".")
    for preset in dict.fromkeys(r["preset"] for r in cal_rows):
        hw = _hw(preset)
        cpu, staging = hw.params["cpu_crypto"]["core_gb_s"], hw.params["host"]["staging_copy_gb_s"]
        if cpu > staging:
            n += 1
            out(f"- `{preset}`: the calibrated one-core AES-GCM rate `cpu_crypto.core_gb_s` = {cpu:g} GB/s is above "
                f"the same preset's plain host copy rate `host.staging_copy_gb_s` = {staging:g} GB/s.")
    if not n:
        out("- none found.")
    out()


# ---------------------------------------------------------------------------------------------


def section() -> str:
    out = _Out()
    presets = load_model(MODEL).available_presets()
    out("Generated by `python benchmarks/validation/validate_cc.py --write docs/model.md` from the presets of "
        f"the `{MODEL}` model's registry ({', '.join(f'`{p}`' for p in presets)}); nothing here is fitted.")
    out()
    out("### Calibration inputs reproduced")
    out()
    cal_rows: list[dict] = []
    for path, by_preset in sorted(calibrated_presets().items()):
        cal_rows += calibration(out, path, by_preset)
    out("### Copies, every preset")
    out()
    out(f"One copy per trace (`tracegen synth memcpy --bytes SIZE --direction D --memory M --repeat {TABLE_REPEAT}`, "
        "then `replay compare T --preset P --protocols none,baseline,fastrack,tee-io`): the time from the call to "
        "the end of the stream sync. Every protocol runs under the preset's own `[direct]` rule (a pinned H2D copy "
        "from its `min_bytes` is client ciphertext: decrypted and re-encrypted by the CPU under baseline); "
        "\"plaintext\" is baseline with `--set direct.h2d=none --set direct.d2h=none` (one CPU pass, a "
        "microbenchmark's buffers and the calibration's reading).")
    out()
    table_rows: list[dict] = []
    for preset in presets:
        table_rows += copy_table(out, preset)
    disagreements(out, cal_rows, table_rows)
    return "\n".join(out.lines).rstrip() + "\n"


def write_section(path: Path, text: str) -> None:
    replace_section(path, BEGIN, END, between(BEGIN, text, END))


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", type=Path, default=None, help="replace the block between the markers of this file")
    args = ap.parse_args(argv)
    try:
        emit_section(args.write, BEGIN, END, section)  # --write checked before the replays
    except FastrackError as exc:
        print(f"validate_cc: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
