"""The serving trends of docs/serving.md (benchmarks/validation/validate_serving.py): the generated
block is what the script prints at this commit, and its options refuse bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
from scriptload import load_script

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "serving.md"


def _module():
    return load_script("benchmarks/validation/validate_serving.py")


def _doc_sections(mod) -> dict[int, str]:
    """The generated block of docs/serving.md (between the markers), by section."""
    from fastrack_core.docsection import read_section

    block = read_section(DOC, mod.BEGIN, mod.END)
    assert block.startswith(mod.BEGIN + "\n") and block.endswith(mod.END)
    return mod.split_sections(block[len(mod.BEGIN) + 1:-len(mod.END)])


def test_sections_option_refuses_bad_lists_and_a_partial_write(tmp_path, capsys):
    mod = _module()
    doc = tmp_path / "doc.md"
    doc.write_text(f"a\n{mod.BEGIN}\nold\n{mod.END}\nb\n")
    for bad in (str(max(mod.SECTIONS) + 1), "x", "", "1,0"):
        assert mod.main(["--sections", bad]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--sections" in err[0]
    assert mod.main(["--sections", "2", "--write", str(doc)]) == 2  # the block holds every section
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "doc.md" in err[0] and "nothing written" in err[0]
    assert doc.read_text() == f"a\n{mod.BEGIN}\nold\n{mod.END}\nb\n"


def test_split_sections_keeps_every_line():
    mod = _module()
    text = "head\n\n### 1. one\n\nx\n### 2. two\ny\n### 10. ten\nz\n"
    parts = mod.split_sections(text)
    assert sorted(parts) == [0, 1, 2, 10]
    assert parts[0] == "head\n\n" and parts[2] == "### 2. two\ny\n" and parts[10] == "### 10. ten\nz\n"
    assert "".join(parts[k] for k in sorted(parts)) == text


def test_doc_block_has_every_section_once():
    mod = _module()
    parts = _doc_sections(mod)
    assert sorted(parts) == [0, *mod.SECTIONS]
    assert "--quick" not in parts[0]


@pytest.mark.slow
def test_docs_serving_trends_are_current(tmp_path):
    """Every section of the generated block (the heading, 1 SGLang's loss by concurrency, 2 vLLM's
    decode mechanisms, 3 offloading, 4 Blackwell, 5 multi-step scheduling) regenerated from
    captures made here, from scratch, as `validate_serving.py --write docs/serving.md` makes them:
    each equals its text in docs/serving.md."""
    mod = _module()
    doc = _doc_sections(mod)
    got = mod.split_sections(mod.section(tmp_path, quick=False, jobs=2, sections=mod.SECTIONS))
    assert sorted(got) == [0, *mod.SECTIONS]
    stale = [k for k, text in got.items() if doc[k].rstrip("\n") != text.rstrip("\n")]
    assert not stale, f"sections {stale} of docs/serving.md are stale: regenerate with --write"
