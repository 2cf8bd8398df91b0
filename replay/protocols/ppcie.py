"""``ppcie``: H100 Protected PCIe mode (multi-GPU CC that trusts NVLink).

Host<->GPU traffic is protected as in CC mode (the ``baseline`` data path of :mod:`.cc`: CPU
encryption into bounce buffers, serial authentication, host-synchronous copies, encrypted
command submission, collective launches included), while GPU-to-GPU traffic travels over NVLink
in **plaintext** (PPCIe trusts NVLink, docs/sources.md [S22]; encrypted NVLink arrives with
Blackwell). Collectives are
therefore priced exactly as under ``none`` (:func:`.collectives.price_plain`).

``baseline`` and ``fastrack`` (:mod:`.multigpu`) encrypt every collective message instead
(the design NVIDIA describes for multi-GPU CC, not a shipped H100 mode, docs/sources.md [S22]);
on a single-GPU trace ``ppcie`` and ``baseline`` give the same graph.
"""

from .cc import CCProtocol
from .featuresoff import CC_OFF, features_off


class PPCIeProtocol(CCProtocol):
    """The CC data path on the graph without the features CC switches off (:mod:`.featuresoff`:
    multicast and cudaHostRegister are off in PPCIe mode too, [S62][S64])."""

    features_off = CC_OFF

    def apply(self, graph, model):
        return super().apply(features_off(graph, model, self.features_off), model)


PPCIE = PPCIeProtocol(
    "ppcie",
    "Protected PCIe mode: host<->GPU as H100 CC baseline, GPU-to-GPU over NVLink in plaintext",
)
