"""Multi-GPU protocols: the host<->GPU path of :mod:`.cc` plus GPU-to-GPU messages of :mod:`.p2p`.

* ``cc-multi``: H100 CC as shipped on several GPUs: the baseline host path, and every collective
  message encrypted by the sender's copy engine into unprotected staging memory, read over PCIe
  by the receiver, decrypted and verified (no peer access under CC). Unmitigated: one CE command
  and one IV/tag read per 2 MiB staging chunk, serial authentication, no pipelining, key
  rotation stalls;
* ``cc-multi:batched-meta``, ``cc-multi:keymgmt``: one mitigation each (see :mod:`.p2p`);
* ``cc-multi:auth``, ``cc-multi:overlap``: Fastrack's fixes 2 and 3 on both paths;
* ``cc-multi:fastrack``: Fastrack's three fixes on the host path, fixes 2 and 3 on GPU-to-GPU;
* ``cc-multi:all``: every mitigation together;
* ``ppcie`` (:mod:`.ppcie`): Protected PCIe mode, NVLink in plaintext.

Bigger DDP buckets, the other mitigation, are an option of the data-parallel what-if
(``replay --data-parallel N --bucket-mb MB``), not a protocol.
"""

from __future__ import annotations

from replay.graph import OpGraph

from .base import Protocol
from .cc import CCOptions, transform_cc
from .p2p import P2POptions, transform_p2p


class CCMultiProtocol(Protocol):
    """Host path (:class:`~.cc.CCOptions`) + encrypted GPU-to-GPU messages (:class:`~.p2p.P2POptions`)."""

    def __init__(self, name: str, description: str, host: CCOptions = CCOptions(), p2p: P2POptions = P2POptions()):
        self.name = name
        self.description = description
        self.host = host
        self.p2p = p2p

    def apply(self, graph: OpGraph, model) -> OpGraph:
        return transform_p2p(transform_cc(graph, model, self.host), model, self.p2p, self.name)

    def parallel_auth_modes(self) -> frozenset[bool]:
        return frozenset({self.host.parallel_auth, self.p2p.parallel_auth})


_FIXES = CCOptions(direct=True, parallel_auth=True, overlap=True)

CC_MULTI = CCMultiProtocol(
    "cc-multi", "H100 CC on several GPUs: baseline host path; every collective message encrypted by the sending "
    "copy engine into host staging, read over PCIe, decrypted and verified by the receiver")
CC_MULTI_BATCHED_META = CCMultiProtocol(
    "cc-multi:batched-meta", "cc-multi + IVs/tags sent and verified in one batch per message",
    p2p=P2POptions(batched_meta=True))
CC_MULTI_KEYMGMT = CCMultiProtocol(
    "cc-multi:keymgmt", "cc-multi + key rotation and IV management off the data path (no stall)",
    p2p=P2POptions(keymgmt=True))
CC_MULTI_AUTH = CCMultiProtocol(
    "cc-multi:auth", "cc-multi + parallel authentication (Fastrack fix 2) on host copies and GPU-to-GPU messages",
    host=CCOptions(parallel_auth=True), p2p=P2POptions(parallel_auth=True))
CC_MULTI_OVERLAP = CCMultiProtocol(
    "cc-multi:overlap", "cc-multi + stages pipelined chunk by chunk (Fastrack fix 3) on both paths",
    host=CCOptions(overlap=True), p2p=P2POptions(overlap=True))
CC_MULTI_FASTRACK = CCMultiProtocol(
    "cc-multi:fastrack", "cc-multi + Fastrack (host path: all three fixes; GPU-to-GPU: parallel authentication "
    "and pipelining)", host=_FIXES, p2p=P2POptions(parallel_auth=True, overlap=True))
CC_MULTI_ALL = CCMultiProtocol(
    "cc-multi:all", "cc-multi with every mitigation: Fastrack fixes, batched IVs/tags, key management off the "
    "data path", host=_FIXES, p2p=P2POptions(batched_meta=True, keymgmt=True, parallel_auth=True, overlap=True))

ALL = (CC_MULTI, CC_MULTI_BATCHED_META, CC_MULTI_KEYMGMT, CC_MULTI_AUTH, CC_MULTI_OVERLAP, CC_MULTI_FASTRACK,
       CC_MULTI_ALL)

__all__ = ["CCMultiProtocol", "CC_MULTI", "CC_MULTI_BATCHED_META", "CC_MULTI_KEYMGMT", "CC_MULTI_AUTH",
           "CC_MULTI_OVERLAP", "CC_MULTI_FASTRACK", "CC_MULTI_ALL", "ALL"]
