#!/usr/bin/env python
"""The exact peak resident memory and the CPU time of each stage of one ``replay`` process (a script, not a test).

    python benchmarks/speed/stage_peaks.py TRACE [--protocol baseline] [replay options...]

Runs ``replay --protocol P TRACE --json`` in this process, with the stages of :mod:`replay.pipeline.run`
(``load_graph``, ``prepare``, ``schedule``, ``summarize``) wrapped: before each, the kernel's
high-water mark of resident memory is reset (``/proc/self/clear_refs``, value 5), and after it the
mark (``VmHWM``) is read, so each line gives the exact peak of that stage, not a sample, and
the stage's CPU time (user and system, from ``getrusage``: system time is mostly the page faults
of new memory). A
protocol replay runs the stages twice: first for the ``none`` reference, then for the protocol.
Linux only (it says so and exits 2 elsewhere). Prints to stderr; the replay's JSON goes to stdout.
"""

from __future__ import annotations

import resource
import sys
from pathlib import Path

STAGES = ("load_graph", "prepare", "schedule", "summarize")


def _status_mib(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {key} in /proc/self/status")


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _measured(name: str, func):
    def run(*args, **kwargs):
        before = _status_mib("VmRSS")
        _reset_peak()
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        out = func(*args, **kwargs)
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        print(f"{name:>10}: before {before:7,.0f} MiB  peak {_status_mib('VmHWM'):7,.0f} MiB  "
              f"after {_status_mib('VmRSS'):7,.0f} MiB  CPU user {cpu1.ru_utime - cpu0.ru_utime:6.2f} s"
              f"  sys {cpu1.ru_stime - cpu0.ru_stime:6.2f} s", file=sys.stderr)
        return out

    return run


def main(argv: list[str]) -> int:
    if not Path("/proc/self/clear_refs").exists():
        print("stage_peaks.py: needs Linux (/proc/self/clear_refs)", file=sys.stderr)
        return 2
    if not argv or argv[0].startswith("-"):
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    import replay.frontend.cli
    import replay.pipeline.run

    for name in STAGES:
        setattr(replay.pipeline.run, name, _measured(name, getattr(replay.pipeline.run, name)))
    try:
        replay.frontend.cli.main(["--protocol", "baseline", *argv] if "--protocol" not in argv else argv)
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
