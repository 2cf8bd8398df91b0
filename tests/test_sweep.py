"""replay sweep: points, columns, slowdown, resume, executors (local pool, Dask), bad input."""

from __future__ import annotations

import hashlib
import socket

import pandas as pd
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import fakeplugins
from replay.frontend.cli import main
from replay.frontend.study import sweep as sweep_module
from replay.frontend.study.points import plan_study
from replay.frontend.study.spec import StudySpec
from replay.frontend.study.store import META_KEY, ResultStore, read_meta
from replay.frontend.study.sweep import run_sweep
from replay.frontend.study.worker import run_batch
from tracegen.cli import main as tracegen_main

GRID = ["--set", "pcie.bandwidth_gb_s=16,64", "--set", "cpu.crypto_gb_s=2,4"]


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("traces")
    out = []
    for seed, ops in ((1, 300), (2, 200)):
        p = d / f"r{seed}.parquet"
        r = CliRunner().invoke(tracegen_main, ["synth", "random", "--ops", str(ops), "--seed", str(seed), "-o", str(p)])
        assert r.exit_code == 0, r.output
        out.append(str(p))
    return out


@pytest.fixture
def fake(monkeypatch):
    fakeplugins.install(monkeypatch)


def sweep(*args):
    return CliRunner().invoke(main, ["sweep", "--no-progress", *map(str, args)])


def test_grid_columns_and_slowdown(tmp_path, traces, fake):
    out = tmp_path / "r.parquet"
    r = sweep(*traces, "--model", "fake", "--protocols", "fake-slow,fake-fast", *GRID, "-o", out, "-j", 1)
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(out)
    # 2 traces x 4 parameter points x (2 protocols + the added 'none')
    assert len(df) == 2 * 4 * 3 and df["key"].is_unique
    assert set(df["protocol"]) == {"fake-slow", "fake-fast", "none"}
    for col in ("trace", "trace_sha256", "preset", "preset_digest", "params_digest", "fastrack_version",
                "makespan_ns", "slowdown", "cp_compute_ns", "cp_pcie_ns", "pcie.bandwidth_gb_s", "cpu.crypto_gb_s",
                "pcie.latency_ns", "misc.enabled"):
        assert col in df.columns, col
    assert df.loc[0, "trace_sha256"] == hashlib.sha256(open(df.loc[0, "trace"], "rb").read()).hexdigest()
    assert (df.loc[df["protocol"] == "none", "slowdown"] == 1.0).all()
    slow = df[df["protocol"] == "fake-slow"]
    assert (slow["slowdown"] > 1).all()
    # the critical path adds up to the makespan in every row
    cp = df[[c for c in df.columns if c.startswith("cp_")]].sum(axis=1)
    assert (cp == df["makespan_ns"]).all()
    # more bandwidth, less time (fake-slow, same trace and crypto)
    one = slow[(slow["trace"] == traces[0]) & (slow["cpu.crypto_gb_s"] == 2.0)].sort_values("pcie.bandwidth_gb_s")
    assert one["makespan_ns"].is_monotonic_decreasing and len(one) == 2
    meta = read_meta(out)
    assert meta["fingerprint"] and meta["complete"] and meta["swept"] == ["cpu.crypto_gb_s", "pcie.bandwidth_gb_s"]


def test_local_pool_matches_in_process_row_for_row(tmp_path, traces, fake):
    a, b = tmp_path / "a.parquet", tmp_path / "b.parquet"
    args = [*traces, "--model", "fake", "--protocols", "fake-slow", "--preset", "fake-a,fake-b", *GRID]
    assert sweep(*args, "-o", a, "-j", 1).exit_code == 0
    r = sweep(*args, "-o", b, "-j", 2)
    assert r.exit_code == 0, r.output
    pd.testing.assert_frame_equal(pd.read_parquet(a), pd.read_parquet(b))


def test_resume_after_interruption_loses_no_point(tmp_path, traces, fake, monkeypatch):
    out = tmp_path / "r.parquet"
    spec = StudySpec(traces=traces[:1], protocols=["fake-slow", "fake-fast"], model="fake",
                     grid={"pcie.bandwidth_gb_s": [8, 16, 32, 64]})
    real = run_batch
    calls = []

    def flaky(batch):
        calls.append(len(batch))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(batch)

    monkeypatch.setattr(sweep_module, "run_batch", flaky)
    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, out, jobs=1, progress=False)
    assert not out.exists()
    store = ResultStore(out, plan_study(spec).fingerprint, {})
    parts = store.done_keys()
    store.close()
    assert len(parts) == sum(calls[:2]) > 0  # every finished point was written before stopping
    monkeypatch.setattr(sweep_module, "run_batch", real)
    rep = run_sweep(spec, out, jobs=1, progress=False)
    assert rep.skipped == len(parts) and rep.ran == rep.points - len(parts) and rep.rows == rep.points == 12
    assert not (tmp_path / "r.parquet.parts").exists()
    clean = tmp_path / "clean.parquet"
    run_sweep(spec, clean, jobs=1, progress=False)
    pd.testing.assert_frame_equal(pd.read_parquet(out), pd.read_parquet(clean))
    # a finished study re-run does nothing
    again = run_sweep(spec, out, jobs=1, progress=False)
    assert again.ran == 0 and again.rows == 12


def test_different_study_same_output_is_refused(tmp_path, traces, fake):
    out = tmp_path / "r.parquet"
    assert sweep(traces[0], "--model", "fake", "--protocols", "fake-slow", "-o", out, "-j", 1).exit_code == 0
    r = sweep(traces[0], "--model", "fake", "--protocols", "fake-fast", "-o", out, "-j", 1)
    assert r.exit_code == 2
    assert "different study" in r.output and "--overwrite" in r.output and len(r.output.strip().splitlines()) == 1
    r = sweep(traces[0], "--model", "fake", "--protocols", "fake-fast", "-o", out, "-j", 1, "--overwrite")
    assert r.exit_code == 0, r.output
    assert set(pd.read_parquet(out)["protocol"]) == {"fake-fast", "none"}
    # a file that is not a study at all
    r = sweep(traces[0], "--model", "fake", "--protocols", "fake-fast", "-o", traces[1], "-j", 1)
    assert r.exit_code == 2 and "not written by replay sweep" in r.output


@pytest.mark.parametrize("args, message", [
    (["--set", "pcie.bandwdith_gb_s=16,32"], "unknown parameter (a str of 19 characters)"),
    (["--set", "pcie.bandwidth_gb_s="], "empty value list"),
    (["--set", "pcie.bandwidth_gb_s=16,,32"], "empty value"),
    (["--set", "bandwidth=16"], "SECTION.KEY"),
    (["--set", "pcie.bandwidth_gb_s=fast"], "pcie.bandwidth_gb_s"),
    (["--protocols", "nope"], "unknown protocol (a str of 4 characters)"),
    (["--executor", "ftp://x"], "expected 'local' or dask://"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, traces, fake, args, message):
    base = ["--model", "fake", "--protocols", "fake-slow"]
    r = sweep(traces[0], *base, *args, "-o", tmp_path / "r.parquet", "-j", 1)
    assert r.exit_code == 2, r.output
    assert message in r.output and len(r.output.strip().splitlines()) == 1
    assert not (tmp_path / "r.parquet").exists()


def test_unreachable_dask_scheduler_is_one_line_exit_2(tmp_path, traces, fake):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = sweep(traces[0], "--model", "fake", "--protocols", "fake-slow", "-o", tmp_path / "r.parquet",
              "--executor", f"dask://127.0.0.1:{port}", "--dask-timeout", "1")
    assert r.exit_code == 2 and "cannot reach the Dask scheduler" in r.output
    assert len(r.output.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())  # no output, no part directory


def test_study_file_grid_points_and_linked_parameters(tmp_path, traces, fake):
    study = tmp_path / "study.toml"
    study.write_text(f"""
[study]
model = "fake"
traces = ["{traces[0]}"]
protocols = ["fake-slow"]
output = "out.parquet"

[grid]
"pcie.bandwidth_gb_s+cpu.crypto_gb_s" = [8, 16]
pcie.latency_ns = [100, 200]
""")
    r = sweep("--study", study, "-j", 1)
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(tmp_path / "out.parquet")
    assert len(df) == 2 * 2 * 2
    assert (df["pcie.bandwidth_gb_s"] == df["cpu.crypto_gb_s"]).all()
    # the same points from the command line (and a plain grid in --set): the same keys
    r = sweep(traces[0], "--model", "fake", "--protocols", "fake-slow", "--set",
              "pcie.bandwidth_gb_s+cpu.crypto_gb_s=8,16", "--set", "pcie.latency_ns=100,200",
              "-o", tmp_path / "cli.parquet", "-j", 1)
    assert r.exit_code == 0, r.output
    assert sorted(pd.read_parquet(tmp_path / "cli.parquet")["key"]) == sorted(df["key"])

    pts = tmp_path / "points.toml"
    pts.write_text(f"""
[study]
model = "fake"
traces = ["{traces[0]}"]
protocols = ["fake-slow"]

[[points]]
pcie.bandwidth_gb_s = 16

[[points]]
pcie = {{ bandwidth_gb_s = 64 }}
protocol = ["fake-fast"]
""")
    r = sweep("--study", pts, "-o", tmp_path / "pts.parquet", "-j", 1)
    assert r.exit_code == 0, r.output
    got = pd.read_parquet(tmp_path / "pts.parquet")
    assert sorted(zip(got["protocol"], got["pcie.bandwidth_gb_s"])) == [
        ("fake-fast", 64.0), ("fake-slow", 16.0), ("none", 16.0), ("none", 64.0)]

    bad = tmp_path / "bad.toml"
    bad.write_text('[study]\nprotocols = ["fake-slow"]\n[grid]\npcie.bandwidth_gb_s = []\n')
    r = sweep(traces[0], "--model", "fake", "--study", bad, "-o", tmp_path / "b.parquet")
    assert r.exit_code == 2 and "empty value list" in r.output


@pytest.mark.slow  # starts a two-process Dask cluster
def test_dask_cluster_matches_local_row_for_row(tmp_path, traces, fake):
    import distributed
    local = tmp_path / "local.parquet"
    args = [*traces, "--model", "fake", "--protocols", "fake-slow,fake-fast", *GRID]
    assert sweep(*args, "-o", local, "-j", 2).exit_code == 0
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        client.run(fakeplugins.install)  # the workers are fresh processes: register the fakes there too
        remote = tmp_path / "dask.parquet"
        address = cluster.scheduler_address.replace("tcp://", "dask://")
        r = sweep(*args, "-o", remote, "--executor", address)
        assert r.exit_code == 0, r.output
        assert "Dask" in r.output or r.output
    pd.testing.assert_frame_equal(pd.read_parquet(local), pd.read_parquet(remote))
    assert pq.read_schema(remote).metadata[META_KEY] == pq.read_schema(local).metadata[META_KEY]


def test_real_protocols(tmp_path, traces):
    out = tmp_path / "r.parquet"
    r = sweep(traces[0], "--protocols", "baseline,fastrack", "--set", "pcie.h2d_bandwidth_gb_s=16,64",
              "-o", out, "-j", 2)
    assert r.exit_code == 0, r.output
    df = pd.read_parquet(out)
    assert len(df) == 6 and set(df["protocol"]) == {"none", "baseline", "fastrack"}
    assert (df["preset"] == "h100-sxm").all()
    base = df[df["protocol"] == "baseline"]
    assert (base["slowdown"] >= 1).all()
