"""A hardware model that defines only what the model interface requires (the abstract members of
``replay.model.HardwareModel``, as docs/extending.md lists them) runs under every installed
protocol: the optional members have defaults a minimal model can rely on.

The model is registered for the test through the ``fastrack.models`` entry-point lookup, as a
third-party package would be.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint
from pathlib import Path

import numpy as np
import pytest

from fastrack_core.errors import ConfigError, PluginError
from replay import plugins
from replay.graph import LaneType
from replay.model import HardwareModel, bytes_ns
from replay.pipeline.run import replay_trace

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT / "traces" / "bert_infer.parquet"  # one rank, kernels and host<->GPU copies

PRESET = """\
[preset]
name = "minimal"
description = "a model with only the required members"

[link]
gb_s = 20.0
gb_s_source = "assumption: a test value"
latency_ns = 1000
latency_ns_source = "assumption: a test value"

[crypto]
cpu_gb_s = 4.0
cpu_gb_s_source = "assumption: a test value"
gpu_gb_s = 100.0
gpu_gb_s_source = "assumption: a test value"
"""


def _f(doc, **meta):
    return field(metadata={"doc": doc, **meta})


@dataclass(frozen=True)
class LinkParams:
    gb_s: float = _f("host link bandwidth, each direction", exclusive_min=0)
    latency_ns: int = _f("host link latency", min=0)


@dataclass(frozen=True)
class CryptoParams:
    cpu_gb_s: float = _f("CPU AES-GCM rate", exclusive_min=0)
    gpu_gb_s: float = _f("GPU copy-engine AES-GCM rate", exclusive_min=0)


@dataclass(frozen=True)
class MinimalParams:
    link: LinkParams
    crypto: CryptoParams


class MinimalModel(HardwareModel):
    """Exactly the abstract members, nothing optional."""

    name = "minimal"
    Params = MinimalParams
    presets_dir: Path  # set by the fixture
    default_preset = "minimal"

    def pcie_ns(self, nbytes, direction):
        return bytes_ns(nbytes, self.p.link.gb_s)

    def pcie_latency_ns(self, direction):
        return int(self.p.link.latency_ns)

    def cpu_encrypt_ns(self, nbytes):
        return bytes_ns(nbytes, self.p.crypto.cpu_gb_s)

    def cpu_decrypt_ns(self, nbytes):
        return bytes_ns(nbytes, self.p.crypto.cpu_gb_s)

    def ce_crypto_ns(self, nbytes):
        return bytes_ns(nbytes, self.p.crypto.gpu_gb_s)

    def auth_ns(self, nbytes, parallel):
        return np.zeros(np.shape(nbytes), np.int64)

    def submit_ns(self, kind):
        return np.full(np.shape(kind), 1000, np.int64)

    @property
    def bounce_slot_bytes(self):
        return 1 << 20

    @property
    def bounce_slots(self):
        return 8

    @property
    def cpu_crypto_threads(self):
        return 1

    def direct_eligible(self, copy_dir, host_mem, nbytes):
        return np.zeros(np.shape(nbytes), bool)

    def lane_specs(self):
        return [(LaneType.PCIE_H2D, "pcie_h2d", 1), (LaneType.PCIE_D2H, "pcie_d2h", 1),
                (LaneType.COPY_ENGINE, "copy_engines", 2), (LaneType.GPU_AUTH, "gpu_auth", 1),
                (LaneType.CPU_CRYPTO, "cpu_crypto", 1)]


@pytest.fixture
def minimal(tmp_path, monkeypatch):
    (tmp_path / "minimal.toml").write_text(PRESET)
    monkeypatch.setattr(MinimalModel, "presets_dir", tmp_path, raising=False)
    mod = sys.modules[__name__]
    monkeypatch.setitem(sys.modules, "fastrack_minimal_model", mod)
    real = plugins._entries

    def entries(group):
        found = dict(real(group))
        if group == plugins.MODELS_GROUP:
            found["minimal"] = EntryPoint(name="minimal", value="fastrack_minimal_model:MinimalModel", group=group)
        return found

    monkeypatch.setattr(plugins, "_entries", entries)
    return "minimal"


def test_the_minimal_model_defines_only_the_abstract_members():
    """The fixture model is minimal: every member it defines is abstract in the interface."""
    own = {n for n in vars(MinimalModel) if not n.startswith("_")} - {"name", "Params", "presets_dir", "default_preset"}
    assert own == set(HardwareModel.__abstractmethods__)


@pytest.mark.parametrize("protocol", plugins.available_protocols())
def test_every_protocol_runs_on_a_minimal_model(minimal, protocol):
    """Where the shipped model replays the trace, so does the minimal one; where a protocol refuses
    the trace's shape (GPU-to-GPU options on one GPU), it refuses it with the same line."""
    try:
        replay_trace(TRACE, protocol)
    except ConfigError as exc:
        with pytest.raises(ConfigError) as info:
            replay_trace(TRACE, protocol, model=minimal)
        assert str(info.value) == str(exc)
        return
    none = replay_trace(TRACE, "none", model=minimal).result.makespan_ns
    rep = replay_trace(TRACE, protocol, model=minimal)
    assert rep.result.makespan_ns > 0
    if protocol != "none":  # every CC protocol encrypts this trace's copies: it can only cost time
        assert rep.result.makespan_ns >= none


def test_a_minimal_model_says_what_a_multi_gpu_system_needs(minimal, tmp_path):
    """Without link prices an encrypted multi-rank system is refused with one PluginError line."""
    from test_build import two_rank_collective
    from tracefactory import write

    path = write(tmp_path / "t.parquet", two_rank_collective())
    with pytest.raises(PluginError, match="prices GPU-to-GPU links") as info:
        replay_trace(path, "baseline", model=minimal)
    assert "\n" not in str(info.value)
