"""NVIDIA H100 TEE model (registered as ``h100`` in the ``fastrack.models`` entry-point group) and
its gem5 exporter (``gem5`` in ``fastrack.exporters``: ``replay export-gem5``).

Installed as the package ``fastrack_h100`` (the folder ``models/h100``); that is its only import
name, so its classes exist once per process.
"""

if __name__ != "fastrack_h100":  # e.g. ``import models.h100`` from the repository root
    raise ImportError(f"the H100 model plug-in is imported as 'fastrack_h100', not '{__name__}' "
                      "(install the project: pip install -e .)")

from .model import PRESETS_DIR, H100Model  # noqa: E402
from .params import H100Params  # noqa: E402

__all__ = ["H100Model", "H100Params", "PRESETS_DIR"]
