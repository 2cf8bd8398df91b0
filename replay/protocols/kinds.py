"""Codes, labels and categories of the nodes protocol transforms derive (codes >= 16).

Trace op kinds (:class:`fastrack.schema.OpKind`) use 0..15; every derived node gets one of these
codes, its label in ``OpGraph.kind_names`` and a :class:`~replay.graph.Category`.
"""

from __future__ import annotations

import enum

from replay.graph import Category


class DerivedKind(enum.IntEnum):
    CC_SUBMIT = 16  # CPU encrypts/signs the command submission of launched GPU op(s) (host lane)
    CPU_ENCRYPT = 17  # CPU AES-GCM of one chunk into a bounce slot (H2D)
    CPU_DECRYPT = 18  # CPU AES-GCM decrypt + tag check of one chunk out of a bounce slot (D2H)
    PCIE = 19  # one chunk (or a whole copy without CC) on the PCIe link of its direction
    CE_DECRYPT = 20  # copy engine decrypts one chunk into protected GPU memory (H2D)
    CE_ENCRYPT = 21  # copy engine encrypts one chunk out of protected GPU memory (D2H)
    GPU_AUTH = 22  # GPU authentication: verify (H2D) or compute (D2H) the tag of one chunk
    SYNC_WAIT = 23  # the calling thread blocks until the copy and earlier stream work finish
    # 24 was bounce_release (ring-order slot markers); bounce slots are now pool holds (.bounce)
    # GPU-to-GPU (multi-GPU protocols, replay/protocols/p2p.py)
    P2P_SUBMIT = 25  # CPU pushes an encrypted copy-engine command for a GPU-to-GPU message (proxy lane)
    P2P_META = 26  # receiver reads a chunk's IVs and tags from the staging area before decrypting it
    KEY_ROTATION = 27  # share of a key-rotation stall charged to a message (copy engine idle)

    @property
    def label(self) -> str:
        return self.name.lower()


CATEGORY = {
    DerivedKind.CC_SUBMIT: Category.LAUNCH,
    DerivedKind.CPU_ENCRYPT: Category.CPU_CRYPTO,
    DerivedKind.CPU_DECRYPT: Category.CPU_CRYPTO,
    DerivedKind.PCIE: Category.PCIE,
    DerivedKind.CE_DECRYPT: Category.GPU_CRYPTO,
    DerivedKind.CE_ENCRYPT: Category.GPU_CRYPTO,
    DerivedKind.GPU_AUTH: Category.GPU_CRYPTO,
    DerivedKind.SYNC_WAIT: Category.SYNC_WAIT,
    DerivedKind.P2P_SUBMIT: Category.LAUNCH,
    DerivedKind.P2P_META: Category.PCIE,
    DerivedKind.KEY_ROTATION: Category.GPU_CRYPTO,
}

KIND_NAMES = {int(k): k.label for k in DerivedKind}
