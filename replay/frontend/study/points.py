"""Planning a study: resolve every point against the model and give it its key.

A point is (trace, protocol, preset, parameter overrides); its **key** is a SHA-256 over (trace
content digest, protocol, model, preset name and digest, every resolved model parameter value),
so it names what was computed, not how it was spelled (plus the ``scale.KIND`` what-if factors when a
study sweeps them). For every (trace, preset, parameters) the
``none`` protocol is added when missing, so that every row has its slowdown. The study
*fingerprint* is a digest of the model, the tool version and the sorted set of point keys.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import itertools
import json
import os
from typing import Any, Iterable, Iterator, Mapping

from fastrack_core.version import __version__
from fastrack_core.errors import ConfigError, PluginError, closest, shown
from replay.names import CAPTURED, NONE
from replay.frontend.study.spec import StudySpec, flatten, override_text

SCALE_PREFIX = "scale."  # ``scale.KIND`` axes: what-if duration factors (replay.whatif.scale), not model parameters


@dataclasses.dataclass(frozen=True)
class Resolved:
    preset: str
    digest: str  # the model's digest of every parameter
    flat: dict[str, Any]  # section.key -> value
    params_key: str  # our canonical digest of ``flat``


@dataclasses.dataclass
class Point:
    key: str
    trace: str  # as given
    trace_abs: str
    trace_sha: str
    protocol: str
    model: str
    preset_arg: str | None
    overrides: tuple[str, ...]
    resolved: Resolved
    preset_digest: str
    none_key: str | None = None
    scales: tuple[tuple[str, float], ...] = ()  # what-if duration factors (``scale.KIND`` axes)

    def task(self) -> tuple:
        """What a worker needs (small, picklable)."""
        return (self.key, self.trace_abs, self.trace_sha, self.protocol, self.model, self.preset_arg, self.overrides,
                self.resolved.digest, self.scales)


@dataclasses.dataclass
class Plan:
    points: list[Point]
    fingerprint: str
    swept: list[str]  # parameter columns varied by the study
    model: str


def file_sha256(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except FileNotFoundError:
        raise ConfigError("no such trace file", path=str(path)) from None
    except IsADirectoryError:
        raise ConfigError("is a directory, expected a trace file", path=str(path)) from None
    return h.hexdigest()


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def digest(obj: Any) -> str:
    """SHA-256 of :func:`canonical_json` of ``obj``."""
    return hashlib.sha256(canonical_json(obj).encode()).hexdigest()


class ModelResolver:
    """Resolves (preset, overrides) through the model plug-in, once per distinct combination."""

    def __init__(self, model: str):
        from replay.plugins import load_model

        self.model = model
        self.cls = load_model(model)
        self._cache: dict[tuple, Resolved] = {}

    def __call__(self, preset: str | None, overrides: tuple[str, ...] = ()) -> Resolved:
        k = (preset, overrides)
        r = self._cache.get(k)
        if r is None:
            hw = self.cls.from_preset(preset, list(overrides))
            flat = flatten(hw.params)
            r = Resolved(preset=str(hw.preset_name), digest=str(hw.digest), flat=flat, params_key=digest(flat))
            self._cache[k] = r
        return r

    def check_names(self, names: Iterable[str], preset: str | None) -> None:
        known = self(preset).flat
        for name in names:
            if name not in known:
                near = difflib.get_close_matches(name, list(known), n=1)
                hint = f"; did you mean {near[0]}?" if near else f"; known: {', '.join(sorted(known)[:12])}..."
                raise ConfigError(f"unknown parameter {shown(name)} for model {self.model} "
                                  f"(preset {self(preset).preset}){hint}")


def check_protocols(protocols: Iterable[str]) -> set[str]:
    """Raise PluginError for an unknown protocol; return the available ones."""
    from replay import plugins

    available = set(plugins.available_protocols())
    for p in protocols:
        if p != CAPTURED and p.split("+")[0].strip() not in available:  # NAME+OPTION: options checked on load
            raise PluginError(f"unknown protocol {shown(p)}{closest(p, available | {CAPTURED})} (available: {', '.join(sorted(available | {CAPTURED}))})")
    return available


def _expand(assignment: Mapping[str, Any]) -> dict[str, Any]:
    """Linked parameters: 'a.x+b.y' = v sets both a.x and b.y to v."""
    out: dict[str, Any] = {}
    for name, v in assignment.items():
        for part in (name.split("+") if not name.startswith("@") else [name]):
            out[part.strip()] = v
    return out


def _assignments(spec: StudySpec) -> Iterator[dict[str, Any]]:
    if spec.points is not None:
        for p in spec.points:
            yield _expand(p)
        return
    names = list(spec.grid)
    for combo in itertools.product(*(spec.grid[n] for n in names)):
        yield _expand(dict(zip(names, combo)))


def split_scales(params: Mapping[str, Any]) -> tuple[dict[str, Any], tuple[tuple[str, float], ...]]:
    """Model parameters, and the what-if ``scale.KIND`` axes as sorted checked (kind, factor) pairs."""
    from replay.whatif.scale import check_factor

    model = {k: v for k, v in params.items() if not k.startswith(SCALE_PREFIX)}
    scales = []
    for k, v in params.items():
        if k.startswith(SCALE_PREFIX):
            kind = k[len(SCALE_PREFIX):]
            try:
                v = float(v)
            except (TypeError, ValueError):
                raise ConfigError(f"{k}: factor must be a number, got a {type(v).__name__}") from None
            scales.append((kind, check_factor(kind, v, k)))
    return model, tuple(sorted(scales))


def make_point(resolver: ModelResolver, trace: str, sha: str, protocol: str, preset: str | None,
               overrides: tuple[str, ...], none_available: bool = True,
               scales: tuple[tuple[str, float], ...] = ()) -> Point:
    """One keyed point; ``overrides`` in canonical (sorted) order."""
    base = resolver(preset)
    res = resolver(preset, overrides)
    common = dict(trace_sha=sha, model=resolver.model, preset=res.preset, preset_digest=base.digest,
                  params=res.params_key)
    if scales:
        common["scales"] = [list(s) for s in scales]
    none_key = digest(common | {"protocol": NONE}) if none_available and protocol != CAPTURED else None
    return Point(key=digest(common | {"protocol": protocol}), trace=trace, trace_abs=os.path.abspath(trace),
                 trace_sha=sha, protocol=protocol, model=resolver.model, preset_arg=preset, overrides=overrides,
                 resolved=res, preset_digest=base.digest, none_key=none_key, scales=scales)


def _check_spec(spec: StudySpec) -> None:
    if not spec.traces and not (spec.points and any("@trace" in p for p in spec.points)):
        raise ConfigError("no trace given: name one or more trace files (or [study] traces in the study file)")
    if not spec.protocols:
        raise ConfigError("no protocol given: use --protocols none,baseline,fastrack")
    for name, values in spec.grid.items():
        if not values:
            raise ConfigError(f"--set {name}: empty value list")


def plan_study(spec: StudySpec, trace_digests: dict[str, str] | None = None) -> Plan:
    """Enumerate, validate and key every point of the study (including added ``none`` points)."""
    _check_spec(spec)
    resolver = ModelResolver(spec.model)
    pinned_protocols = {p for a in spec.points or [] for p in a.get("@protocol", [])}
    available = check_protocols([*spec.protocols, *pinned_protocols])
    add_none = spec.add_none and NONE in available
    digests = dict(trace_digests or {})

    def digest_of(t: str) -> str:
        if t not in digests:
            digests[t] = file_sha256(t)
        return digests[t]

    points: dict[str, Point] = {}
    param_names: set[str] = set()
    for a in _assignments(spec):
        params, scales = split_scales({k: v for k, v in a.items() if not k.startswith("@")})
        param_names.update(params)
        param_names.update(SCALE_PREFIX + k for k, _ in scales)
        overrides = tuple(sorted(override_text(k, v) for k, v in params.items()))
        for trace in a.get("@trace", spec.traces):
            sha = digest_of(trace)
            for preset in a.get("@preset", spec.presets):
                resolver.check_names(params, preset)
                protocols = list(a.get("@protocol", spec.protocols))
                if add_none and NONE not in protocols:
                    protocols.append(NONE)
                for protocol in protocols:
                    pt = make_point(resolver, trace, sha, protocol, preset, overrides, NONE in available, scales)
                    points.setdefault(pt.key, pt)
    if not points:
        raise ConfigError("the study has no points")
    plist = list(points.values())
    # Run points of one trace together (worker graph caches), trace order as given.
    order = {t: i for i, t in enumerate(dict.fromkeys(p.trace_sha for p in plist))}
    plist.sort(key=lambda p: order[p.trace_sha])
    fingerprint = digest({"model": spec.model, "version": __version__, "keys": sorted(points)})
    swept = sorted(n for n in param_names)
    return Plan(points=plist, fingerprint=fingerprint, swept=swept, model=spec.model)
