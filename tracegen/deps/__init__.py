"""Deriving a trace's ops and dependency edges from an importer's raw ops, one rule per module.

:mod:`tracegen.dependencies` is the public entry (contract and re-exports); the work is in
:mod:`~tracegen.deps.derive`, which chains :mod:`~tracegen.deps.raw`, :mod:`~tracegen.deps.hosts`,
:mod:`~tracegen.deps.launches`, :mod:`~tracegen.deps.streams`, :mod:`~tracegen.deps.syncs`,
:mod:`~tracegen.deps.collectives` and :mod:`~tracegen.deps.assemble` over the vectorized lookups of
:mod:`~tracegen.deps.search` and the edge list of :mod:`~tracegen.deps.edges`.
"""
