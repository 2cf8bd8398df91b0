"""The hardware-model plug-in interface: what a protocol transform may ask a model.

Transforms decide what work exists; the hardware model prices it; the engine schedules it. A
model is constructed from a preset (a name of a TOML file shipped with the model, or a path)
plus ``--set section.key=value`` overrides, validated by :mod:`replay.config`, and exposes:

* identity: :attr:`~HardwareModel.preset_name`, :attr:`~HardwareModel.params` (nested dict of
  every value), :attr:`~HardwareModel.sources`, :attr:`~HardwareModel.digest` (sha256 of the
  canonical parameters: same digest, same prices);
* prices, in integer nanoseconds rounded up, vectorised (each takes an int or an int64 array of
  byte counts and returns an int64 array of the same shape): PCIe occupancy and latency per
  direction, CPU AES-GCM encrypt/decrypt, copy-engine AES-GCM, GPU authentication (serial or
  parallel), encrypted command submission per op kind;
* the bounce-buffer pool geometry (slot size, slot count) and how many CPU threads do crypto;
* which transfers carry data that is already encrypted end to end (``direct_eligible``);
* :meth:`~HardwareModel.add_lanes`: the resource lanes (PCIe per direction, copy engines, GPU
  authentication, CPU crypto workers) for every rank of a graph, created once (idempotent);
* optionally, the multi-GPU half: GPU-to-GPU link prices (:meth:`~HardwareModel.link_ns`,
  :meth:`~HardwareModel.link_latency_ns`, :meth:`~HardwareModel.link_gb_s`), the default
  all-reduce algorithm, the key-rotation stall of the secure channels and the crypto page. A
  model that overrides the three link prices has :attr:`~HardwareModel.prices_links`; one that
  does not replays collectives with their traced durations, and the encrypted multi-GPU
  protocols refuse it.

A third-party model (say, Blackwell) subclasses :class:`HardwareModel` in its own package, ships
TOML presets next to it and registers the class under the ``fastrack.models`` entry-point group;
``docs/extending.md`` walks through it.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, ClassVar, Iterable, Mapping

import numpy as np

from fastrack_core.errors import PluginError
from fastrack_core.schema import CopyDir, HostMem, OpKind
from replay import config
from replay.graph import NO_LANE, LaneType, OpGraph

NsArray = np.ndarray  # int64 ns


# One AES-GCM IV and one 16 B tag per 4 KiB page of encrypted staging memory: the NVIDIA driver's
# format (open-gpu-kernel-modules, kernel-open/nvidia-uvm/uvm_conf_computing.h); the default of
# HardwareModel.crypto_page_bytes.
CRYPTO_PAGE_BYTES = 4096


def bytes_ns(nbytes: Any, gb_s: float) -> NsArray:
    """Time to move ``nbytes`` at ``gb_s`` GB/s (1 GB/s = 1 byte/ns), rounded up, exact in integers.

    The rate is taken as the decimal fraction it was written as (``3.46`` is 346/100), so
    ``bytes_ns(1_000_000, 1.0) == 1_000_000`` with no floating-point surprises.
    """
    if gb_s <= 0:
        raise ValueError(f"rate must be positive, got {gb_s} GB/s")
    fr = Fraction(str(float(gb_s))).limit_denominator(10_000)
    b = np.asarray(nbytes, dtype=np.int64)
    num, den = np.int64(fr.numerator), np.int64(fr.denominator)
    return -((-(b * den)) // num)  # ceil(b * den / num)


def ceil_div(a: Any, b: int) -> np.ndarray:
    a = np.asarray(a, dtype=np.int64)
    return -((-a) // np.int64(b))


@dataclass(frozen=True)
class DirectParams:
    """Which transfers qualify for direct GPU TEE communication (a reusable preset section).

    A qualifying H2D copy carries data that arrived already encrypted (from a client or from
    storage), so Fastrack forwards the ciphertext to the GPU without CPU re-encryption; a
    qualifying D2H copy leaves the machine encrypted, so the CPU does not decrypt it.
    """

    h2d: str = field(metadata={"doc": "H2D copies that qualify: all | pinned | pageable | none",
                               "choices": ("all", "pinned", "pageable", "none")})
    d2h: str = field(metadata={"doc": "D2H copies that qualify: all | pinned | pageable | none",
                               "choices": ("all", "pinned", "pageable", "none")})
    min_bytes: int = field(metadata={"doc": "smaller copies never qualify", "min": 0})


def direct_rule(rule: DirectParams, copy_dir: Any, host_mem: Any, nbytes: Any) -> np.ndarray:
    """Vectorised :class:`DirectParams` rule: bool per copy."""
    copy_dir = np.asarray(copy_dir)
    host_mem = np.asarray(host_mem)
    nbytes = np.asarray(nbytes, dtype=np.int64)
    out = np.zeros(copy_dir.shape, bool)
    for direction, setting in ((CopyDir.H2D, rule.h2d), (CopyDir.D2H, rule.d2h)):
        if setting == "none":
            continue
        m = copy_dir == direction
        if setting == "pinned":
            m &= host_mem == HostMem.PINNED
        elif setting == "pageable":
            m &= host_mem != HostMem.PINNED  # unknown host memory counts as pageable
        out |= m
    return out & (nbytes >= rule.min_bytes)


class HardwareModel(abc.ABC):
    """Base class of hardware models. Subclasses set the class attributes and the pricing methods.

    Class attributes:
        name: the registry name (the entry-point name, e.g. ``"h100"``).
        Params: root frozen dataclass of the parameters (see :mod:`replay.config`).
        presets_dir: directory of the model's ``*.toml`` presets.
        default_preset: preset used when none is given.
    """

    name: ClassVar[str] = ""
    Params: ClassVar[type]
    presets_dir: ClassVar[Path]
    default_preset: ClassVar[str]
    #: The model's *rule* methods: pure functions of their arguments and of the parameters they
    #: read, which the protocol transforms call to decide structure (which copies qualify for the
    #: direct path). A range study records their calls in the preset's transform and, at a point
    #: that moves only parameters the transform read inside them, compares their answers instead of
    #: transforming again (replay/pipeline/ranges.py). A model whose rule reads anything else than
    #: its arguments and its parameters must leave it out.
    rule_methods: ClassVar[tuple[str, ...]] = ("direct_eligible",)

    def __init__(self, preset: config.Preset):
        self._preset = preset
        self.p = preset.values  # typed access: self.p.pcie.latency_ns

    # ----------------------------------------------------------------------------- construction
    @classmethod
    def from_preset(cls, preset: str | Path | None = None,
                    overrides: Iterable[str] | Mapping[str, Any] = ()) -> "HardwareModel":
        """Load ``preset`` (a name from :meth:`available_presets` or a path to a TOML file; ``None``
        for the default) and apply ``--set`` overrides (``["pcie.latency_ns=900", ...]``)."""
        path = config.resolve_preset_path(preset, cls.presets_dir, cls.default_preset)
        return cls(config.load_preset(cls.Params, path, overrides, model=cls.name))

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], overrides: Iterable[str] | Mapping[str, Any] = (),
                  name: str = "custom") -> "HardwareModel":
        """Build from an in-memory mapping shaped like a preset file (tests, sweeps)."""
        return cls(config.load_preset_dict(cls.Params, raw, overrides, label=name))

    @classmethod
    def available_presets(cls) -> list[str]:
        return config.available_presets(cls.presets_dir)

    # --------------------------------------------------------------------------------- identity
    @property
    def preset_name(self) -> str:
        return self._preset.name

    @property
    def preset_description(self) -> str:
        return self._preset.description

    @property
    def preset_path(self) -> str:
        return self._preset.path

    @property
    def params(self) -> dict[str, dict[str, Any]]:
        """Every parameter value, nested by table (a fresh copy)."""
        return self._preset.as_dict()

    @property
    def sources(self) -> dict[str, dict[str, str]]:
        """Where every value comes from (a fresh copy)."""
        return {t: dict(v) for t, v in self._preset.sources.items()}

    @property
    def digest(self) -> str:
        """sha256 (hex) of the canonical JSON of ``{"model": name, "params": params}``."""
        blob = json.dumps({"model": self.name, "params": self.params}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()

    def with_overrides(self, overrides: Iterable[str] | Mapping[str, Any]) -> "HardwareModel":
        """A new model of the same preset with more overrides applied (for sweeps)."""
        raw = {t: dict(v) for t, v in self.params.items()}
        for t, srcs in self._preset.sources.items():
            for k, s in srcs.items():
                raw[t][k + config.SOURCE_SUFFIX] = s
        raw[config.PRESET_TABLE] = {"name": self.preset_name, "description": self._preset.description}
        new = config.load_preset_dict(self.Params, raw, overrides, label=self.preset_name)
        return type(self)(dataclasses.replace(new, path=self.preset_path))

    # ---------------------------------------------------------------------------------- pricing
    @abc.abstractmethod
    def pcie_ns(self, nbytes: Any, direction: CopyDir) -> NsArray:
        """Time the host<->GPU link is occupied moving ``nbytes`` in ``direction`` (no latency)."""

    @abc.abstractmethod
    def pcie_latency_ns(self, direction: CopyDir) -> int:
        """One-way latency of the link, paid once per transfer stage (not occupying the link)."""

    def pcie_time_ns(self, nbytes: Any, direction: CopyDir) -> NsArray:
        """End-to-end time of one transfer on an idle link: latency + occupancy."""
        return self.pcie_ns(nbytes, direction) + np.int64(self.pcie_latency_ns(direction))

    @abc.abstractmethod
    def cpu_encrypt_ns(self, nbytes: Any) -> NsArray:
        """AES-GCM encryption (and tagging) of ``nbytes`` by one CPU thread into a bounce buffer."""

    @abc.abstractmethod
    def cpu_decrypt_ns(self, nbytes: Any) -> NsArray:
        """AES-GCM decryption and tag check of ``nbytes`` by one CPU thread out of a bounce buffer."""

    @abc.abstractmethod
    def ce_crypto_ns(self, nbytes: Any) -> NsArray:
        """AES-GCM decrypt (H2D) or encrypt (D2H) of ``nbytes`` by one GPU copy engine."""

    @abc.abstractmethod
    def auth_ns(self, nbytes: Any, parallel: bool) -> NsArray:
        """GPU-side authentication (GHASH tag) of ``nbytes``: serial chain or parallelised."""

    @abc.abstractmethod
    def submit_ns(self, kind: Any) -> NsArray:
        """Extra CPU time to encrypt/sign the command submission of one GPU op under CC, per
        :class:`~fastrack_core.schema.OpKind` code (0 for kinds that submit nothing)."""

    @property
    @abc.abstractmethod
    def bounce_slot_bytes(self) -> int:
        """Size of one bounce-buffer (staging) slot; transfers are chunked by it."""

    @property
    @abc.abstractmethod
    def bounce_slots(self) -> int:
        """Slots the per-rank bounce-buffer pool starts with."""

    @property
    def bounce_max_slots(self) -> int:
        """Slots the pool may grow to (doubling when a chunk finds every slot in use); beyond
        that, chunks wait for a slot to be freed (back pressure). Default: no growth."""
        return self.bounce_slots

    @property
    @abc.abstractmethod
    def cpu_crypto_threads(self) -> int:
        """CPU threads that encrypt/decrypt one transfer: 1 = the calling thread does it inline
        (on its host lane); more = a worker pool (the rank's CPU_CRYPTO lane) while the caller waits."""

    @abc.abstractmethod
    def direct_eligible(self, copy_dir: Any, host_mem: Any, nbytes: Any) -> np.ndarray:
        """bool per copy: does it carry data already encrypted end to end (see :class:`DirectParams`)?"""

    # ------------------------------------------------------------------- GPU-to-GPU (multi-GPU)
    # Optional: a single-GPU model leaves these alone. Override the three link prices together;
    # the encrypted multi-GPU protocols also need key_rotation_ns (crypto_page_bytes has a default).

    @property
    def prices_links(self) -> bool:
        """Does this model price GPU-to-GPU links (does it override every one of :data:`LINK_METHODS`)?"""
        return all(getattr(type(self), m) is not getattr(HardwareModel, m) for m in LINK_METHODS)

    def link_gb_s(self, n_gpus: int) -> float:
        """Bandwidth per GPU and direction of the bottleneck link of a ring of ``n_gpus`` GPUs (GB/s)."""
        raise self._not_priced("link_gb_s")

    def link_latency_ns(self, n_gpus: int) -> int:
        """Latency of one step (one hop) of a ring of ``n_gpus`` GPUs."""
        raise self._not_priced("link_latency_ns")

    def link_ns(self, nbytes: Any, n_gpus: int) -> NsArray:
        """Plaintext link occupancy of ``nbytes`` sent by one GPU of a ring of ``n_gpus`` (no latency)."""
        raise self._not_priced("link_ns")

    @property
    def default_allreduce(self) -> str:
        """All-reduce algorithm (``ring`` or ``tree``) of collectives whose kernel name does not say."""
        return "ring"

    def key_rotation_ns(self, nbytes: Any, invocations: Any) -> NsArray:
        """Expected key-rotation stall charged to a GPU-to-GPU message of ``nbytes`` encrypted in
        ``invocations`` AES-GCM operations (one IV each)."""
        raise self._not_priced("key_rotation_ns")

    @property
    def crypto_page_bytes(self) -> int:
        """Bytes per AES-GCM page of encrypted staging (host<->GPU and GPU-to-GPU): one IV and one
        tag each. Default :data:`CRYPTO_PAGE_BYTES`, the NVIDIA driver's page; a model whose
        hardware encrypts in other units overrides it."""
        return CRYPTO_PAGE_BYTES

    def _not_priced(self, what: str) -> PluginError:
        return PluginError(f"hardware model '{self.name}' does not price GPU-to-GPU communication ({what})")

    # ------------------------------------------------------------------------------------ lanes
    @abc.abstractmethod
    def lane_specs(self) -> list[tuple[LaneType, str, int]]:
        """The resource lanes every rank gets: (type, short name, number of servers)."""

    def add_lanes(self, graph: OpGraph) -> OpGraph:
        """A graph with this model's resource lanes for every rank (lanes that exist are kept)."""
        lanes = graph.lanes
        ranks = np.unique(graph.rank).astype(np.int64)
        specs = self.lane_specs()
        # missing[i, j]: rank i lacks the lane of spec j; added rank by rank, spec by spec (the
        # lane order one add per lane would give), in one copy of the lane arrays
        missing = np.stack([lanes.find_many(ranks, typ, 0) == NO_LANE for typ, _, _ in specs], axis=1) \
            if specs else np.zeros((ranks.size, 0), bool)
        ri, sj = np.nonzero(missing)
        if ri.size == 0:
            return graph
        # (per-lane columns by indexing the specs' own: ten or so lanes per rank, 100,000 on 10,000 ranks)
        rank_names = [f"rank{r}/" for r in ranks.tolist()]
        spec_names = [name for _, name, _ in specs]
        lanes, _ = lanes.extend(ranks[ri], np.array([int(t) for t, _, _ in specs], np.int64)[sj], 0,
                                [rank_names[i] + spec_names[j] for i, j in zip(ri.tolist(), sj.tolist())],
                                np.array([int(n) for _, _, n in specs], np.int64)[sj])
        return graph.replace(lanes=lanes)

    @staticmethod
    def lane_index(graph: OpGraph, ranks: Any, typ: LaneType) -> np.ndarray:
        """Lane index of resource lane ``typ`` for each rank in ``ranks`` (NO_LANE where missing)."""
        return graph.lanes.find_many(ranks, typ, 0)

    def describe(self) -> list[tuple[str, str, Any, str]]:
        """(table, key, value, source) for every parameter, in declaration order."""
        rows = []
        params, sources = self.params, self._preset.sources
        for table, body in params.items():
            for key, value in body.items():
                rows.append((table, key, value, sources[table][key]))
        return rows


SUBMITTING_KINDS = (OpKind.KERNEL, OpKind.MEMCPY, OpKind.MEMSET, OpKind.COLLECTIVE)
# The GPU-to-GPU link prices a multi-GPU model overrides (see HardwareModel.prices_links).
LINK_METHODS = ("link_gb_s", "link_latency_ns", "link_ns")

__all__ = ["HardwareModel", "DirectParams", "direct_rule", "bytes_ns", "ceil_div", "SUBMITTING_KINDS", "LINK_METHODS"]
