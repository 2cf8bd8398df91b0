"""Compiled accelerators of the Python packages (metadata lives in pyproject.toml).

Each entry is a C++17 CPython extension module built by ``pip install``. They are optional: a
machine without a C++ compiler still installs, and the code falls back to its pure-Python/numba
twin, which gives identical results (docs/performance.md, "Compiled core").
"""

from pathlib import Path

from setuptools import Extension, find_packages, setup

CXX_FLAGS = ["-std=c++17", "-O2"]

# (module name, sources, include directories)
ACCELERATORS: list[tuple[str, list[str], list[str]]] = [
    # the scheduler and the critical-path walk (replay/pipeline/engine.py, replay/pipeline/results.py); the headers
    # under replay/cpp/fastrack are the same core the gem5 driver compiles (MANIFEST.in ships them);
    # every module below takes its numpy arrays through replay/cpp/fastrack/pybuffer.hh
    ("replay.pipeline._engine", ["replay/cpp/engine_module.cpp"], ["replay/cpp"]),
    ("tracegen.importers._jsonscan", ["tracegen/importers/src/jsonscan.cpp"], []),  # JSON guard scan (jsondepth.py)
    # the whole-file Kineto parse and event loop in one pass (kinetoscan.py; json + kineto._collect fallback)
    ("tracegen.importers._kineto", ["tracegen/importers/src/kinetoscan.cpp"], []),
    ("replay.pipeline._build", ["replay/cpp/build_module.cpp"], ["replay/cpp"]),  # graph builder's edge passes (replay/pipeline/build.py)
    # GraphEditor.build's edge merge (replay/protocols/editor.py; numpy fallback)
    ("replay.protocols._edit", ["replay/cpp/edit_module.cpp"], ["replay/cpp"]),
]

# Packages are found, not listed (a new folder with an __init__.py ships without an edit here):
# the project's own roots, plus the H100 plug-in, whose import name fastrack_h100 maps to the
# folder models/h100 (pyproject.toml, [tool.setuptools.package-dir]).
PACKAGES = find_packages(include=[f"{root}{sub}" for root in ("fastrack", "fastrack_core", "tracegen", "replay")
                                  for sub in ("", ".*")])
PACKAGES += ["fastrack_h100"] + [f"fastrack_h100.{sub}" for sub in find_packages(where="models/h100")]


def _headers(includes: list[str]) -> list[str]:
    """The headers under a module's include directories: a change to one rebuilds the module (the
    core's array types are part of every module's interface)."""
    return sorted(str(h) for d in includes for h in Path(d).rglob("*.hh"))


setup(packages=PACKAGES, ext_modules=[Extension(name, sources, include_dirs=includes, extra_compile_args=CXX_FLAGS, language="c++",
                                                depends=_headers(includes), optional=True)
                                      for name, sources, includes in ACCELERATORS])
