"""Nothing a person typed or a trace held reaches a message (docs/robustness.md, "Nothing from
the input in messages"): a planted token in each CLI value the commands check, and in op names
of a graph that fails to schedule, never appears in the output; values are named by type and
size, and a registered name close to a typo is offered instead."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fastrack_core.errors import GraphError, closest, shown
from fastrack_core.schema import DepKind
from replay.frontend.cli import main as replay_main
from replay.frontend.study.executors import dask_address
from replay.pipeline.engine import schedule
from graphs import make_graph

TRACE = str(Path(__file__).resolve().parents[1] / "traces" / "llama.parquet")

TOKEN = "sk-PLANTED7"


def _run(args):
    r = CliRunner().invoke(replay_main, args)
    return r.exit_code, r.output  # (stdout and stderr together)


@pytest.mark.parametrize("args", [
    ["run", "--protocol", TOKEN, TRACE],
    ["run", "--model", TOKEN, TRACE],
    ["run", "--scale", f"{TOKEN}=2", TRACE],
    ["run", "--protocol", "baseline", "--set", f"{TOKEN}.key=1", TRACE],
    ["sweep", TRACE, "--protocols", "baseline", "--set", "pcie.latency_ns=1000,2000",
     "--executor", f"dask://user:{TOKEN}@127.0.0.1:1", "-o", "unused.parquet"],
    ["sweep", TRACE, "--protocols", "baseline", "--set", f"pcie.{TOKEN}=1,2", "-o", "unused.parquet"],
])
def test_cli_values_are_not_echoed(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out = _run(args)
    assert code == 2, out
    assert TOKEN not in out and "PLANTED" not in out, out
    assert len([ln for ln in out.splitlines() if ln.strip()]) == 1, out


@pytest.mark.parametrize("args, says", [
    (["run", "--range-jobs", TOKEN, TRACE], "'--range-jobs': expected an integer in 1<=x<=256"),
    (["sweep", TRACE, "-j", TOKEN, "-o", "unused.parquet"], "'--jobs': expected an integer in x>=1"),
    (["run", f"--{TOKEN}", TRACE], "no such option (a str of 13 characters)"),
    (["run", f"--{TOKEN}=1", TRACE], "no such option (a str of 13 characters)"),
    (["run", "--protocl", "baseline", TRACE], "did you mean --protocol?"),
    (["run", TRACE, TOKEN, TOKEN], "got 2 unexpected extra arguments"),
    (["sweep", TRACE, "--dask-timeout", TOKEN, "-o", "unused.parquet"], "expected a number in 0.1<=x<=3600"),
])
def test_click_usage_errors_say_what_an_option_takes_not_what_was_typed(args, says, tmp_path, monkeypatch):
    """Click's own messages repeat the value (``'sk-...' is not a valid integer``); ours say what
    the option takes (fastrack_core.cli_support.usage_message), on one line, exit 2."""
    monkeypatch.chdir(tmp_path)
    code, out = _run(args)
    assert code == 2, out
    assert TOKEN not in out and "PLANTED" not in out, out
    assert says in out and len([ln for ln in out.splitlines() if ln.strip()]) == 1, out


def test_an_unknown_command_is_named_by_size():
    from tracegen.cli import main as tracegen_main

    r = CliRunner().invoke(tracegen_main, [TOKEN])
    assert r.exit_code == 2 and TOKEN not in r.output and "no such command (a str of 11 characters)" in r.output


def test_our_own_option_messages_are_kept():
    code, out = _run(["sweep", TRACE, "--protocols", "baseline", "--dask-timeout", "nan", "-o", "unused.parquet"])
    assert code == 2 and "'--dask-timeout': expected a number, got nan" in out, out


def test_shown_and_closest():
    assert shown(TOKEN) == "(a str of 11 characters)"
    assert closest("fastrak", ["baseline", "fastrack", "none"]) == "; did you mean 'fastrack'?"
    assert closest(TOKEN, ["baseline", "fastrack"]) == ""


def test_protocol_typo_offers_the_registered_name():
    code, out = _run(["run", "--protocol", "fastrak", TRACE])
    assert code == 2 and "did you mean 'fastrack'?" in out and "fastrak'" not in out, out


@pytest.mark.parametrize("spec, why", [
    (f"dask://user:{TOKEN}@127.0.0.1:1", "no user or password"),
    ("dask://[::1", "not HOST:PORT"),
    ("dask://../../etc:1", "not HOST:PORT"),
    ("dask://host:0", "port"),
    ("dask://host:99999", "port"),
    (f"ftp://{TOKEN}", "unknown executor"),
])
def test_executor_addresses_refused_without_echo(spec, why):
    with pytest.raises(Exception) as e:
        dask_address(spec)
    assert why in str(e.value) and TOKEN not in str(e.value) and spec not in str(e.value)


@pytest.mark.parametrize("spec, address", [
    ("dask://127.0.0.1:8786", "tcp://127.0.0.1:8786"),
    ("dask://[::1]:8786", "tcp://[::1]:8786"),
    ("tcp://sched.example.org:8786", "tcp://sched.example.org:8786"),
])
def test_executor_addresses_accepted(spec, address):
    assert dask_address(spec) == address


def test_cycle_message_names_ops_by_id_kind_and_rank_only():
    """Two kernels that wait on each other, both named with the token: the cycle error names
    them as op ids with their kind and rank."""
    g = make_graph(2, edges=[(0, 1, int(DepKind.PROGRAM), 0), (1, 0, int(DepKind.PROGRAM), 0)],
                   names=(TOKEN,), dur=np.array([5, 5]))
    with pytest.raises(GraphError) as e:
        schedule(g)
    msg = str(e.value)
    assert "cycle" in msg or "never start" in msg, msg
    assert TOKEN not in msg and ("op 0 (kernel" in msg or "op 1 (kernel" in msg), msg
