"""House rule (docs/architecture.md, "House rules"): the repository's own issue numbers mean nothing to a reader of
the repository, so docs, code and tests never cite them. A third party's issue or pull request is
a source and is cited with its project (``SGLang PR #15188``, ``vLLM issue #55428``)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SUFFIXES = {".py", ".md", ".toml", ".cpp", ".hh", ".txt", ".cfg"}
SKIP = {".git", ".venv", "build", "dist", "__pycache__", "node_modules"}
# "issue 24", "Issue #27", "issues 22 and 23"; not "issues 3" (a verb), "issue #55428" or "rank 3 issues 2 collectives"
OWN = re.compile(r"\b[Ii]ssue #?\d{1,2}\b|\b[Ii]ssues #?\d{1,2}(?:,| and)")
THIRD_PARTY = re.compile(r"(?i)(sglang|vllm|nvtrust|kvikio|nvbandwidth|pytorch|nccl|numba|ijson|github|hta|"
                         r"tracelens|gem5|llvm|perfetto|arrow|pandas|torch|cutlass|triton)[^.\n]{0,40}$")


def _files():
    for p in ROOT.rglob("*"):
        if p.suffix in SUFFIXES and p.is_file() and not SKIP & set(p.relative_to(ROOT).parts):
            yield p


def test_the_scan_sees_an_own_issue_number():
    assert OWN.search("the range target of issue 24")
    assert OWN.search("(Issue 26: 19.83 ms")
    assert not OWN.search("rank 3 issues 2 collective(s)")
    assert OWN.search("issues 22 and 23")
    assert not OWN.search("vLLM issue #55428")


def test_no_own_issue_numbers_in_docs_code_or_tests():
    found = []
    for path in _files():
        if path == Path(__file__):
            continue
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for m in OWN.finditer(line):
                if not THIRD_PARTY.search(line[:m.start()]):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()[:100]}")
    assert not found, "\n".join(found)
