"""Where a study's results go: resumable part files, then one atomically written Parquet table.

Finished points are appended, in small chunks (every ``CHUNK_ROWS`` points or ``CHUNK_SECONDS``
seconds), as Parquet files to ``<output>.parts/``, each written to a temporary name and renamed.
When the last point is done the parts and any earlier output are compacted into ``<output>``
(atomically: temporary name, then rename) and the part directory is removed. An interrupted
study therefore loses at most the points of one unwritten chunk (on Ctrl-C or an error, not even
those: the buffer is flushed first); re-running it skips every point whose key is already in
``<output>`` or its parts. The output's Parquet metadata (key ``fastrack.study``, :data:`META_KEY`)
holds the study fingerprint; an output or part directory with another fingerprint is refused
unless ``overwrite`` is given.

The table has one row per point (:data:`FIXED_COLUMNS`, then every resolved model parameter as a
``section.key`` column, then the critical path per category), sorted by (trace, preset, swept
parameter values, protocol, key): the same table, row for row, whatever the executor, the worker
count, the completion order or how often the study was resumed.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from fastrack_core.version import __version__
from fastrack_core.atomic import atomic_path, write_text_atomic
from fastrack_core.errors import ConfigError
from fastrack_core.outputs import check_output_path
from replay.frontend.study.points import Point, canonical_json

META_KEY = b"fastrack.study"
CHUNK_ROWS = 200  # points per part file (at most)
CHUNK_SECONDS = 10.0  # ... or this long since the last part was written
TABLE_DIGITS = 9  # the slowdown column is rounded to this many decimals
SERVING_COLUMNS = ("ttft_mean_ns", "tpot_mean_ns", "output_tokens_per_s")  # replay.pipeline.serving.summary_row
FIXED_COLUMNS = (
    "key", "trace", "trace_sha256", "protocol", "model", "preset", "preset_digest", "params_digest",
    "fastrack_version", "none_key", "makespan_ns", "slowdown", "captured_span_ns", "ops", "nodes",
)


def _category_labels() -> list[str]:
    from replay.graph import Category

    return [c.label for c in Category]


def _param_value(v: Any) -> Any:
    return v if isinstance(v, (bool, int, float, str)) or v is None else json.dumps(v, sort_keys=True)


def make_row(p: Point, r: Mapping[str, Any]) -> dict[str, Any]:
    """The table row of point ``p`` from its worker result ``r``."""
    row: dict[str, Any] = {
        "key": p.key, "trace": p.trace, "trace_sha256": p.trace_sha, "protocol": p.protocol, "model": p.model,
        "preset": p.resolved.preset, "preset_digest": p.preset_digest, "params_digest": p.resolved.digest,
        "fastrack_version": r.get("version", __version__), "none_key": p.none_key,
    }
    row.update({k: _param_value(v) for k, v in p.resolved.flat.items()})
    row.update({f"scale.{k}": float(v) for k, v in p.scales})
    row.update({"makespan_ns": r["makespan_ns"], "captured_span_ns": r["captured_span_ns"], "ops": r["ops"],
                "nodes": r["nodes"]})
    for c in _category_labels():
        row[f"cp_{c}_ns"] = int(r["cp"].get(c, 0))
    row.update(r.get("serving", {}))  # serving traces: ttft_mean_ns, tpot_mean_ns, output_tokens_per_s
    return row


def read_meta(path: Path) -> dict[str, Any] | None:
    """The study metadata of a results file, or None when it is not one."""
    import pyarrow.parquet as pq

    try:
        md = pq.read_schema(path).metadata or {}
    except Exception:  # noqa: BLE001 - any unreadable file is "not a study"
        return None
    raw = md.get(META_KEY)
    if raw is None:
        return None
    try:
        return json.loads(raw)
    except ValueError:
        return None


class ResultStore:
    """Finished points in ``<out>.parts/part-*.parquet`` until compaction into ``<out>``."""

    def __init__(self, out: str | os.PathLike, fingerprint: str, meta: dict[str, Any], overwrite: bool = False,
                 chunk_rows: int = CHUNK_ROWS, chunk_seconds: float = CHUNK_SECONDS, inputs: Iterable[str] = ()):
        self.out = Path(out)
        self.parts = self.out.with_name(self.out.name + ".parts")
        self.fingerprint = fingerprint
        self.meta = dict(meta, fingerprint=fingerprint)
        self.chunk_rows = chunk_rows
        self.chunk_seconds = chunk_seconds
        self.buffer: list[dict[str, Any]] = []
        self.last_flush = time.monotonic()
        self.keep_out = not overwrite  # with --overwrite, the old output is replaced at compaction
        if self.out.suffix.lower() != ".parquet":
            raise ConfigError(f"-o {self.out}: the results file must end in .parquet")
        check_output_path(self.out, inputs=sorted(set(inputs)), overwrite=True)  # never a link, a device, a trace
        self.lock = StudyLock(self.out)
        try:
            pending = self._parts_meta()
            if pending.get("fingerprint") == self.fingerprint and pending.get("replaces_output"):
                self.keep_out = False  # an interrupted --overwrite of this same study: resume it
            elif overwrite:
                if self.parts.exists():
                    shutil.rmtree(self.parts)
            else:
                self._check_existing()
            self.meta["replaces_output"] = not self.keep_out
        except BaseException:
            self.lock.release()
            raise

    def close(self) -> None:
        """Release the output's lock (after compaction, or when the study stops)."""
        self.lock.release()

    def _parts_meta(self) -> dict[str, Any]:
        try:
            meta = json.loads((self.parts / "study.json").read_text())
        except (OSError, ValueError):
            return {}
        return meta if isinstance(meta, dict) and self._part_files() else {}

    def _refuse(self, what: str) -> None:
        raise ConfigError(f"{what}; use a new -o or --overwrite", path=str(self.out))

    def _check_existing(self) -> None:
        if self.out.exists():
            meta = read_meta(self.out)
            if meta is None:
                self._refuse("exists and was not written by replay sweep")
            if meta.get("fingerprint") != self.fingerprint:
                self._refuse(f"written by a different study (fingerprint {str(meta.get('fingerprint'))[:12]}, "
                             f"this study {self.fingerprint[:12]})")
        marker = self.parts / "study.json"
        if self.parts.exists() and not self._part_files():  # nothing finished there: not worth keeping
            shutil.rmtree(self.parts, ignore_errors=True)
        if self.parts.exists():
            try:
                meta = json.loads(marker.read_text())
            except (OSError, ValueError):
                meta = {}
            if not isinstance(meta, dict) or meta.get("fingerprint") != self.fingerprint:
                self._refuse(f"unfinished parts of a different study in {self.parts}")

    def _part_files(self) -> list[Path]:
        return sorted(self.parts.glob("part-*.parquet")) if self.parts.exists() else []

    def _inputs(self) -> list[Path]:
        return ([self.out] if self.keep_out and self.out.exists() else []) + self._part_files()

    def done_keys(self) -> set[str]:
        import pyarrow.parquet as pq

        keys: set[str] = set()
        for f in self._inputs():
            keys.update(pq.read_table(f, columns=["key"]).column("key").to_pylist())
        return keys

    def up_to_date(self) -> bool:
        """The output holds the whole study already and no part waits to be merged."""
        return self.keep_out and self.out.exists() and not self._part_files()

    def discard_parts(self) -> None:
        shutil.rmtree(self.parts, ignore_errors=True)

    def add(self, rows: Iterable[dict[str, Any]]) -> None:
        self.buffer.extend(rows)
        if len(self.buffer) >= self.chunk_rows or time.monotonic() - self.last_flush >= self.chunk_seconds:
            self.flush()

    def flush(self) -> None:
        if not self.buffer:
            return
        import pandas as pd

        df = pd.DataFrame.from_records(self.buffer)
        if not self.parts.exists():
            self.parts.mkdir(parents=True)
            write_text_atomic(self.parts / "study.json", canonical_json(self.meta))
        name = f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
        _write_parquet(df, self.parts / name, self.meta)
        self.buffer = []
        self.last_flush = time.monotonic()

    def compact(self, complete: bool, swept: Sequence[str]) -> int:
        """Merge the output and the parts into the output (atomically); returns its row count."""
        import pandas as pd

        self.flush()
        frames = [pd.read_parquet(f) for f in self._inputs()]
        frames = [f for f in frames if len(f)]
        df = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(FIXED_COLUMNS))
        df = finish_table(df, swept)
        _write_parquet(df, self.out, dict(self.meta, complete=complete, rows=len(df)))
        self.discard_parts()
        return len(df)


class StudyLock:
    """An exclusive lock on a study's output (``<output>.lock``, flock), so two studies can never
    write the same output at once; the second one is refused at once with one line. The lock
    file is removed when released; a lock taken on a file another study has just removed is
    dropped and taken again."""

    def __init__(self, out: Path):
        import fcntl

        self.path = out.with_name(out.name + ".lock")
        self.fd: int | None = None
        for _ in range(16):
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
            except OSError as exc:
                raise ConfigError(f"cannot create the lock file {self.path.name} ({exc.strerror})", path=str(out)) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise ConfigError("another study is writing this output now (its lock file "
                                  f"{self.path.name} is held); wait for it or use another -o", path=str(out)) from None
            try:
                same = os.path.samestat(os.fstat(fd), os.stat(self.path))
            except FileNotFoundError:
                same = False
            if same:
                self.fd = fd
                return
            os.close(fd)  # the holder removed the file as we opened it: take the new one
        raise ConfigError(f"could not take the lock {self.path.name}", path=str(out))

    def release(self) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.close(self.fd)
        self.fd = None


def finish_table(df, swept: Sequence[str]):
    """Deduplicate, add slowdown vs none, order the columns and sort the rows canonically."""
    import numpy as np
    import pandas as pd

    from replay.pipeline.results import slowdown

    df = df.drop_duplicates("key", keep="first")
    ref = df.set_index("key")["makespan_ns"]
    none = df["none_key"].map(ref) if "none_key" in df else pd.Series(np.nan, index=df.index)
    df = df.assign(slowdown=slowdown(df["makespan_ns"].astype("float64"), none.astype("float64"), TABLE_DIGITS))
    for col in SERVING_COLUMNS:  # serving traces: each metric relative to the same point under none
        if col in df:
            ref_col = df["none_key"].map(df.set_index("key")[col]).astype("float64")
            df[f"{col}_vs_none"] = slowdown(df[col].astype("float64"), ref_col, TABLE_DIGITS)
    param_cols = sorted(c for c in df.columns if "." in c)
    cp_cols = [c for c in df.columns if c.startswith("cp_")]
    first = [c for c in FIXED_COLUMNS if c in df.columns]
    df = df[first + param_cols + cp_cols + [c for c in df.columns if c not in set(first + param_cols + cp_cols)]]
    sort_cols = ["trace", "preset", *[c for c in swept if c in df.columns], "protocol", "key"]
    df = df.sort_values(sort_cols, kind="mergesort", na_position="last").reset_index(drop=True)
    return df


def _write_parquet(df, path: Path, meta: Mapping[str, Any]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(df, preserve_index=False)
    md = dict(table.schema.metadata or {})
    md[META_KEY] = canonical_json(meta).encode()
    table = table.replace_schema_metadata(md)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")
