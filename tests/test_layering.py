"""The import contract (docs/architecture.md, "Layering"), checked on the source text.

Every ``import`` statement counts, including the ones inside functions (lazy imports are still
dependencies). The rules:

* ``fastrack`` (the shared core) imports nothing of ours, except its top layer ``fastrack.api``
  (the Python API, docs/api.md), which may import ``replay`` and ``tracegen`` but no model
  package; nothing of ours imports ``fastrack.api`` (``fastrack/__init__.py`` loads it lazily);
* ``tracegen`` and ``replay`` never import each other;
* ``replay`` never imports a hardware-model package: models arrive through the
  ``fastrack.models`` entry point;
* protocol transforms (``replay.protocols``, ``replay.dataparallel``) are pure graph functions:
  they never import the runner, the command lines or the study machinery;
* a hardware-model package imports the model interface, never the front ends.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODEL_DIR = ROOT / "models"
OUR_TOP_LEVEL = {"fastrack", "tracegen", "replay"}
API = "fastrack.api"  # the top layer: the only module of fastrack/ that may import replay and tracegen
FRONT_ENDS = ("replay.cli", "replay.compare", "replay.run", "replay.study", "replay.options", "tracegen.cli")


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
    rel = path.relative_to(ROOT).with_suffix("")
    parts = list(rel.parts)
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


def _sources(package: str) -> list[Path]:
    base = ROOT / package
    return sorted(p for p in base.rglob("*.py") if "__pycache__" not in p.parts)


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


def test_the_contract_sees_imports():
    """The checker itself: it finds absolute, relative and function-level imports."""
    names = _imports(ROOT / "replay" / "cli.py")
    assert "click" in names
    assert any(n.startswith("fastrack") for n in names)
    lazy = [n for n in _imports(ROOT / "replay" / "run.py") if n.startswith("replay.")]
    assert lazy, "run.py imports replay modules"


def _core_sources() -> list[Path]:
    return [p for p in _sources("fastrack") if _module_name(p) != API]


def test_fastrack_core_imports_nothing_of_ours():
    files = _core_sources()
    assert ROOT / "fastrack" / "api.py" not in files and ROOT / "fastrack" / "schema.py" in files
    bad = _violations(files, lambda n: _top(n) in (OUR_TOP_LEVEL - {"fastrack"}) | MODEL_PACKAGES)
    assert not bad, "\n".join(bad)


def test_the_api_imports_no_model_package():
    bad = _violations([ROOT / "fastrack" / "api.py"], lambda n: _top(n) in MODEL_PACKAGES)
    assert not bad, "\n".join(bad)
    assert any(_top(n) == "replay" for n in _imports(ROOT / "fastrack" / "api.py"))  # the checker sees it


def test_nothing_of_ours_imports_the_api():
    """Only ``fastrack/__init__.py`` names it (lazily, by string); replay, tracegen, the other core
    modules and the model plug-ins never import it."""
    files = _core_sources() + _sources("replay") + _sources("tracegen") + sorted(MODEL_DIR.rglob("*.py"))
    bad = _violations(files, lambda n: _under(n, (API,)))
    assert not bad, "\n".join(bad)


def test_tracegen_never_imports_replay_or_models():
    bad = _violations(_sources("tracegen"), lambda n: _top(n) in {"replay"} | MODEL_PACKAGES)
    assert not bad, "\n".join(bad)


def test_replay_never_imports_tracegen_or_a_model_package():
    bad = _violations(_sources("replay"), lambda n: _top(n) in {"tracegen"} | MODEL_PACKAGES)
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("package", ["replay/protocols", "replay/dataparallel.py"])
def test_transforms_never_import_runner_cli_or_study(package):
    path = ROOT / package
    files = [path] if path.is_file() else sorted(path.rglob("*.py"))
    bad = _violations(files, lambda n: _under(n, FRONT_ENDS))
    assert not bad, "\n".join(bad)


def test_model_plugins_never_import_front_ends_or_tracegen():
    files = sorted(p for p in MODEL_DIR.rglob("*.py") if "__pycache__" not in p.parts)
    assert files, "no model plug-in sources found"
    bad = _violations(files, lambda n: _under(n, FRONT_ENDS) or _top(n) == "tracegen")
    assert not bad, "\n".join(bad)
