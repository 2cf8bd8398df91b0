#!/usr/bin/env python
"""Regenerate the example figures of docs/studies.md (besides the worked study's, made by
benchmarks/docs/study_example.py):

    python benchmarks/docs/doc_figures.py

* docs/img/compare_example.png: ``replay compare traces/resnet.parquet --protocols
  baseline,fastrack,fastrack:direct,ppcie --plot ...``;
* docs/img/dataparallel_example.png: ``replay compare traces/llama.parquet --protocols
  baseline,fastrack,cc-multi --data-parallel 4 --plot ...``;
* docs/img/tornado_example.png: ``replay sensitivity traces/resnet.parquet --protocol baseline
  --top 12 --plot ...``.
"""

from __future__ import annotations

import sys
from pathlib import Path

from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]  # benchmarks/<kind>/ -> the repository root
IMG = ROOT / "docs" / "img"
RUNS = [
    ["compare", "traces/resnet.parquet", "--protocols", "baseline,fastrack,fastrack:direct,ppcie",
     "--plot", "docs/img/compare_example.png"],
    ["compare", "traces/llama.parquet", "--protocols", "baseline,fastrack,cc-multi", "--data-parallel", "4",
     "--plot", "docs/img/dataparallel_example.png"],
    ["sensitivity", "traces/resnet.parquet", "--protocol", "baseline", "--top", "12", "--no-progress",
     "--plot", "docs/img/tornado_example.png"],
]


def main() -> None:
    import os

    from replay.frontend.cli import main as replay_main

    os.chdir(ROOT)
    for args in RUNS:
        print("replay " + " ".join(args), file=sys.stderr)
        r = CliRunner().invoke(replay_main, [*args, "--overwrite"], catch_exceptions=False)  # (the checkout ships them)
        print(r.output)
        if r.exit_code:
            sys.exit(r.exit_code)


if __name__ == "__main__":
    main()
