"""docs/extending.md runs as written: its blocks, in order, in an empty folder.

* a ``python`` block whose first line names a file of the example package (``# fastrack_mine/x.py``)
  is written to a temporary site folder put on ``sys.path``;
* a ``toml`` block whose first line is ``# pyproject.toml`` is installed as ``pip install`` would
  install it: its ``[project]`` name and version and its entry-point tables become the
  ``*.dist-info`` metadata (``METADATA``, ``entry_points.txt``) of that site folder, which
  ``importlib.metadata`` reads like any installed distribution's; the registries' caches are then
  cleared (each process scans them once);
* a block naming a file of this repository is applied, for this test only, to what reads it: a
  preset ``models/<model>/presets/x.toml`` is written into a copy of that model's presets folder,
  which the model is pointed at; a Python module's block runs in a copy of the module's
  namespace and the names it binds are set on the module;
* every other ``python`` block runs as it stands (one namespace, the blocks in order), and every
  ``$`` line of a ``console`` block runs as a ``tracegen`` or ``replay`` command and must succeed.

Everything is undone at the end (``sys.path``, the patched modules, the registries' caches), so
the example's plug-ins are not seen by the rest of the test session."""

from __future__ import annotations

import importlib
import re
import shlex
import shutil
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "extending.md"
FENCE = re.compile(r"^```(python|toml|console)\n(.*?)^```", re.S | re.M)
FILE_LINE = re.compile(r"#\s*([\w./-]+\.(?:py|toml))\b")
PACKAGE = "fastrack_mine"


def blocks() -> list[tuple[str, str | None, str]]:
    """(language, file named on the first line or None, code) of every block, in order."""
    out = []
    for lang, code in FENCE.findall(DOC.read_text(encoding="utf-8")):
        m = FILE_LINE.match(code.splitlines()[0]) if code.strip() and lang != "console" else None
        out.append((lang, m.group(1) if m else None, code))
    return out


def _clear_registries() -> None:
    import replay.plugins
    import tracegen.importers

    replay.plugins._entries.cache_clear()
    tracegen.importers._entry_points.cache_clear()
    if "tracegen.convert" in sys.modules:  # its --format choices and help are read from the registry at import
        importlib.reload(sys.modules["tracegen.convert"])


class Install:
    """The example package's site folder and its distribution metadata."""

    def __init__(self, site: Path):
        self.site = site
        self.project: dict = {}
        self.entry_points: dict[str, dict[str, str]] = {}

    def add_pyproject(self, text: str) -> None:
        data = tomllib.loads(text)
        project = data.get("project", {})
        self.project.update({k: v for k, v in project.items() if k in ("name", "version")})
        for group, entries in project.get("entry-points", {}).items():
            self.entry_points.setdefault(group, {}).update(entries)
        name = self.project["name"].replace("-", "_")
        info = self.site / f"{name}-{self.project['version']}.dist-info"
        info.mkdir(exist_ok=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {self.project['name']}\n"
                                       f"Version: {self.project['version']}\n")
        (info / "entry_points.txt").write_text("".join(
            f"[{group}]\n" + "".join(f"{n} = {v}\n" for n, v in entries.items()) + "\n"
            for group, entries in self.entry_points.items()))
        _clear_registries()


def _apply_repository_file(rel: str, code: str, tmp: Path, monkeypatch) -> None:
    """A block that adds to a file of this repository, applied to what reads that file."""
    path = ROOT / rel
    if path.suffix == ".toml" and path.parent.name == "presets":
        from replay.plugins import available_models, load_model

        model = next((load_model(m) for m in available_models()
                      if Path(load_model(m).presets_dir).resolve() == path.parent.resolve()), None)
        assert model is not None, f"{rel}: no installed model has its presets in {path.parent}"
        copy = tmp / "presets" / model.name
        if not copy.exists():
            from fastrack_core import machine

            shutil.copytree(model.presets_dir, copy)
            monkeypatch.setattr(model, "presets_dir", copy)
            folders = tuple((n, copy if d.resolve() == path.parent.resolve() else d) for n, d in machine.preset_folders())
            monkeypatch.setattr(machine, "preset_folders", lambda: folders)  # the capture's half reads it too
        (copy / path.name).write_text(code, encoding="utf-8")
        return
    assert path.suffix == ".py" and path.is_file(), f"{rel}: not a module of this repository"
    module = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
    ns = dict(vars(module))
    exec(compile(code, str(DOC), "exec"), ns)  # noqa: S102 - the documented addition itself
    for name, value in ns.items():
        if name != "__builtins__" and (name not in vars(module) or vars(module)[name] is not value):
            monkeypatch.setattr(module, name, value, raising=False)


def _run_console(code: str) -> None:
    from replay.frontend.cli import main as replay_main
    from tracegen.cli import main as tracegen_main

    mains = {"tracegen": tracegen_main, "replay": replay_main}
    for line in code.splitlines():
        if not line.startswith("$ "):
            continue
        prog, *args = shlex.split(line[2:])
        assert prog in mains, f"docs/extending.md runs only tracegen and replay commands, not {prog!r}"
        res = CliRunner().invoke(mains[prog], args)
        assert res.exit_code == 0, f"{line}\n{res.output}"


@pytest.fixture
def sandbox(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.chdir(work)
    yield tmp_path, Install(site)
    monkeypatch.undo()
    for name in [m for m in sys.modules if m == PACKAGE or m.startswith(PACKAGE + ".")]:
        del sys.modules[name]
    importlib.invalidate_caches()
    _clear_registries()


def test_the_page_has_every_kind_of_example():
    files = [f for _, f, _ in blocks() if f]
    for part in ("protocols.py", "importers.py", "exporters.py"):
        assert f"{PACKAGE}/{part}" in files, part
    presets = [code for _, f, code in blocks() if f and f.startswith("models/") and f.endswith(".toml")]
    assert presets  # a preset: one file for both halves (docs/machine.md)
    from fastrack_core.machine import COMPUTE_TABLES

    assert any(f"[{t}]" in code for code in presets for t in COMPUTE_TABLES)  # it shows the compute half
    groups = set()
    for _lang, f, code in blocks():
        if f == "pyproject.toml":
            groups |= set(tomllib.loads(code).get("project", {}).get("entry-points", {}))
    assert groups == {"fastrack.protocols", "fastrack.importers", "fastrack.exporters"}


def test_the_worked_examples_run(sandbox, monkeypatch):
    tmp, install = sandbox
    ns: dict = {"__name__": "extending_example"}
    for lang, rel, code in blocks():
        if lang == "console":
            _run_console(code)
        elif rel == "pyproject.toml":
            install.add_pyproject(code)
        elif rel is not None and rel.split("/", 1)[0] == PACKAGE:
            target = install.site / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(code, encoding="utf-8")
            importlib.invalidate_caches()
        elif rel is not None:
            _apply_repository_file(rel, code, tmp, monkeypatch)
        else:
            assert lang == "python", code
            exec(compile(code, str(DOC), "exec"), ns)  # noqa: S102 - the documented example itself
    # the plug-ins were found through the installed metadata, like any other distribution's
    from importlib.metadata import distribution

    assert {ep.name for ep in distribution("fastrack-mine").entry_points} == {"copy-tax", "mine-log", "csv"}
