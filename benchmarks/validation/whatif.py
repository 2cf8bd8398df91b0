"""What-if predictions against emulated ground truth: does ``replay --scale`` move the makespan the
way the (emulated) hardware does?

    python benchmarks/validation/whatif.py [--write docs/fidelity.md] [--only NAME ...] [--workdir DIR]
                                [--no-predict]

For every workload (the example scripts, with the commands of ``traces/README.md`` where they have
one, and the multi-stream programs of ``benchmarks/validation/whatif_workloads/``) it captures, with
``tracegen capture`` on the emulated GPU:

* the clean program;
* the same command with each speed factor of :data:`VARIANTS` (``--gpu-speed``, ``--host-speed``,
  ``--copy-speed``): the ground truth of a faster or slower GPU, host or link;

then compares, per changed capture, the **measured** makespan (the changed capture's span: first
op start to last op end, the emulated ground truth, independent of the graph builder) with the
**predicted** one (``replay --protocol captured CLEAN --scale KIND=1/F``: the clean capture with
those ops' durations scaled in the graph). The target is within 3 % either way. The clean
capture's own replay (no ``--scale``) is listed too: its error is the builder's baseline, which
every prediction of that workload inherits.

Without ``--write`` the Markdown table is printed; with it, the table replaces what lies between
``<!-- whatif:begin -->`` and ``<!-- whatif:end -->`` in that file (written atomically). The
prediction needs ``replay --scale``; where the installed ``replay`` lacks it the script stops at
once with one line, before capturing anything (``--no-predict`` captures and measures only, the
predicted column then reads ``-``).

Excluded: ``examples/toy_models.py`` (model definitions imported by the other examples, not a
workload). Every other example captures in under a minute on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # benchmarks/<kind>/ -> the repository root
sys.path.insert(0, str(ROOT / "benchmarks" / "tools"))

from regen_traces import documented_commands  # noqa: E402  (the one place the example commands live)
from fastrack_core.docsection import between, replace_section  # noqa: E402
from fastrack_core.errors import FastrackError  # noqa: E402

BEGIN, END = "<!-- whatif:begin -->", "<!-- whatif:end -->"
TARGET = 0.03  # the accuracy the what-if predictions aim for (relative makespan error)


@dataclass(frozen=True)
class Variant:
    label: str
    capture_opts: tuple[str, ...]  # added to the clean capture command
    scale: str  # the matching replay --scale KIND=FACTOR


VARIANTS = (
    Variant("GPU 2x faster", ("--gpu-speed", "2"), "kernel=0.5"),
    Variant("GPU 2x slower", ("--gpu-speed", "0.5"), "kernel=2"),
    Variant("host 2x slower", ("--host-speed", "0.5"), "host=2"),
    Variant("host 2x faster", ("--host-speed", "2"), "host=0.5"),
    Variant("copies 2x faster", ("--copy-speed", "2"), "memcpy=0.5"),
    Variant("copies 2x slower", ("--copy-speed", "0.5"), "memcpy=2"),
)

EXTRA = {  # examples without a documented shipped-trace command, and the synthetic workloads
    "qwen_forward": ["--skip-steps", "1", "--steps", "1", "examples/qwen_forward.py", "--", "--iters", "2"],
    "two_streams": ["benchmarks/validation/whatif_workloads/two_streams.py"],
    "producer_consumer": ["benchmarks/validation/whatif_workloads/producer_consumer.py"],
    "host_bound_loop": ["benchmarks/validation/whatif_workloads/host_bound_loop.py"],
}


def workloads() -> dict[str, list[str]]:
    """``{name: capture arguments}`` (what follows ``tracegen capture``, without ``-o``/``--name``)."""
    out = {}
    for fname, argv in documented_commands().items():
        args = list(argv[2:])
        for opt in ("-o", "--name"):
            if opt in args:
                i = args.index(opt)
                del args[i:i + 2]
        out[Path(fname).stem] = args
    out.update(EXTRA)
    return out


def run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)


def capture(args: list[str], out: Path, extra: tuple[str, ...] = ()) -> Path:
    """``tracegen capture`` (this interpreter) into ``out``, unless it is there already."""
    if not out.exists():
        cmd = [sys.executable, "-m", "tracegen.cli", "capture", "--host-time", "modelled", "-o", str(out), *extra, *args]
        r = run(cmd)
        if r.returncode != 0:
            tail = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
            raise SystemExit(f"whatif: capture failed ({shlex.join(cmd[3:])}): {tail}")
    return out


def makespan(trace: Path, scale: str | None = None) -> int:
    """``makespan_ns`` of ``replay --protocol captured TRACE [--scale S] --json``."""
    cmd = [sys.executable, "-m", "replay.frontend.cli", "--protocol", "captured", str(trace), "--no-reference", "--json"]
    if scale:
        cmd += ["--scale", scale]
    r = run(cmd)
    if r.returncode != 0:
        tail = (r.stderr.strip().splitlines() or ["(no message)"])[-1]
        raise SystemExit(f"whatif: replay failed ({' '.join(cmd[3:])}): {tail}")
    return int(json.loads(r.stdout)["makespan_ns"])


def span(trace: Path) -> int:
    """The captured span (ns): first op start to last op end."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    t = pq.read_table(trace, columns=["start_ns", "dur_ns"])
    start = t.column("start_ns")
    return int(pc.max(pc.add(start, t.column("dur_ns"))).as_py()) - int(pc.min(start).as_py())


def replay_has_scale() -> bool:
    r = run([sys.executable, "-m", "replay.frontend.cli", "run", "--help"])
    return r.returncode == 0 and "--scale" in r.stdout


def measure(names: list[str], workdir: Path, predict: bool) -> list[dict]:
    rows = []
    all_args = workloads()
    for name in names:
        args = all_args[name]
        clean = capture(args, workdir / f"{name}.parquet")
        base, replayed = span(clean), makespan(clean)
        print(f"{name}: clean {base / 1e6:.3f} ms (replayed {replayed / 1e6:.3f} ms)", file=sys.stderr, flush=True)
        for v in VARIANTS:
            tag = "_".join(o.lstrip("-") for o in v.capture_opts).replace(".", "p")
            changed = capture(args, workdir / f"{name}__{tag}.parquet", v.capture_opts)
            measured = span(changed)
            predicted = makespan(clean, v.scale) if predict else None
            rows.append({"workload": name, "variant": v, "clean": base, "replayed": replayed, "measured": measured,
                         "predicted": predicted})
            err = "" if predicted is None else f", predicted {predicted / 1e6:.3f} ms"
            print(f"    {v.label}: measured {measured / 1e6:.3f} ms{err}", file=sys.stderr, flush=True)
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [
        "Generated by `python benchmarks/validation/whatif.py --write docs/fidelity.md` (emulated captures; "
        "commands in the script's docstring). *clean*: the clean capture's span (its replay without "
        "`--scale` in brackets: the builder's baseline error); *measured*: the span of the capture made "
        "with the speed factor (the ground truth); *predicted*: `replay --protocol captured` of the clean "
        f"capture with `--scale`; error = predicted / measured - 1 (target: within {TARGET:.0%}).",
        "",
        "| workload | what-if | capture option | `--scale` | clean (ms) | measured (ms) | predicted (ms) | error |",
        "|---|---|---|---|---:|---:|---:|---:|",
    ]
    errors = []
    for r in rows:
        v = r["variant"]
        if r["predicted"] is None:
            pred, err = "-", "-"
        else:
            e = r["predicted"] / r["measured"] - 1
            errors.append((abs(e), r["workload"], v.label))
            pred, err = f"{r['predicted'] / 1e6:.3f}", f"{100 * e:+.2f}%"
        lines.append(f"| {r['workload']} | {v.label} | `{' '.join(v.capture_opts)}` | `{v.scale}` | "
                     f"{r['clean'] / 1e6:.3f} ({r['replayed'] / 1e6:.3f}) | {r['measured'] / 1e6:.3f} | {pred} | {err} |")
    lines.append("")
    if errors:
        within = sum(e <= TARGET for e, _, _ in errors)
        worst = max(errors)
        lines.append(f"{within} of {len(errors)} predictions within {TARGET:.0%}; worst {100 * worst[0]:.2f}% "
                     f"({worst[1]}, {worst[2]}).")
    else:
        lines.append("Predictions not run (`--no-predict`): the measured column only.")
    return "\n".join(lines) + "\n"


def write_section(path: Path, body: str) -> None:
    try:
        replace_section(path, BEGIN, END, between(BEGIN, body, END))
    except FastrackError as exc:
        raise SystemExit(f"whatif: {exc}") from None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", type=Path, metavar="MD", help="replace the whatif section of this Markdown file")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="workloads to run [all]")
    ap.add_argument("--workdir", type=Path, help="keep the captures here and reuse them [a temporary folder]")
    ap.add_argument("--no-predict", action="store_true", help="capture and measure only (no replay --scale)")
    args = ap.parse_args(argv)
    names = args.only or list(workloads())
    unknown = [n for n in names if n not in workloads()]
    if unknown:
        ap.error(f"unknown workload(s) {', '.join(unknown)}; known: {', '.join(workloads())}")
    if args.write is not None and not args.write.is_file():
        ap.error(f"{args.write}: no such file")
    predict = not args.no_predict
    if predict and not replay_has_scale():
        print("whatif: the predictions need `replay --scale KIND=FACTOR`, which this replay does not have "
              "(use --no-predict to capture and measure only)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="whatif-") as tmp:
        workdir = args.workdir or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        body = markdown(measure(names, workdir.resolve(), predict))
    if args.write is None:
        print(body, end="")
    else:
        write_section(args.write, body)
        print(f"wrote the whatif section of {args.write}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
