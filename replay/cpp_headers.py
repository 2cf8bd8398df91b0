"""Where the replay core's C++ headers are: the include directory for code that builds on them.

The replay core (the graph format reader, the scheduler, the results: ``fastrack/graph.hh``,
``fastrack/engine.hh``, ``fastrack/results.hh``, ``fastrack/view.hh``) is header-only and ships
inside this package (``replay/cpp/fastrack/*.hh``, package data). A hardware model's C++ (the
H100 plug-in's driver and gem5 extension, docs/gem5.md) includes it as ``"fastrack/graph.hh"``
with this directory on its include path, so it builds from an installed package as well as
from a checkout::

    python -m replay.cpp_headers          # prints the directory, e.g. for -I$(...)

Nothing here imports the rest of ``replay``.
"""

from __future__ import annotations

import sys
from pathlib import Path

# the headers every build on the core needs (fastrack/pybuffer.hh is the Python extensions' own)
CORE_HEADERS = ("graph.hh", "engine.hh", "results.hh", "view.hh")


def include_dir() -> Path:
    """The directory to put on the include path (``-I``): it holds ``fastrack/graph.hh`` and the
    other core headers. Raises FileNotFoundError when the installed package lacks them."""
    here = Path(__file__).resolve().parent / "cpp"
    missing = [name for name in CORE_HEADERS if not (here / "fastrack" / name).is_file()]
    if missing:
        raise FileNotFoundError(f"the replay core headers {', '.join(missing)} are not in {here / 'fastrack'} "
                                "(an installation without the package data?)")
    return here


def main() -> int:
    try:
        print(include_dir())
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
