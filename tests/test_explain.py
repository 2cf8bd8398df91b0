"""``replay explain`` (replay/frontend/explain.py) and the plain-words lines of ``replay run``."""

from __future__ import annotations

import base64
import json
import shutil
import xml.etree.ElementTree as ET

import pytest
from click.testing import CliRunner

from replay.frontend.cli import main
from replay.frontend.explain import CC_PROTOCOL, default_protocols, explain, gpu_note, ms
from tracegen.cli import main as tracegen_main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    p = tmp_path_factory.mktemp("explain") / "r.parquet"
    r = CliRunner().invoke(tracegen_main, ["synth", "random", "--ops", "300", "--seed", "3", "-o", str(p)])
    assert r.exit_code == 0, r.output
    return p


@pytest.fixture(scope="module")
def result(trace):
    return explain(str(trace), jobs=1)


def test_mechanisms_and_path_shift_add_up_to_the_overhead(result):
    on_path = sum(m["on_path_ns"] for m in result["mechanisms"]) + sum(p["on_path_ns"] for p in result["path_shifts"])
    assert on_path == result["overhead_ns"] == result["cc_makespan_ns"] - result["none_makespan_ns"]
    assert result["overhead_ns"] > 0
    for m in result["mechanisms"]:
        assert m["off_path_ns"] == max(0, m["work_added_ns"] - m["on_path_ns"])
        assert m["on_path_share"] == pytest.approx(m["on_path_ns"] / result["none_makespan_ns"], abs=1e-6)
    # a protocol adds no GPU compute work: only the path moves onto or off the GPU
    assert next(p for p in result["path_shifts"] if p["side"] == "compute")["work_added_ns"] == 0


def test_savings_match_separate_replays(trace, result):
    from replay.frontend.compare import compare

    names = [r["protocol"] for r in result["protocols"]]
    cmp = {r["protocol"]: r["makespan_ns"] for r in compare(str(trace), names)["rows"]}
    for r in result["protocols"]:
        assert r["saves_ns"] == cmp[CC_PROTOCOL] - cmp[r["protocol"]], r["protocol"]
    assert result["protocols"][0]["protocol"] == CC_PROTOCOL and result["protocols"][0]["saves_ns"] == 0


def test_protocols_come_from_the_registry_without_aliases():
    from replay.plugins import available_protocols

    got = default_protocols()
    assert "fastrack" in got and all(p in got for p in available_protocols() if p.startswith("fastrack:"))
    assert not {"none", CC_PROTOCOL, "captured"} & set(got)
    assert not [p for p in got if p.startswith("cc-multi")]  # aliases of baseline/fastrack with options
    if "tee-io" in available_protocols():
        assert "tee-io" in got


def test_assumptions_are_the_unmeasured_parameters_and_move_the_overhead(result):
    a = result["assumptions"]
    assert a["parameters"] and all("assumption" in p["source"].lower() or p["range"] is not None
                                   for p in a["parameters"])
    kernel = next(p for p in a["parameters"] if p["parameter"] == "submit.kernel_ns")
    ran = sorted((r["value"], r["overhead_ns"]) for r in kernel["points"] if "overhead_ns" in r)
    assert len(ran) == 2 and ran[0][0] < kernel["value"] < ran[1][0]  # the range's ends, or x0.5 and x2
    # a dearer CC submission makes the CC overhead larger, a cheaper one smaller
    assert ran[0][1] < a["overhead_ns"] < ran[1][1]
    if kernel["range"] is not None:
        assert [v for v, _ in ran] == [float(x) for x in kernel["range"]]
    swings = [p["swing_ns"] for p in a["parameters"] if p["swing_ns"] is not None]
    assert swings == sorted(swings, reverse=True)


def test_setup_share_and_plain_words(result):
    s = result["setup"]
    assert s["setup_ns"] is not None and 0 <= s["share"] <= 1 and isinstance(s["dominates"], bool)
    text = " ".join(result["summary"])
    assert text.startswith(f"CC as shipped ('{CC_PROTOCOL}') makes this workload")
    assert "The answer rests most on" in text


def test_cli_text_json_and_html_report(tmp_path, trace):
    out = tmp_path / "report.html"
    r = CliRunner().invoke(main, ["explain", str(trace), "-j", "1", "--protocols", "fastrack,fastrack:overlap",
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    for head in ("What CC adds, by mechanism", "What each protocol saves", "What the answer rests on",
                 "One-time setup", "In plain words:"):
        assert head in r.output, head
    root = ET.fromstring(out.read_text())  # strict: the page is well-formed XML (polyglot HTML5)
    assert root.tag == "html" and root.find("head/title") is not None
    imgs = root.findall(".//img")
    assert len(imgs) >= 2
    for img in imgs:
        src = img.get("src")
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1])[:8] == PNG_MAGIC
    r = CliRunner().invoke(main, ["explain", str(trace), "--no-assumptions", "--json", "--protocols", "fastrack"])
    d = json.loads(r.output)
    assert "assumptions" not in d and [p["protocol"] for p in d["protocols"]] == [CC_PROTOCOL, "fastrack"]


def test_markdown_report_writes_its_figures(tmp_path, trace):
    out = tmp_path / "notes.md"
    r = CliRunner().invoke(main, ["explain", str(trace), "--no-assumptions", "--protocols", "fastrack", "-o", str(out)])
    assert r.exit_code == 0, r.output
    md = out.read_text()
    assert "![What CC adds, by mechanism](notes.mechanisms.png)" in md and "| mechanism |" in md
    assert (tmp_path / "notes.mechanisms.png").read_bytes()[:8] == PNG_MAGIC
    assert (tmp_path / "notes.protocols.png").exists() and not (tmp_path / "notes.assumptions.png").exists()


@pytest.mark.parametrize("args, message", [
    (["-o", "r.pdf"], "unknown report format 'pdf'"),
    (["--protocols", "nope"], "unknown protocol"),
    (["--protocols", ","], "--protocols is empty"),
    (["--factors", "1"], "not a useful factor"),
])
def test_bad_input_one_line_nothing_written(tmp_path, trace, args, message, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["explain", str(trace), "--no-assumptions", *args])
    assert r.exit_code == 2 and message in r.output and len(r.output.strip().splitlines()) == 1, r.output
    assert "nope" not in r.output  # the typed value is not echoed
    assert not list(tmp_path.iterdir())


def test_existing_report_is_kept_without_overwrite(tmp_path, trace):
    out = tmp_path / "r.html"
    out.write_text("keep")
    r = CliRunner().invoke(main, ["explain", str(trace), "--no-assumptions", "-o", str(out)])
    assert r.exit_code == 2 and out.read_text() == "keep"


def test_run_ends_with_plain_words_and_human_mechanisms(trace):
    r = CliRunner().invoke(main, ["--protocol", "fastrack", str(trace)])
    assert r.exit_code == 0, r.output
    lines = r.output.strip().splitlines()
    assert lines[-1].startswith(f"In plain words: CC ('{CC_PROTOCOL}') adds ") and "fastrack saves" in lines[-1]
    block = r.output.split("what CC adds")[1]
    assert "ms" in block and "%" in block and " us\n" not in block.split("\n")[1]
    d = json.loads(CliRunner().invoke(main, ["--protocol", "fastrack", str(trace), "--json"]).output)
    cc = d["cc"]
    assert cc["none_makespan_ns"] == d["reference"]["makespan_ns"]
    assert cc["saves_ns"] == cc["cc_makespan_ns"] - d["makespan_ns"]
    assert sum(m["on_path_ns"] for m in cc["mechanisms"]) + sum(p["on_path_ns"] for p in cc["path_shifts"]) \
        == cc["overhead_ns"]
    base = json.loads(CliRunner().invoke(main, ["--protocol", CC_PROTOCOL, str(trace), "--json"]).output)
    assert base["makespan_ns"] == cc["cc_makespan_ns"] and "saves_ns" not in base["cc"]


def test_gpu_note_names_only_the_family():
    note = gpu_note({"gpu_model": "NVIDIA A100-SXM4-80GB secret-host"}, "h100")
    assert "A100" in note and "secret" not in note
    assert gpu_note({"gpu_model": "Tesla V100-SXM2-16GB"}, "h100").count("V100") == 2
    assert gpu_note({"gpu_model": "NVIDIA H100 80GB HBM3"}, "h100") is None
    assert gpu_note({"gpu_model": "NVIDIA A100"}, "other-model") is None


def test_ms_is_for_people():
    assert ms(2_621_000) == "2.621 ms" and ms(1_851, sign=True) == "+1.851 us" and ms(3) == "3 ns"


def _chromium() -> str | None:
    for name in ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def test_html_report_renders_in_headless_chromium(tmp_path, trace):
    """The report opened in a real browser: no console error, no page error, every figure decoded."""
    sync_api = pytest.importorskip("playwright.sync_api")
    browser_path = _chromium()
    if browser_path is None:
        pytest.skip("no Chromium binary (Debian: apt-get install chromium-headless-shell)")
    out = tmp_path / "report.html"
    r = CliRunner().invoke(main, ["explain", str(trace), "-j", "1", "--protocols", "fastrack", "-o", str(out)])
    assert r.exit_code == 0, r.output
    errors: list[str] = []
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(out.as_uri())
            page.wait_for_load_state("load")
            widths = page.evaluate("Array.from(document.images).map(i => i.complete ? i.naturalWidth : 0)")
            heads = page.evaluate("Array.from(document.querySelectorAll('h2')).map(h => h.textContent)")
            rows = page.evaluate("document.querySelectorAll('table tr').length")
        finally:
            browser.close()
    assert errors == []
    assert len(widths) == 3 and all(w > 100 for w in widths)
    assert "What CC adds, by mechanism" in heads and "What the answer rests on" in heads and rows > 4


def test_large_run_keeps_two_schedules_and_says_so(trace, monkeypatch):
    import replay.frontend.explain as ex
    from replay.pipeline import run as pipeline_run

    calls = []
    real = pipeline_run.replay_graph
    monkeypatch.setattr(pipeline_run, "replay_graph", lambda g, p, *a, **k: (calls.append(p), real(g, p, *a, **k))[1])
    monkeypatch.setattr(ex, "SUMMARY_MAX_NODES", 10)
    r = CliRunner().invoke(main, ["--protocol", "fastrack", str(trace), "--json"])
    d = json.loads(r.output)
    assert calls == ["none"]  # the reference only; fastrack itself goes through prepare/replay_prepared
    assert d["cc"]["cc_protocol"] == "fastrack" and "not replayed" in d["cc"]["note"] and "saves_ns" not in d["cc"]
    assert d["cc"]["overhead_ns"] == d["makespan_ns"] - d["reference"]["makespan_ns"]
