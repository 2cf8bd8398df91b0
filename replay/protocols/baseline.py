"""``baseline``: NVIDIA H100 confidential computing as the driver implements it (:mod:`.cc`).

The CPU encrypts each 2 MiB staging chunk in the calling thread (4 KiB AES-GCM calls); one
copy-engine secure copy per chunk reads it over PCIe and decrypts and verifies it page by page,
one channel per direction in IV order; CPU encryption of the next chunk overlaps it. D2H mirrored.
Copies are host-synchronous; every host submission call is one encrypted submission. Qualifying
client-encrypted data costs two CPU passes (decrypt the client's ciphertext, re-encrypt).
"""

from .cc import CCProtocol

BASELINE = CCProtocol(
    "baseline",
    "H100 CC as the driver implements it: CPU encryption per 2 MiB chunk in the calling thread, one CE "
    "decrypt+verify per chunk streamed with PCIe on one channel per direction, host-synchronous copies",
)
