"""Regenerate the shipped traces from exactly the commands documented in traces/README.md.

    python benchmarks/tools/regen_traces.py OUTDIR [--check] [--only NAME ...] [--overwrite]

The commands are read from the first fenced code block of ``traces/README.md`` (the one place
they are written down): every line that starts with ``tracegen capture``. Each runs from the
repository root, unchanged except that its ``-o traces/NAME.parquet`` becomes ``-o OUTDIR/NAME.parquet``
(and ``tracegen`` is run by this Python interpreter). Existing files in OUTDIR are refused by
``tracegen capture`` unless ``--overwrite`` is given; OUTDIR must not be ``traces/`` itself.

``--check`` then compares each regenerated trace with the shipped one: the number of ops and the
number of ops of each kind, then (when those agree) every column of every op (captures are
deterministic: the same command writes the same ops). It prints one line per trace and a line per
differing kind or column, and exits with status 1 when any trace differs (0 when all match).
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # benchmarks/<kind>/ -> the repository root
SHIPPED = ROOT / "traces"
README = SHIPPED / "README.md"


def documented_commands(readme: Path = README) -> dict[str, list[str]]:
    """``{trace file name: argv}`` of the ``tracegen capture`` lines of the first fenced block."""
    blocks = re.findall(r"^```[^\n]*\n(.*?)^```", readme.read_text(), flags=re.S | re.M)
    if not blocks:
        raise SystemExit(f"{readme}: no fenced code block with the capture commands")
    out: dict[str, list[str]] = {}
    for line in blocks[0].splitlines():
        argv = shlex.split(line)
        if argv[:2] != ["tracegen", "capture"]:
            continue
        if "-o" not in argv:
            raise SystemExit(f"{readme}: a capture command without -o: {line}")
        target = Path(argv[argv.index("-o") + 1])
        if target.parent != Path("traces"):
            raise SystemExit(f"{readme}: a capture command that does not write into traces/: {line}")
        out[target.name] = argv
    if not out:
        raise SystemExit(f"{readme}: no `tracegen capture` command in the first code block")
    return out


def regenerate(name: str, argv: list[str], outdir: Path, overwrite: bool) -> Path | None:
    """Run one documented command with its output moved into ``outdir``; None when it fails."""
    argv = list(argv)
    out = outdir / name
    argv[argv.index("-o") + 1] = str(out)
    if overwrite:
        argv.insert(2, "--overwrite")
    cmd = [sys.executable, "-m", "tracegen.cli", *argv[1:]]
    print("$ " + shlex.join(["tracegen", *cmd[3:]]), flush=True)
    rc = subprocess.run(cmd, cwd=ROOT).returncode
    if rc != 0:
        print(f"{name}: the documented command failed (exit status {rc})", flush=True)
        return None
    return out


def kind_counts(path: Path) -> Counter:
    import pyarrow.parquet as pq

    kinds = pq.read_table(path, columns=["kind"]).column("kind").to_pylist()
    return Counter(str(k) for k in kinds)


def compare(name: str, regenerated: Path | None) -> bool:
    """Print how ``regenerated`` differs from the shipped trace; True when they match."""
    if regenerated is None:
        print(f"{name}: not regenerated (the command failed) -> MISMATCH")
        return False
    shipped, got = kind_counts(SHIPPED / name), kind_counts(regenerated)
    n_ship, n_got = sum(shipped.values()), sum(got.values())
    same = shipped == got
    diff = n_got - n_ship
    print(f"{name}: shipped {n_ship} ops, regenerated {n_got} ({diff:+d}, {diff / n_ship:+.1%})"
          f" -> {'match' if same else 'MISMATCH'}")
    for kind in sorted(set(shipped) | set(got)):
        if shipped[kind] != got[kind]:
            print(f"    {kind}: shipped {shipped[kind]}, regenerated {got[kind]} ({got[kind] - shipped[kind]:+d})")
    if same:
        columns = differing_columns(SHIPPED / name, regenerated)
        for col, n in columns.items():
            print(f"    column {col}: {n} op(s) differ")
        same = not columns
        if not same:
            print(f"{name}: same op counts, different op contents -> MISMATCH")
    return same


def differing_columns(a: Path, b: Path) -> dict[str, int]:
    """``{column: number of rows that differ}`` between two traces with the same number of ops."""
    import pyarrow.parquet as pq

    ta, tb = pq.read_table(a), pq.read_table(b)
    out = {}
    for col in sorted(set(ta.schema.names) | set(tb.schema.names)):
        if col not in ta.schema.names or col not in tb.schema.names:
            out[col] = ta.num_rows
            continue
        va, vb = ta.column(col).to_pylist(), tb.column(col).to_pylist()
        n = sum(x != y for x, y in zip(va, vb))
        if n:
            out[col] = n
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", type=Path, help="folder to write the regenerated traces into")
    ap.add_argument("--check", action="store_true", help="compare op counts per kind with the shipped traces")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="trace file names to regenerate [all]")
    ap.add_argument("--overwrite", action="store_true", help="replace existing files in OUTDIR")
    args = ap.parse_args(argv)
    outdir = args.outdir.resolve()
    if outdir == SHIPPED.resolve():
        ap.error("OUTDIR is traces/ itself: regenerate elsewhere and compare (--check), then copy deliberately")
    commands = documented_commands()
    names = args.only or list(commands)
    unknown = [n for n in names if n not in commands]
    if unknown:
        ap.error(f"not documented in {README.relative_to(ROOT)}: {', '.join(unknown)}")
    outdir.mkdir(parents=True, exist_ok=True)
    outputs = {name: regenerate(name, commands[name], outdir, args.overwrite) for name in names}
    if not args.check:
        return 0 if all(p is not None for p in outputs.values()) else 1
    print()
    results = [compare(name, path) for name, path in outputs.items()]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
