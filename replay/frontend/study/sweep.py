"""``replay sweep``: architecture studies over traces x protocols x presets x parameter values.

A *study* is a set of *points*. A point is (trace, protocol, preset, parameter overrides); its
**key** is a SHA-256 over (trace content digest, protocol, model, preset name and digest, every
resolved model parameter value), so it names what was computed, not how it was spelled. The
points come from the cartesian product of the traces, protocols, presets and the values of each
swept parameter (``--set pcie.bandwidth_gb_s=16,32,64``: a comma separates values to sweep), or
from an explicit list of points in a study file (``--study study.toml``; format in
``docs/studies.md`` and :func:`load_study_file`). For every (trace, preset, parameters) the
``none`` protocol is added when missing, so that every row has its slowdown.

Results: one Parquet table, one row per point, resumable after an interruption (re-running the
same command skips every finished point); executors: a local process pool or a Dask cluster.

This module runs a study (:func:`run_sweep`) and holds the ``replay sweep`` command; the parts
are its sibling modules in :mod:`replay.frontend.study`: ``spec`` (study definition and file), ``points``
(planning, keys, fingerprint), ``worker`` and ``executors`` (where points run), ``store`` (parts,
compaction, table layout). Import their names from the module that defines them.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import os
import time
from typing import Any, Callable, Sequence

import click

from fastrack_core.version import __version__
from fastrack_core.cli_support import progress_default, reports_errors
from fastrack_core.errors import ConfigError
from replay.names import NONE
from replay.frontend.options import (
    complete_protocols, dask_timeout_option, executor_options, json_option, study_model_option, study_presets_option,
    range_jobs_option, sweep_set_option,
)
from replay.plugins import DEFAULT_MODEL
from replay.frontend.study.executors import DASK_TIMEOUT_S, batches, execute, open_executor
from replay.frontend.study.points import plan_study
from replay.frontend.study.spec import StudySpec, load_study_file, parse_set_options, split_values
from replay.frontend.study.store import CHUNK_ROWS, ResultStore, make_row
from replay.frontend.study.worker import run_batch

__all__ = ["SweepReport", "build_spec", "command", "run_sweep"]

# ---------------------------------------------------------------------------------------------
# The study as a library call
# ---------------------------------------------------------------------------------------------
@dataclasses.dataclass
class SweepReport:
    output: str
    points: int
    skipped: int
    ran: int
    rows: int
    seconds: float
    executor: str
    workers: int = 1
    busy_s: float = 0.0  # wall time workers spent inside points (occupancy = busy / (seconds x workers))

    @property
    def points_per_s(self) -> float:
        return self.ran / self.seconds if self.seconds > 0 else 0.0


def run_sweep(spec: StudySpec, output: str | os.PathLike, executor: str | None = None, jobs: int | None = None,
              overwrite: bool = False, progress: bool | None = None, dask_timeout: float = DASK_TIMEOUT_S,
              chunk_rows: int = CHUNK_ROWS, log: Callable[[str], None] | None = None) -> SweepReport:
    plan = plan_study(spec)
    meta = {"tool": "replay sweep", "fastrack_version": __version__, "model": plan.model, "points": len(plan.points),
            "swept": plan.swept}
    store = ResultStore(output, plan.fingerprint, meta, overwrite=overwrite, chunk_rows=chunk_rows,
                        inputs=[p.trace_abs for p in plan.points])
    try:
        return _run(plan, store, executor, jobs, progress, dask_timeout, log)
    finally:
        store.close()


def _run(plan, store: ResultStore, executor, jobs, progress, dask_timeout, log) -> SweepReport:
    output = store.out
    done = store.done_keys()
    todo = [p for p in plan.points if p.key not in done]
    by_key = {p.key: p for p in todo}
    t0 = time.perf_counter()
    desc = "this process"
    busy = [0.0]
    n_workers = 1
    if todo:
        from tqdm import tqdm

        with open_executor(executor, jobs, dask_timeout) as (ex, workers, desc):
            if log:
                log(f"{len(plan.points)} points, {len(plan.points) - len(todo)} already done, "
                    f"{len(todo)} to run on {desc}")
            tqdm.monitor_interval = 0
            bar = tqdm(total=len(todo), unit="pt", desc="sweep", disable=(None if progress is None else not progress),
                       dynamic_ncols=True, smoothing=0.1)

            n_workers = workers

            def on_result(results: list[dict[str, Any]]) -> None:
                busy[0] += sum(r.get("wall_s", 0.0) for r in results)
                store.add(make_row(by_key[r["key"]], r) for r in results)
                bar.update(len(results))

            try:
                execute(batches(todo, workers), ex, workers, on_result, run=run_batch)  # looked up here: patchable
            finally:
                bar.close()
                store.flush()  # whatever happened, no finished point is lost
    elapsed = time.perf_counter() - t0
    if not todo and store.up_to_date():
        store.discard_parts()
        rows = len(done)  # nothing new: leave the output as it is
    else:
        rows = store.compact(complete=True, swept=plan.swept)
    return SweepReport(output=str(output), points=len(plan.points), skipped=len(plan.points) - len(todo),
                       ran=len(todo), rows=rows, seconds=elapsed, executor=desc, workers=n_workers, busy_s=busy[0])


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------
def _comma_list(values: Sequence[str], what: str) -> list[str]:
    out: list[str] = []
    for v in values:
        out.extend(split_values(v, what))
    return out


def build_spec(traces: Sequence[str], study: str | None, protocols: Sequence[str], presets: Sequence[str],
               model: str | None, overrides: Sequence[str], add_none: bool | None) -> tuple[StudySpec, str | None]:
    """Merge a study file with command-line options (the command line wins; --set adds axes)."""
    base: dict[str, Any] = load_study_file(study) if study else {}
    grid = dict(base.get("grid", {}))
    cli_grid = parse_set_options(overrides)
    if base.get("points") is not None and cli_grid:
        # explicit points: --set values are crossed with every point
        pts = [dict(p, **dict(zip(cli_grid, combo))) for p in base["points"]
               for combo in itertools.product(*cli_grid.values())]
        base["points"] = pts
    else:
        grid.update(cli_grid)
    spec = StudySpec(
        traces=list(traces) or base.get("traces", []),
        protocols=_comma_list(protocols, "--protocols") if protocols else base.get("protocols", []),
        presets=(_comma_list(presets, "--preset") if presets else base.get("presets")) or [None],
        grid=grid,
        points=base.get("points"),
        model=model or base.get("model", DEFAULT_MODEL),
        add_none=base.get("add_none", True) if add_none is None else add_none,
    )
    return spec, base.get("output")


@click.command("sweep")
@click.argument("traces", nargs=-1, type=click.Path(dir_okay=False))
@click.option("--study", type=click.Path(dir_okay=False), help="Study file (TOML; see docs/studies.md).")
@click.option("--protocols", multiple=True, metavar="P1,P2,...", shell_complete=complete_protocols,
              help="Protocols to run (comma-separated; replay list protocols).")
@study_presets_option
@study_model_option
@sweep_set_option
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Results table (.parquet).")
@executor_options
@click.option("--overwrite", is_flag=True, help="Replace an output written by a different study.")
@click.option("--add-none/--no-add-none", default=None,
              help=f"Add the '{NONE}' point each slowdown needs when missing (default on).")
@dask_timeout_option
@click.option("--ranges/--no-ranges", default=False, show_default=True,
              help="After the sweep, give every point's range over its preset's assumption ranges (in this "
                   "process, about 2 replays per ranged parameter; printed and in --json, not in the table).")
@range_jobs_option
@json_option
@reports_errors
def command(traces, study, protocols, presets, model, overrides, output, executor, jobs, progress, overwrite,
            add_none, dask_timeout, ranges, range_jobs, as_json):
    """Run a study: TRACES x protocols x presets x parameter values, one Parquet row per point.

    'none' is added where a slowdown needs it. Format of study files and of the table:
    docs/studies.md.

    \b
    replay sweep t.parquet --protocols baseline,fastrack \\
        --set pcie.h2d_bandwidth_gb_s+pcie.d2h_bandwidth_gb_s=16,32,64 \\
        --set cpu_crypto.core_gb_s=2,4,8 -o results.parquet
    replay sweep --study study.toml -o results.parquet --executor dask://host:8786

    Re-running the same command resumes: finished points are skipped.
    """
    spec, study_output = build_spec(traces, study, protocols, presets, model, overrides, add_none)
    output = output or study_output
    if not output:
        raise ConfigError("no output file: give -o results.parquet (or [study] output in the study file)")
    rep = run_sweep(spec, output, executor=executor, jobs=jobs, overwrite=overwrite, progress=progress_default(progress),
                    dask_timeout=dask_timeout, log=logging.getLogger(__name__).debug)  # -v: errors stay one line
    spans = point_ranges(plan_study(spec).points, range_jobs) if ranges else None
    if as_json:
        click.echo(json.dumps(dict(dataclasses.asdict(rep), points_per_s=rep.points_per_s,
                                   **({"ranges": spans} if spans is not None else {})), sort_keys=True))
        return
    rate = f", {rep.points_per_s:.1f} points/s" if rep.ran else ""
    click.echo(result_table(rep.output))
    if spans is not None:
        from replay.pipeline.ranges import range_line

        for r in spans:
            where = " ".join(x for x in (r["trace"], r["preset"] or "", " ".join(r["overrides"])) if x)
            click.echo(f"{where}: {range_line(r['protocol'], r, r['makespan_ns'], r['slowdown_vs_none'])}")
    click.echo(f"wrote {rep.output}: {rep.rows} rows ({rep.ran} run, {rep.skipped} already done) "
               f"in {rep.seconds:.1f} s{rate}")


def point_ranges(points, jobs: int | None = None) -> list[dict[str, Any]]:
    """The range report (:mod:`replay.pipeline.ranges`) of every point but the ``none`` ones, in plan
    order: one range study per (trace, preset, fixed parameters, scales), each trace's graph built
    once. Each entry: trace, protocol, preset, overrides, makespan_ns, slowdown_vs_none and the keys
    of ``replay --ranges --json``."""
    from replay.pipeline.ranges import RangeStudy
    from replay.pipeline.results import JSON_DIGITS, slowdown
    from replay.pipeline.run import load_graph

    graphs: dict[str, Any] = {}
    studies: dict[tuple, RangeStudy] = {}
    out = []
    for pt in points:
        if pt.protocol == NONE:
            continue
        if pt.trace_abs not in graphs:
            graphs.clear()  # (one trace's graph at a time: points are planned trace by trace)
            graphs[pt.trace_abs] = load_graph(pt.trace_abs)[0]
        sk = (pt.trace_abs, pt.preset_arg, pt.overrides, pt.scales)
        if sk not in studies:
            studies.clear()
            studies[sk] = RangeStudy(graphs[pt.trace_abs], pt.model, pt.preset_arg, pt.overrides, dict(pt.scales),
                                     jobs=jobs)
        d = studies[sk].protocol_range(pt.protocol)
        m = d["ranges"].get("makespan_ns")  # (the study's own replay at the preset)
        r = d["ranges"].get("reference_ns")
        out.append({"trace": pt.trace, "protocol": pt.protocol, "preset": pt.preset_arg, "overrides": list(pt.overrides),
                    "makespan_ns": m, "slowdown_vs_none": slowdown(m, r, JSON_DIGITS) if m and r else None, **d})
    return out


def result_table(path: str, top: int = 20) -> str:
    """The study's slowdowns: one row per (trace, preset, swept values), one column per protocol,
    the first ``top`` rows (the Parquet table has every column)."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    meta = json.loads((table.schema.metadata or {}).get(b"fastrack.study", b"{}") or b"{}")
    df = table.to_pandas()
    df["trace"] = df["trace"].map(lambda t: str(t).rsplit("/", 1)[-1])
    keys = ["trace"] + (["preset"] if df["preset"].nunique() > 1 else []) + [c for c in meta.get("swept", [])
                                                                              if c in df.columns]
    wide = df.pivot_table(index=keys, columns="protocol", values="slowdown", aggfunc="first", dropna=False)
    wide = wide[[c for c in wide.columns if c != NONE]]
    if wide.empty:
        return "(no slowdowns: the study has no protocol but none)"
    wide.columns = [f"{c} x" for c in wide.columns]
    text = wide.head(top).to_string(float_format=lambda v: f"{v:.3f}", na_rep="-")
    more = f"\n... {len(wide) - top} more rows (replay plot, or read the table)" if len(wide) > top else ""
    return f"slowdown vs {NONE} (makespan / makespan under {NONE}, same point):\n{text}{more}"
