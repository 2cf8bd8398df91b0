"""Codes, labels and categories of the nodes protocol transforms derive (codes >= 16).

Trace op kinds (:class:`fastrack_core.schema.OpKind`) use 0..15; every derived node gets one of these
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
    CE_DECRYPT = 20  # one CE secure copy: reads a chunk's ciphertext over PCIe, decrypts and verifies its tag (H2D)
    CE_ENCRYPT = 21  # one CE secure copy: encrypts and tags a chunk, writing it over PCIe (D2H)
    GPU_AUTH = 22  # separate GPU authentication kernel (Fastrack-paper emulation, optional [auth]; not on the shipped H100)
    SYNC_WAIT = 23  # the calling thread blocks until the copy and earlier stream work finish (also, 0 ns: until it
    #                 has the bounce slot a chunk's encryption fills, where that encryption locks a shared channel)
    # 24 was bounce_release (ring-order slot markers); bounce slots are now pool holds (.bounce)
    # GPU-to-GPU (multi-GPU protocols, replay/protocols/p2p.py)
    P2P_SUBMIT = 25  # CPU pushes an encrypted copy-engine command for a GPU-to-GPU message (proxy lane)
    P2P_META = 26  # a chunk's IVs and tags sent over the GPU-to-GPU link on their own (unbatched metadata)
    KEY_ROTATION = 27  # share of a key-rotation stall charged to a message (copy engine idle)
    HOST_STAGING = 28  # the calling thread copies pageable memory to/from the driver's pinned staging buffer
    P2P_LINK = 29  # one chunk of ciphertext on the sender's GPU-to-GPU link (NVLink or PCIe peer-to-peer)
    P2P_SYNC = 30  # host observes a CE operation's completion (decrypts an encrypted semaphore) before the next step
    CPU_RECRYPT = 31  # the extra CPU pass over client-encrypted data on the baseline (decrypt the client's ciphertext
    #                   before re-encrypting it for the GPU, or re-encrypt decrypted output for the client)

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
    DerivedKind.P2P_META: Category.COMM,
    DerivedKind.KEY_ROTATION: Category.GPU_CRYPTO,
    DerivedKind.HOST_STAGING: Category.HOST,
    DerivedKind.CPU_RECRYPT: Category.CPU_CRYPTO,
    DerivedKind.P2P_LINK: Category.COMM,
    DerivedKind.P2P_SYNC: Category.SYNC_WAIT,
}

KIND_NAMES = {int(k): k.label for k in DerivedKind}
