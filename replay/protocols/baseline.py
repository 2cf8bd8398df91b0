"""``baseline``: NVIDIA H100 confidential computing as shipped (see :mod:`.cc` for the data path).

CPU encrypts into bounce buffers in the calling thread, copies chunked by the bounce slot size,
GPU decryption only after the whole transfer, serial authentication, host-synchronous H2D/D2H
copies, encrypted command submission on every launch and copy; D2H mirrored.
"""

from .cc import CCProtocol

BASELINE = CCProtocol(
    "baseline",
    "H100 CC as shipped: CPU re-encryption in the calling thread, serial authentication, "
    "no pipelining, host-synchronous copies",
)
