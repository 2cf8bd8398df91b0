"""A study's output is never shared, destroyed or left unresumable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pandas as pd
import pytest
from click.testing import CliRunner

import fakeplugins
from replay.frontend.cli import main
from replay.frontend.study import sweep as sweep_module
from replay.frontend.study.points import plan_study
from replay.frontend.study.spec import StudySpec
from replay.frontend.study.store import ResultStore
from replay.frontend.study.sweep import run_sweep
from replay.frontend.study.worker import run_batch
from tracegen.cli import main as tracegen_main


@pytest.fixture(scope="module")
def trace(tmp_path_factory):
    p = tmp_path_factory.mktemp("t") / "r.parquet"
    r = CliRunner().invoke(tracegen_main, ["synth", "random", "--ops", "200", "--seed", "3", "-o", str(p)])
    assert r.exit_code == 0, r.output
    return str(p)


@pytest.fixture
def fake(monkeypatch):
    fakeplugins.install(monkeypatch)


def _spec(trace, bw=(8, 16, 32, 64)):
    return StudySpec(traces=[trace], protocols=["fake-slow"], model="fake", grid={"pcie.bandwidth_gb_s": list(bw)},
                     add_none=False)


def test_a_second_study_on_the_same_output_is_refused_while_the_first_runs(tmp_path, trace, fake):
    out = tmp_path / "r.parquet"
    first = ResultStore(out, plan_study(_spec(trace)).fingerprint, {})
    try:
        r = CliRunner().invoke(main, ["sweep", trace, "--model", "fake", "--protocols", "fake-slow", "--set",
                                      "pcie.bandwidth_gb_s=1,2", "-o", str(out), "-j", "1"])
        assert r.exit_code == 2 and "another study is writing this output" in r.output
        assert len(r.output.strip().splitlines()) == 1
    finally:
        first.close()
    assert not (tmp_path / "r.parquet.lock").exists()
    assert run_sweep(_spec(trace), out, jobs=1, progress=False).rows == 4  # free again once released


def test_an_interrupted_overwrite_resumes_with_or_without_overwrite(tmp_path, trace, fake, monkeypatch):
    out = tmp_path / "r.parquet"
    run_sweep(_spec(trace, (1, 2)), out, jobs=1, progress=False)  # an older, different study
    calls = []

    def flaky(batch):
        calls.append(len(batch))
        if len(calls) == 4:
            raise KeyboardInterrupt
        return run_batch(batch)

    monkeypatch.setattr(sweep_module, "run_batch", flaky)
    spec = _spec(trace, (8, 16, 32, 64, 128, 256, 512, 1024))
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, out, jobs=1, progress=False, overwrite=True)
    assert len(pd.read_parquet(out)) == 2  # the old output is intact until the new study is complete
    monkeypatch.setattr(sweep_module, "run_batch", run_batch)
    rep = run_sweep(spec, out, jobs=1, progress=False)  # no --overwrite needed to finish what was started
    assert rep.skipped > 0 and rep.skipped + rep.ran == rep.rows == 8
    assert sorted(pd.read_parquet(out)["pcie.bandwidth_gb_s"]) == [8, 16, 32, 64, 128, 256, 512, 1024]


def test_a_sweep_output_that_is_a_trace_or_a_link_is_refused(tmp_path, trace, fake):
    link = tmp_path / "l.parquet"
    link.symlink_to(tmp_path / "elsewhere.parquet")
    for out, message in ((trace, "same file as the input"), (link, "symbolic link")):
        r = CliRunner().invoke(main, ["sweep", trace, "--model", "fake", "--protocols", "fake-slow", "-o", str(out)])
        assert r.exit_code == 2 and message in r.output, r.output
    assert link.is_symlink() and not (tmp_path / "elsewhere.parquet").exists()


@pytest.mark.parametrize("value", ["nan", "0", "-1", "inf"])
def test_dask_timeout_must_be_a_positive_finite_number(tmp_path, trace, value):
    r = CliRunner().invoke(main, ["sweep", trace, "--protocols", "none", "-o", str(tmp_path / "o.parquet"),
                                  "--dask-timeout", value])
    assert r.exit_code == 2 and "--dask-timeout" in r.output


def test_pool_workers_end_when_the_sweep_is_killed(tmp_path, trace):
    """kill -9 of the sweep: its pool workers notice within a few seconds and exit."""
    pids = tmp_path / "pids"
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent(f"""
        import os, time
        from replay.frontend.study import executors

        def park(_):
            with open({str(pids)!r}, "a") as f:
                f.write(f"{{os.getpid()}}\\n")
            time.sleep(120)

        with executors.open_executor("local", 2) as (ex, n, _):
            futures = [ex.submit(park, i) for i in range(2)]
            time.sleep(120)
    """))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen([sys.executable, str(script)], env=env)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (not pids.exists() or len(pids.read_text().split()) < 2):
            time.sleep(0.1)
        workers = [int(x) for x in pids.read_text().split()]
        assert len(workers) == 2
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 30
    alive = workers
    while alive and time.monotonic() < deadline:
        time.sleep(0.2)
        alive = [w for w in alive if _alive(w)]
    assert not alive


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by init) counts as gone
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow  # starts a Dask scheduler
def test_a_dask_scheduler_without_workers_fails_with_one_line(tmp_path, trace, fake):
    import distributed

    with distributed.LocalCluster(n_workers=0, host="127.0.0.1", dashboard_address=None) as cluster:
        address = cluster.scheduler_address.replace("tcp://", "dask://")
        r = CliRunner().invoke(main, ["sweep", trace, "--model", "fake", "--protocols", "fake-slow",
                                      "-o", str(tmp_path / "o.parquet"), "--executor", address, "--dask-timeout", "2"])
    assert r.exit_code == 2 and "has no worker" in r.output and len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "o.parquet").exists() and not (tmp_path / "o.parquet.lock").exists()


@pytest.mark.parametrize("text,message", [
    ('[study]\nadd_none = "no"\n', "add_none: expected true or false"),
    ("[study]\nprotocols = [1, 2]\n", "protocols: expected strings"),
    ("[study]\nmodel = 3\n", "model: expected a string"),
    ("study = 3\n", "[study] must be a table"),
    ("grid = 3\n", "[grid] must be a table"),
    ('[grid]\n"pcie.latency_ns" = [{a = 1}]\n', "expected numbers, strings or booleans"),
    ("points = 3\n", "must be an array of tables"),
    ('[[points]]\ntrace = 5\n', "must be a string or strings"),
])
def test_study_files_of_the_wrong_types_are_refused_in_one_line(tmp_path, trace, text, message):
    study = tmp_path / "s.toml"
    study.write_text(text)
    r = CliRunner().invoke(main, ["sweep", trace, "--study", str(study), "-o", str(tmp_path / "o.parquet")])
    assert r.exit_code == 2 and message in r.output and len(r.output.strip().splitlines()) == 1, r.output
