"""``ppcie``: H100 Protected PCIe mode (multi-GPU CC that trusts NVLink).

Host<->GPU traffic is protected as in CC mode (the ``baseline`` data path of :mod:`.cc`: CPU
encryption into bounce buffers, serial authentication, host-synchronous copies, encrypted
command submission, collective launches included), while GPU-to-GPU traffic travels over NVLink
in **plaintext** (shared/docs/h100-cc.md: "Protected PCIe (PPCIe) mode instead trusts NVLink and
sends plaintext over it"; NVLink encryption arrives only with Blackwell). Collectives are
therefore priced exactly as under ``none`` (:func:`.collectives.price_plain`).

Note that the single-GPU protocols (``baseline``, ``fastrack``...) also price collectives as
plaintext: on a multi-rank trace ``baseline`` and ``ppcie`` give the same graph. ``ppcie`` exists
under its own name so that tables and studies say which mode they mean.
"""

from .cc import CCProtocol

PPCIE = CCProtocol(
    "ppcie",
    "Protected PCIe mode: host<->GPU as H100 CC baseline, GPU-to-GPU over NVLink in plaintext",
)
