"""Compiled accelerators of the Python packages (metadata lives in pyproject.toml).

Each entry is a C++17 CPython extension module built by ``pip install``. They are optional: a
machine without a C++ compiler still installs, and the code falls back to its pure-Python/numba
twin, which gives identical results (docs/performance.md, "Compiled core").
"""

from setuptools import Extension, setup

CXX_FLAGS = ["-std=c++17", "-O2"]

# (module name, sources, include directories)
ACCELERATORS: list[tuple[str, list[str], list[str]]] = [
    # GraphEditor.build's edge merge (replay/protocols/editor.py; numpy fallback)
    ("replay.protocols._edit", ["replay/protocols/_edit.cpp"], []),
]

setup(ext_modules=[Extension(name, sources, include_dirs=includes, extra_compile_args=CXX_FLAGS, language="c++",
                             optional=True) for name, sources, includes in ACCELERATORS])
