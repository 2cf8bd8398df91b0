"""Complete CC systems on any number of GPUs: a host<->GPU path plus encrypted GPU-to-GPU messages.

``baseline`` and ``fastrack`` (and ``fastrack:direct``/``:auth``/``:overlap``) are registered
from here: each is the single-GPU protocol of the same name (:mod:`.baseline`, :mod:`.fastrack`:
host copies, launches) composed with the encrypted GPU-to-GPU path of :mod:`.p2p`, which acts only
on a graph with collectives (a multi-rank trace, or ``--data-parallel N`` with N > 1). On a
single-GPU trace the system is exactly its host protocol.

The GPU-to-GPU side follows the host side's Fastrack fixes, so one name means one system:

====================  ==================================  =========================================
system                host<->GPU (docs/protocols.md)      GPU-to-GPU messages (:mod:`.p2p`)
====================  ==================================  =========================================
``baseline``          H100 CC as shipped                  CE encrypt -> link -> CE decrypt+verify,
                                                          each stage after the whole message
``fastrack:direct``   + direct communication              as baseline (fix 1 does not apply)
``fastrack:auth``     + parallel authentication           + crypto split over the copy engines
``fastrack:overlap``  + pipelining                        + stages pipelined chunk by chunk
``fastrack``          all three fixes                     split + pipelined
``ppcie``             H100 CC as shipped                  plaintext over NVLink (:mod:`.ppcie`)
====================  ==================================  =========================================

Mitigations of the GPU-to-GPU path are *options* of a system, written ``NAME+OPTION[+OPTION]``
(:func:`replay.plugins.load_protocol` parses them): ``batched-meta`` (one push and one host
synchronisation per message and side, IVs/tags inside the data transfer) and ``keymgmt`` (key
rotation off the data path). An option on a graph without collectives is refused
(:class:`~fastrack_core.errors.ConfigError`: nothing to apply it to).

The names of the earlier ``cc-multi`` family stay as aliases (:data:`ALIASES`).
"""

from __future__ import annotations

from dataclasses import replace

from fastrack_core.errors import ConfigError, PluginError
from replay.graph import OpGraph
from replay.plugins import ProtocolAlias

from .base import Protocol
from .baseline import BASELINE as _HOST_BASELINE
from .fastrack import FASTRACK as _HOST_FASTRACK
from .fastrack import FASTRACK_AUTH as _HOST_FASTRACK_AUTH
from .fastrack import FASTRACK_DIRECT as _HOST_FASTRACK_DIRECT
from .fastrack import FASTRACK_OVERLAP as _HOST_FASTRACK_OVERLAP
from .featuresoff import CC_OFF, features_off
from .p2p import P2POptions, has_collectives, transform_p2p

# option name -> (P2POptions field it sets, what it does)
OPTIONS = {
    "batched-meta": ("batched_meta", "one push and one host synchronisation per GPU-to-GPU message and side; "
                     "IVs/tags inside the data transfer"),
    "keymgmt": ("keymgmt", "GPU-to-GPU key rotation off the data path (next key installed ahead): no stall"),
}


class System(Protocol):
    """``host`` (a single-GPU protocol) followed by :func:`.p2p.transform_p2p` with ``p2p``, on the
    graph without the features CC switches off (:data:`.featuresoff.CC_OFF`)."""

    features_off = CC_OFF

    def __init__(self, host: Protocol, p2p: P2POptions, description: str, name: str | None = None,
                 chosen: tuple[str, ...] = ()):
        self.host = host
        self.p2p = p2p
        self.chosen = chosen
        self.name = name or "+".join((host.name, *chosen))
        self.base_description = description
        self.description = "; ".join([description, *(OPTIONS[nm][1] for nm in chosen)])

    def apply(self, graph: OpGraph, model) -> OpGraph:
        if self.chosen and not has_collectives(graph):
            raise ConfigError(
                f"--protocol {self.name}: option {'+'.join(self.chosen)} applies to GPU-to-GPU messages and this "
                "trace has no collectives (one GPU); replay a multi-rank trace or add --data-parallel N (N > 1)")
        graph = features_off(graph, model, self.features_off)  # what CC switches off (.featuresoff)
        return transform_p2p(self.host.apply(graph, model), model, self.p2p, self.name)

    def with_options(self, names: tuple[str, ...]) -> "System":
        """This system with the GPU-to-GPU mitigations ``names`` (keys of :data:`OPTIONS`)."""
        p2p, chosen = self.p2p, list(self.chosen)
        for nm in names:
            if nm not in OPTIONS:
                raise PluginError(f"protocol '{self.name}' has no option '{nm}'; options: {', '.join(OPTIONS)}")
            if nm not in chosen:
                chosen.append(nm)
                p2p = replace(p2p, **{OPTIONS[nm][0]: True})
        return System(self.host, p2p, self.base_description, chosen=tuple(sorted(chosen)))

    @staticmethod
    def available_options() -> dict[str, str]:
        return {k: v[1] for k, v in OPTIONS.items()}

    def parallel_auth_modes(self) -> frozenset[bool]:
        return self.host.parallel_auth_modes()  # GPU-to-GPU messages have no separate authentication


_G2G = "on several GPUs, every collective message CE-encrypted, sent over NVLink and CE-decrypted+verified"

BASELINE = System(_HOST_BASELINE, P2POptions(), f"{_HOST_BASELINE.description}; {_G2G}, unpipelined")
FASTRACK = System(_HOST_FASTRACK, P2POptions(overlap=True, split=True),
                  f"{_HOST_FASTRACK.description}; {_G2G}, pipelined and split over the copy engines")
FASTRACK_DIRECT = System(_HOST_FASTRACK_DIRECT, P2POptions(), f"{_HOST_FASTRACK_DIRECT.description}; {_G2G}")
FASTRACK_AUTH = System(_HOST_FASTRACK_AUTH, P2POptions(split=True),
                       f"{_HOST_FASTRACK_AUTH.description}; {_G2G}, split over the copy engines")
FASTRACK_OVERLAP = System(_HOST_FASTRACK_OVERLAP, P2POptions(overlap=True),
                          f"{_HOST_FASTRACK_OVERLAP.description}; {_G2G}, pipelined")

SYSTEMS = (BASELINE, FASTRACK, FASTRACK_DIRECT, FASTRACK_AUTH, FASTRACK_OVERLAP)

# the earlier names (docs/multi-gpu.md, alias table)
ALIASES = {
    "cc-multi": "baseline",
    "cc-multi:batched-meta": "baseline+batched-meta",
    "cc-multi:keymgmt": "baseline+keymgmt",
    "cc-multi:auth": "fastrack:auth",
    "cc-multi:overlap": "fastrack:overlap",
    "cc-multi:fastrack": "fastrack",
    "cc-multi:all": "fastrack+batched-meta+keymgmt",
}
CC_MULTI = ProtocolAlias(ALIASES["cc-multi"])
CC_MULTI_BATCHED_META = ProtocolAlias(ALIASES["cc-multi:batched-meta"])
CC_MULTI_KEYMGMT = ProtocolAlias(ALIASES["cc-multi:keymgmt"])
CC_MULTI_AUTH = ProtocolAlias(ALIASES["cc-multi:auth"])
CC_MULTI_OVERLAP = ProtocolAlias(ALIASES["cc-multi:overlap"])
CC_MULTI_FASTRACK = ProtocolAlias(ALIASES["cc-multi:fastrack"])
CC_MULTI_ALL = ProtocolAlias(ALIASES["cc-multi:all"])

__all__ = ["System", "OPTIONS", "ALIASES", "SYSTEMS", "BASELINE", "FASTRACK", "FASTRACK_DIRECT", "FASTRACK_AUTH",
           "FASTRACK_OVERLAP", "CC_MULTI", "CC_MULTI_BATCHED_META", "CC_MULTI_KEYMGMT", "CC_MULTI_AUTH",
           "CC_MULTI_OVERLAP", "CC_MULTI_FASTRACK", "CC_MULTI_ALL"]
