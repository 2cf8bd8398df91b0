"""Replay of Fastrack traces through a hardware model, after a protocol transform.

The package is in wings (docs/architecture.md draws them):

* the plug-in surface, where third-party models, protocols and exporters import from, at the
  top: :mod:`.model` (the hardware-model interface), :mod:`.config` (presets), :mod:`.graph`
  (the graph a protocol transforms), :mod:`.protocols` (the protocol interface, the graph
  editor and the shipped protocols), :mod:`.exporter` and :mod:`.graphfile` (the exporter
  interface and its file format), :mod:`.plugins` (the registries), :mod:`.names`;
* :mod:`.pipeline`: trace -> graph -> engine -> results;
* :mod:`.whatif`: transforms applied before a protocol (scaling, data parallelism);
* :mod:`.exporters`: Chakra traces and timelines;
* :mod:`.study`: sweeps, sensitivity and their plots;
* :mod:`.frontend`: the ``replay`` command lines and text reports.
"""
