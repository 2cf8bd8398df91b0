"""fastrack_core.outputs: which outputs a command may (over)write and which inputs it may open; and
`tracegen synth -o`, whose checks come from there (convert and capture: their own test files)."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

from fastrack_core.errors import FastrackError, TraceFormatError
from fastrack_core.outputs import check_input_path, check_output_path
from tracegen.cli import main as tracegen_main


@pytest.fixture
def paths(tmp_path):
    f = tmp_path / "file.parquet"
    f.write_bytes(b"x")
    d = tmp_path / "dir"
    d.mkdir()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link.parquet"
    link.symlink_to(f)
    dangling = tmp_path / "dangling.parquet"
    dangling.symlink_to(tmp_path / "absent")
    return {"file": f, "dir": d, "fifo": fifo, "link": link, "dangling": dangling, "new": tmp_path / "new.parquet",
            "devnull": os.devnull}


def test_new_output_is_fine(paths):
    assert str(check_output_path(paths["new"], [paths["file"]])) == str(paths["new"])


def test_existing_output_needs_overwrite(paths):
    with pytest.raises(FastrackError, match="already exists; pass --overwrite"):
        check_output_path(paths["file"])
    assert check_output_path(paths["file"], overwrite=True) == paths["file"]


@pytest.mark.parametrize("what,why", [("dir", "a directory"), ("fifo", "a FIFO"), ("devnull", "a device"),
                                      ("link", "symbolic link"), ("dangling", "symbolic link")])
def test_non_regular_output_is_refused_even_with_overwrite(paths, what, why):
    with pytest.raises(FastrackError, match=why) as err:
        check_output_path(paths[what], overwrite=True)
    assert str(paths[what]) in str(err.value)


def test_output_that_is_an_input_is_refused_even_with_overwrite(paths, tmp_path):
    hard = tmp_path / "hard.parquet"
    os.link(paths["file"], hard)
    for out in (paths["file"], hard):
        with pytest.raises(FastrackError, match="same file as the input"):
            check_output_path(out, [tmp_path / "absent.json", paths["file"]], overwrite=True)


def test_inputs(paths):
    assert check_input_path(paths["file"]) == paths["file"]
    assert check_input_path(paths["link"]) == paths["link"]  # links to regular files are followed
    assert check_input_path(paths["dir"], allow_dir=True) == paths["dir"]
    for what, why in (("dir", "a directory"), ("fifo", "a FIFO"), ("devnull", "a device"), ("new", "no such file"),
                      ("dangling", "no such file")):
        with pytest.raises(TraceFormatError, match=why):
            check_input_path(paths[what])


# --------------------------------------------------------------------------- tracegen synth -o

SYNTH = [["synth", "random", "--ops", "50", "--seed", "1"],
         ["synth", "memcpy", "--bytes", "4KiB", "--direction", "h2d", "--memory", "pinned", "--repeat", "2"]]


def _run(*args):
    return CliRunner().invoke(tracegen_main, [str(a) for a in args])


@pytest.mark.parametrize("cmd", SYNTH, ids=lambda c: c[1])
def test_synth_existing_output_needs_overwrite(tmp_path, cmd):
    out = tmp_path / "s.parquet"
    out.write_bytes(b"keep me")
    res = _run(*cmd, "-o", out)
    assert res.exit_code == 2 and len(res.stderr.strip().splitlines()) == 1
    assert "s.parquet" in res.stderr and "--overwrite" in res.stderr and out.read_bytes() == b"keep me"
    res = _run(*cmd, "-o", out, "--overwrite")
    assert res.exit_code == 0, res.output
    assert out.read_bytes()[:4] == b"PAR1"


@pytest.mark.parametrize("what", ["devnull", "link", "dir", "fifo"])
def test_synth_non_regular_output_is_refused_even_with_overwrite(paths, what):
    res = _run(*SYNTH[0], "-o", paths[what], "--overwrite")
    assert res.exit_code == 2, res.output
    assert len(res.stderr.strip().splitlines()) == 1 and str(paths[what]) in res.stderr
    assert paths["file"].read_bytes() == b"x"


# ------------------------------------------------------------------- replay commands' outputs

@pytest.fixture(scope="module")
def small_trace(tmp_path_factory):
    from tracegen.cli import main as tracegen_main

    p = tmp_path_factory.mktemp("t") / "t.parquet"
    r = CliRunner().invoke(tracegen_main, ["synth", "random", "--ops", "120", "--seed", "5", "-o", str(p)])
    assert r.exit_code == 0, r.output
    return p


def _replay_outputs(trace, out):
    return {
        "compare --plot": ["compare", str(trace), "--protocols", "none,baseline", "--plot", str(out)],
        "sensitivity -o": ["sensitivity", str(trace), "--protocol", "baseline", "--factors", "2", "-o", str(out), "-j", "1"],
        "sensitivity --plot": ["sensitivity", str(trace), "--protocol", "baseline", "--factors", "2", "--plot", str(out),
                               "-j", "1"],
    }


@pytest.mark.parametrize("command", ["compare --plot", "sensitivity -o", "sensitivity --plot"])
@pytest.mark.parametrize("target", ["input", "link", "existing"])
def test_replay_outputs_never_destroy_anything(tmp_path, small_trace, command, target):
    from replay.frontend.cli import main as replay_main

    trace = tmp_path / "in.parquet"
    trace.write_bytes(small_trace.read_bytes())
    suffix = ".parquet" if command.endswith("-o") else ".png"
    out = {"input": trace, "link": tmp_path / f"l{suffix}", "existing": tmp_path / f"e{suffix}"}[target]
    if target == "link":
        out.symlink_to(tmp_path / f"elsewhere{suffix}")
    if target == "existing":
        out.write_bytes(b"mine")
    before = trace.read_bytes()
    r = CliRunner().invoke(replay_main, _replay_outputs(trace, out)[command])
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert trace.read_bytes() == before
    if target == "link":
        assert out.is_symlink() and not (tmp_path / f"elsewhere{suffix}").exists()
    if target == "existing":
        assert out.read_bytes() == b"mine" and "--overwrite" in r.output
        r = CliRunner().invoke(replay_main, [*_replay_outputs(trace, out)[command], "--overwrite"])
        assert r.exit_code == 0 and out.read_bytes() != b"mine"
