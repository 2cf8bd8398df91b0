"""A tiny fake hardware model ("fake") and protocols ("fake-slow", "fake-fast", and "none" for the
fake model) registered into ``replay.plugins`` for study tests.

Studies need only the plug-in interface (``load_model(name).from_preset(preset, overrides)`` ->
``.preset_name``, ``.params``, ``.digest``; ``load_protocol(name)`` -> ``transform(graph, hw)``;
``available_protocols()``), so these tests do not depend on the real H100 model's numbers.
Real model and protocols keep working: the fakes only answer for their own names (and for
``none`` applied to the fake model).
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
import types

import numpy as np

from fastrack_core.errors import ConfigError, PluginError

DEFAULTS = {
    "pcie": {"bandwidth_gb_s": 32.0, "latency_ns": 500},
    "cpu": {"crypto_gb_s": 4.0, "cores": 4},
    "misc": {"enabled": True, "label": "x"},
}
PRESETS = {"fake-a": {}, "fake-b": {"pcie": {"bandwidth_gb_s": 64.0}}}


class FakeModel:
    def __init__(self, preset_name, params):
        self.preset_name = preset_name
        self.params = params
        self.digest = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()

    @classmethod
    def from_preset(cls, preset=None, overrides=()):
        preset = preset or "fake-a"
        if preset not in PRESETS:
            raise ConfigError(f"unknown preset '{preset}'")
        params = copy.deepcopy(DEFAULTS)
        for sec, vals in PRESETS[preset].items():
            params[sec].update(vals)
        for o in overrides:
            name, _, value = o.partition("=")
            sec, _, key = name.partition(".")
            if sec not in params or key not in params[sec]:
                raise ConfigError(f"--set {name}: unknown parameter")
            old = params[sec][key]
            try:
                if isinstance(old, bool):
                    new = {"true": True, "false": False}[value.lower()]
                else:
                    new = type(old)(value)
            except (KeyError, ValueError):
                raise ConfigError(f"--set {name}={value}: expected a {type(old).__name__}") from None
            params[sec][key] = new
        return cls(preset, params)


def _slow(scale):
    def transform(graph, hw):
        p = hw.params
        extra = graph.bytes.astype(np.float64) * scale * (1 / p["pcie"]["bandwidth_gb_s"] + 1 / p["cpu"]["crypto_gb_s"])
        extra += (graph.bytes > 0) * p["pcie"]["latency_ns"]
        return graph.replace(dur=graph.dur + extra.astype(np.int64))
    return transform


FAKE_PROTOCOLS = {"fake-slow": _slow(1.0), "fake-fast": _slow(0.25)}


def _plugins_module(monkeypatch=None):
    try:
        import replay.plugins as plugins
    except ImportError:  # the real registry is not there yet: a stub that knows nothing
        plugins = types.ModuleType("replay.plugins")

        def load_model(name):
            raise PluginError(f"unknown hardware model '{name}'")

        def load_protocol(name):
            raise PluginError(f"unknown protocol '{name}'")

        plugins.load_model = load_model
        plugins.load_protocol = load_protocol
        plugins.available_protocols = lambda: []
        import replay

        if monkeypatch is not None:
            monkeypatch.setitem(sys.modules, "replay.plugins", plugins)
            monkeypatch.setattr(replay, "plugins", plugins, raising=False)
        else:
            sys.modules["replay.plugins"] = plugins
            replay.plugins = plugins
    return plugins


def patched_functions(plugins):
    orig_model, orig_protocol, orig_available = plugins.load_model, plugins.load_protocol, plugins.available_protocols

    def load_model(name):
        return FakeModel if name == "fake" else orig_model(name)

    def load_protocol(name):
        if name in FAKE_PROTOCOLS:
            return FAKE_PROTOCOLS[name]
        if name == "none":
            try:
                real = orig_protocol(name)
            except Exception:  # noqa: BLE001
                real = None

            def none(graph, hw):
                return graph if isinstance(hw, FakeModel) or real is None else real(graph, hw)
            return none
        return orig_protocol(name)

    def available_protocols():
        return sorted(set(orig_available()) | set(FAKE_PROTOCOLS) | {"none"})

    return {"load_model": load_model, "load_protocol": load_protocol, "available_protocols": available_protocols}


def install(monkeypatch=None):
    """Register the fakes (undone at the end of the test when ``monkeypatch`` is given)."""
    plugins = _plugins_module(monkeypatch)
    if getattr(plugins, "_fake_installed", False):
        return
    for name, fn in patched_functions(plugins).items():
        if monkeypatch is not None:
            monkeypatch.setattr(plugins, name, fn)
        else:
            setattr(plugins, name, fn)
    if monkeypatch is not None:
        monkeypatch.setattr(plugins, "_fake_installed", True, raising=False)
    else:
        plugins._fake_installed = True
