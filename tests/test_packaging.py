"""What ``pip install .`` (not editable) ships: every package folder of the checkout, and the data
files the installed tools read (presets, the C++ headers the gem5 extension builds from).

CI installs editable, so only these tests can see a package folder that the wheel leaves out.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ROOTS = ("fastrack", "fastrack_core", "tracegen", "replay")
PLUGIN = ("fastrack_h100", ROOT / "models" / "h100")  # import name, folder (pyproject.toml package-dir)


def _package_folders() -> set[str]:
    """Import names of every folder of the checkout that is a Python package."""
    names = set()
    for root in ROOTS:
        for init in (ROOT / root).rglob("__init__.py"):
            names.add(".".join(init.parent.relative_to(ROOT).parts))
    name, folder = PLUGIN
    for init in folder.rglob("__init__.py"):
        names.add(".".join((name, *init.parent.relative_to(folder).parts)))
    return names


def _setup_packages() -> list[str]:
    code = "import sys; sys.argv = ['setup.py', '--name']\n" \
           "import setuptools; setuptools.setup = lambda **kw: print(repr(kw['packages']))\n" \
           "exec(open('setup.py').read())"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    return eval(out.strip().splitlines()[-1])  # a list literal printed by this test's own stub


def test_setup_finds_every_package_folder():
    """setup.py lists no package by hand: it finds them, and finds them all."""
    assert set(_setup_packages()) == _package_folders()


@pytest.mark.slow
def test_the_wheel_holds_every_package_folder_and_its_data(tmp_path):
    """Build the wheel from the tracked files alone (a copy of ``git ls-files``) and look inside."""
    src = tmp_path / "src"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for rel in filter(None, files.decode().split("\0")):
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            (src / rel).write_bytes((ROOT / rel).read_bytes())
    out = tmp_path / "wheel"
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out)], check=True, capture_output=True)
    (wheel,) = out.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(p for p in _package_folders() if f"{p.replace('.', '/')}/__init__.py" not in names)
    assert not missing, f"package folders not in the wheel: {missing}"
    for data in ("fastrack_h100/presets/h100-sxm.toml", "fastrack_h100/gem5/SConscript", "fastrack_h100/gem5/run_gem5.py",
                 "replay/cpp/fastrack/graph.hh", "replay/exporters/timeline/layout.py"):
        assert data in names, data
