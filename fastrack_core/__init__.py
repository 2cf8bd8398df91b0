"""The shared floor of Fastrack: what ``tracegen``, ``replay`` and the model plug-ins all import.

The trace contract (:mod:`fastrack_core.schema`), trace I/O (:mod:`fastrack_core.traceio`), the
error hierarchy (:mod:`fastrack_core.errors`), atomic outputs, file sniffing, the Chakra codec
and the command-line plumbing. It imports nothing of ours, by statement, lazily or by string
(tests/test_layering.py); the Python API that stands on everything is the package ``fastrack``.
"""
