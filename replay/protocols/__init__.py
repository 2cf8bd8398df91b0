"""Protocols as pure graph transforms (registered as ``fastrack.protocols`` entry points).

* ``none`` (:mod:`.notee`): no TEE; host<->GPU copies priced by the model's PCIe lanes.
* ``baseline`` (:mod:`.baseline`): H100 confidential computing as shipped.
* ``fastrack`` (:mod:`.fastrack`): direct GPU TEE communication + parallel authentication +
  decryption overlapped with PCIe; ``fastrack:direct``, ``fastrack:auth``, ``fastrack:overlap``
  apply one fix each on top of the baseline.

The CC data path itself (chunks, bounce slots, stages) is :mod:`.cc`.

Multi-GPU (docs/multi-gpu.md): collectives priced on the model's topology (:mod:`.collectives`);
``ppcie`` (:mod:`.ppcie`); ``baseline`` and ``fastrack`` are complete systems on any number of
GPUs (:mod:`.multigpu`: host path + encrypted GPU-to-GPU messages of :mod:`.p2p`, options
``NAME+batched-meta``/``+keymgmt``, ``cc-multi*`` aliases).
"""

from .base import Protocol
from .kinds import DerivedKind

__all__ = ["Protocol", "DerivedKind"]
