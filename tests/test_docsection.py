"""fastrack_core.docsection: the one writer of generated doc sections (benchmarks/*.py --write)."""

import pytest

from fastrack_core.docsection import between, check_section, emit_section, read_section, replace_section
from fastrack_core.errors import FastrackError

B, E = "<!-- x:begin -->", "<!-- x:end -->"


def test_replaces_only_the_marked_block(tmp_path):
    p = tmp_path / "doc.md"
    p.write_text(f"head\n{B}\nold\nlines\n{E}\ntail\n")
    replace_section(p, B, E, between(B, "new\n", E))
    assert p.read_text() == f"head\n{B}\nnew\n{E}\ntail\n"
    assert read_section(p, B, E) == f"{B}\nnew\n{E}"
    assert list(tmp_path.iterdir()) == [p]  # no temporary left behind


@pytest.mark.parametrize("text", ["no markers\n", f"{B}\n{B}\n{E}\n", f"{E}\n{B}\n", f"{B}\nonly begin\n"])
def test_refuses_a_file_without_one_ordered_pair_and_leaves_it(tmp_path, text):
    p = tmp_path / "doc.md"
    p.write_text(text)
    with pytest.raises(FastrackError, match="nothing written"):
        replace_section(p, B, E, between(B, "new\n", E))
    with pytest.raises(FastrackError, match="doc.md"):
        check_section(p, B, E)
    assert p.read_text() == text


def test_missing_file_and_bad_block(tmp_path):
    with pytest.raises(FastrackError, match="no such file"):
        check_section(tmp_path / "missing.md", B, E)
    p = tmp_path / "doc.md"
    p.write_text(f"{B}\n{E}\n")
    with pytest.raises(ValueError):
        replace_section(p, B, E, "no markers")
    assert p.read_text() == f"{B}\n{E}\n"


def test_emit_section_prints_or_writes_and_checks_before_the_work(tmp_path, capsys):
    made = []

    def make():
        made.append(1)
        return "body\n"

    emit_section(None, B, E, make)
    assert capsys.readouterr().out == "body\n"
    p = tmp_path / "doc.md"
    p.write_text(f"a\n{B}\nold\n{E}\nb\n")
    emit_section(p, B, E, make)
    assert p.read_text() == f"a\n{B}\nbody\n{E}\nb\n"
    q = tmp_path / "plain.md"
    q.write_text("no markers\n")
    with pytest.raises(FastrackError, match="plain.md"):
        emit_section(q, B, E, make)
    assert len(made) == 2 and q.read_text() == "no markers\n"  # refused before make() ran
