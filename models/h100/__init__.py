"""NVIDIA H100 TEE model (registered as ``h100`` in the ``fastrack.models`` entry-point group)."""

from .model import PRESETS_DIR, H100Model
from .params import H100Params

__all__ = ["H100Model", "H100Params", "PRESETS_DIR"]
