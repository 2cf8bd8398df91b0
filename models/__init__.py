"""Hardware models of the replay, one sub-package each (installed as ``fastrack_models``)."""
