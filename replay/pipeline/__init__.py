"""The replay pipeline, in the order data flows: trace -> graph (:mod:`.build`, :mod:`.causal`,
:mod:`.keys`) -> engine (:mod:`.engine`, its numba twin :mod:`.engine_numba`) -> results
(:mod:`.results`, :mod:`.serving`); :mod:`.run` is one replay as a library call."""
