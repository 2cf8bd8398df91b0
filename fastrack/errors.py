"""The project's exceptions, for API users: ``fastrack.errors.FastrackError`` and its subclasses.

Defined once in the shared floor (:mod:`fastrack_core.errors`); this module only re-exports them
under the API's name.
"""

from fastrack_core.errors import (CaptureError, ConfigError, FastrackError, GraphError, PluginError, SchemaError,
                                  TraceFormatError)

__all__ = ["CaptureError", "ConfigError", "FastrackError", "GraphError", "PluginError", "SchemaError",
           "TraceFormatError"]
