"""A stand-in for gem5's ``m5`` package: configuration only, strict like gem5 (README.md here)."""

import json
import os
import sys

from . import objects
from .SimObject import SimObject, fatal

__all__ = ["curTick", "instantiate", "objects", "simulate"]


class _Exit:
    def getCause(self):
        return "stand-in: simulate() returned"


def instantiate():
    """Check the tree under the Root as gem5 does before it builds the C++ objects, then record it."""
    root = objects.Root.getInstance()
    if root is None:
        fatal("Need to instantiate Root() before calling instantiate()")
    for obj in root.descendants():
        obj.check_params()
    record = os.environ.get("M5_STUB_RECORD")
    if record:
        with open(record, "w") as fh:
            json.dump(root.describe(), fh)


def simulate(*args):
    if objects.Root.getInstance() is None or not getattr(objects.Root.getInstance(), "instantiated", False):
        print("stand-in m5: simulate() before instantiate()", file=sys.stderr)
        sys.exit(1)
    return _Exit()


def curTick():
    return int(os.environ.get("M5_STUB_TICKS", "0"))


assert issubclass(objects.Root, SimObject)
