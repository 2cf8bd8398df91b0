"""The import contract (docs/architecture.md, "The house"), checked on the source text.

Every ``import`` statement counts, including the ones inside functions (lazy imports are still
dependencies), and so does a module named in a string literal of the floor (an import by
string). The rules, with no exception:

* the floor ``fastrack_core`` imports nothing of ours;
* the roof ``fastrack`` (the Python API) may import anything but a model package, and nothing of
  ours imports it;
* ``tracegen`` and ``replay`` never import each other, and ``replay`` never imports a model
  package (models arrive through the ``fastrack.models`` entry point);
* ``replay`` is in wings, ordered from the bottom: the plug-in surface (its top-level modules),
  what-ifs, the pipeline, protocols, exporters, front ends. A wing imports only wings below it;
* a model plug-in imports the floor and ``replay`` below the front ends, never ``tracegen``;
* no circle of files crosses a wing (a circle inside one folder is that folder's business).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parent.parent
MODEL_DIR = ROOT / "models"
FLOOR, ROOF = "fastrack_core", "fastrack"
OURS = {FLOOR, ROOF, "tracegen", "replay"}
# replay's wings, bottom first; "replay" is the plug-in surface (the modules at its top level)
REPLAY_WINGS = ("replay", "replay.whatif", "replay.pipeline", "replay.protocols", "replay.exporters", "replay.serve",
                "replay.frontend")


def _model_packages() -> set[str]:
    """Top-level import names under which model plug-ins may be imported."""
    names = {"models", "fastrack_models"}
    for d in MODEL_DIR.iterdir() if MODEL_DIR.is_dir() else ():
        if d.is_dir() and (d / "__init__.py").exists():
            names.add(d.name)
            names.add(f"fastrack_{d.name}")
    return names


MODEL_PACKAGES = _model_packages()


def _module_name(path: Path) -> str:
    if path.is_relative_to(MODEL_DIR):  # models/h100/x.py is installed as fastrack_h100.x
        rel = path.relative_to(MODEL_DIR).with_suffix("")
        parts = [f"fastrack_{rel.parts[0]}", *rel.parts[1:]]
    else:
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _imports(path: Path) -> list[str]:
    """Absolute names of every module imported by the file (relative imports resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    me = _module_name(path).split(".")
    is_pkg = path.name == "__init__.py"
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = me if is_pkg else me[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            out.append(mod)
            out.extend(f"{mod}.{a.name}" for a in node.names)
    return out


def _named_in_strings(path: Path) -> list[str]:
    """Modules of ours that a string literal of the file names whole ("replay.x" or "replay.x:Y"),
    as an import by string (importlib, an entry point) would."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            m = re.fullmatch(r"((?:[a-z_]\w*)(?:\.[a-z_]\w*)+)(?::\w+)?", node.value)
            if m and _top(m.group(1)) in OURS - {FLOOR}:
                rel = ROOT.joinpath(*m.group(1).split("."))
                if rel.with_suffix(".py").is_file() or (rel / "__init__.py").is_file():
                    out.append(node.value)
    return out


def _sources(package: str) -> list[Path]:
    base = ROOT / package
    return sorted(p for p in base.rglob("*.py") if "__pycache__" not in p.parts)


def _model_sources() -> list[Path]:
    return sorted(p for p in MODEL_DIR.rglob("*.py") if "__pycache__" not in p.parts and "gem5" not in p.parts)


def _violations(files: list[Path], forbidden) -> list[str]:
    bad = []
    for f in files:
        for name in _imports(f):
            if forbidden(name):
                bad.append(f"{f.relative_to(ROOT)} imports {name}")
    return sorted(set(bad))


def _top(name: str) -> str:
    return name.split(".", 1)[0]


def _under(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def _replay_wing(module: str) -> str:
    """The wing of a replay module: its sub-package, or the surface for a top-level module."""
    return next((w for w in reversed(REPLAY_WINGS) if _under(module, (w,)) and w != "replay"), "replay")


def test_the_contract_sees_imports():
    """The checker itself: it finds absolute, relative and function-level imports, and names in
    strings."""
    names = _imports(ROOT / "replay" / "frontend" / "cli.py")
    assert "click" in names and any(n.startswith(FLOOR) for n in names)
    lazy = [n for n in _imports(ROOT / "replay" / "pipeline" / "run.py") if n.startswith("replay.")]
    assert lazy, "run.py imports replay modules"
    assert "fastrack_h100.params" in _imports(MODEL_DIR / "h100" / "model.py")  # relative, resolved
    assert "replay.protocols.notee:NONE" in _named_in_strings(ROOT / "tests" / "test_layering.py")
    assert _replay_wing("replay.graph") == "replay" and _replay_wing("replay.frontend.study.sweep") == "replay.frontend"


def test_every_replay_module_is_in_a_wing():
    """A new folder under replay/ is a new wing only when it is named in REPLAY_WINGS."""
    folders = {p.parent.relative_to(ROOT / "replay").parts[0] for p in _sources("replay")
               if p.parent != ROOT / "replay"}
    assert folders == {w.split(".", 1)[1] for w in REPLAY_WINGS[1:]}, folders


def test_the_floor_imports_nothing_of_ours():
    files = _sources(FLOOR)
    assert ROOT / FLOOR / "schema.py" in files
    bad = _violations(files, lambda n: _top(n) in (OURS - {FLOOR}) | MODEL_PACKAGES)
    bad += [f"{f.relative_to(ROOT)} names {w} in a string" for f in files for w in _named_in_strings(f)]
    assert not bad, "\n".join(bad)


def test_the_roof_imports_no_model_package():
    files = _sources(ROOF)
    bad = _violations(files, lambda n: _top(n) in MODEL_PACKAGES)
    assert not bad, "\n".join(bad)
    assert any(_top(n) == "replay" for f in files for n in _imports(f))  # the checker sees it


def test_nothing_of_ours_imports_the_roof():
    files = _sources(FLOOR) + _sources("replay") + _sources("tracegen") + _model_sources()
    bad = _violations(files, lambda n: _top(n) == ROOF)
    assert not bad, "\n".join(bad)


def test_tracegen_never_imports_replay_or_models():
    bad = _violations(_sources("tracegen"), lambda n: _top(n) in {"replay"} | MODEL_PACKAGES)
    assert not bad, "\n".join(bad)


def test_replay_never_imports_tracegen_or_a_model_package():
    bad = _violations(_sources("replay"), lambda n: _top(n) in {"tracegen"} | MODEL_PACKAGES)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("wing", REPLAY_WINGS)
def test_a_wing_imports_only_wings_below_it(wing):
    below = set(REPLAY_WINGS[: REPLAY_WINGS.index(wing) + 1])
    files = [p for p in _sources("replay") if _replay_wing(_module_name(p)) == wing]
    assert files, wing
    bad = _violations(files, lambda n: _top(n) == "replay" and n != "replay" and _replay_wing(n) not in below)
    assert not bad, "\n".join(bad)


def test_model_plugins_never_import_front_ends_or_tracegen():
    files = _model_sources()
    assert files, "no model plug-in sources found"
    bad = _violations(files, lambda n: _under(n, ("replay.frontend", "tracegen", ROOF)))
    assert not bad, "\n".join(bad)


def test_no_circle_of_files_crosses_a_wing():
    files = _sources(FLOOR) + _sources(ROOF) + _sources("replay") + _sources("tracegen") + _model_sources()
    modules = {_module_name(p): p for p in files}

    def resolve(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph = nx.DiGraph()
    for mod, path in modules.items():
        graph.add_node(mod)
        for name in _imports(path):
            target = resolve(name)
            if target and target != mod:
                graph.add_edge(mod, target)

    def wing(mod: str) -> str:
        if _top(mod) == "replay":
            return _replay_wing(mod)
        if modules[mod].name == "__init__.py":  # a package is in its own folder
            return mod
        return mod.rpartition(".")[0] if "." in mod else mod  # tracegen.importers.x -> tracegen.importers

    crossing = [sorted(c) for c in nx.strongly_connected_components(graph)
                if len(c) > 1 and len({wing(m) for m in c}) > 1]
    assert not crossing, crossing
