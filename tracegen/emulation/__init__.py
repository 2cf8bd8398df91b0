"""Run an unchanged CUDA PyTorch script without a GPU and record what the GPU would have done.

Tensors the script puts on ``cuda`` become ``meta`` tensors (shapes and dtypes only, nothing
allocated), so models far larger than this machine's memory can be captured. One module per
concept:

* :mod:`.timeline` -- :class:`Recorder`, the virtual timeline (host ops, GPU ops on in-order
  streams, launches, copies, synchronisations, events);
* :mod:`.hosttime` -- how host time advances: ``script`` (the script's own Python as thread CPU
  time, scaled to the target host by :mod:`.scripttime`; the default), ``modelled`` (named per-op
  costs) or ``measured`` (wall time on this machine);
* :mod:`.function_mode` -- the ``TorchFunctionMode`` layer (``cuda`` -> ``meta``, ``is_cuda``,
  pinning, ``autocast("cuda")``, the SDPA kernel choice);
* :mod:`.cudnn_rnn` -- ``nn.LSTM``/``GRU``/``RNN`` through ``_cudnn_rnn``, as CUDA runs them;
* :mod:`.costmodel` -- the per-operator H100 cost model (GPU kernels, copies, named host costs;
  does not import torch);
* :mod:`.dispatch` -- the ``TorchDispatchMode`` layer: ATen operators -> kernels priced by
  :mod:`.costmodel`, transfers, reads as D2H copies + syncs;
* :mod:`.metacache` -- result layouts of operators remembered per argument signature (a repeated
  call skips PyTorch's Python meta kernel; the recorded trace is the same);
* :mod:`.shadows` -- real CPU values beside small emulated tensors, kept by running each operator
  on them too;
* :mod:`.reads` -- the stand-ins of values that depend on large (valueless) tensors;
* :mod:`.printing` -- ``print(t)`` / ``f"{t:.4f}"`` of emulated tensors: a read, as on a GPU;
* :mod:`.clock` -- the script's ``time`` module on the emulated clock (``--real-clock``: left real);
* :mod:`.indexing` -- list/range indices and ``t[i] = 3`` built on the host, as PyTorch does for CUDA;
* :mod:`.storages` -- storages moved to the GPU (``torch.load(map_location="cuda")``);
* :mod:`.tensors` -- emulated / pinned tensors, device mapping;
* :mod:`.streams` -- ``torch.cuda.Stream`` / ``Event`` stand-ins;
* :mod:`.gradmarks` -- gradient-ready markers (``AccumulateGrad`` cpu ops with the gradient's bytes);
* :mod:`.devices` -- ``torch.device(0)``, the default device, ``torch.Generator/Stream/Event`` on
  ``cuda``, ``DataParallel`` over the one GPU;
* :mod:`.tensortypes` -- ``torch.cuda.FloatTensor`` and friends, ``Tensor.type``, ``data_ptr``,
  ``record_stream``;
* :mod:`.memory` -- ``memory_stats()`` (PyTorch's key set) and the memory fraction;
* :mod:`.nvtx` -- NVTX ranges as markers;
* :mod:`.graphs` -- CUDA graphs (capture records, replay is one ``cudaGraphLaunch``);
* :mod:`.unsupported` -- the one-line refusal of what the emulation does not cover;
* :mod:`.cuda_api` -- the patched ``torch.cuda`` surface;
* :mod:`.session` -- :func:`emulated_gpu`, all of the above around a script;
* :mod:`.trace` -- the schema-v1 table of a finished recording.

``docs/emulation.md`` explains the choices (what reads return, the cost model, limits); how steps
are found is ``docs/capture.md``.
"""

import importlib

_EXPORTS = {  # imported on first use: the package itself does not import torch
    "patched_torch": "cuda_api", "HOST_TIME_MODES": "hosttime", "HostClock": "hosttime", "calibrate": "hosttime",
    "READ_ALL": "reads", "READ_BOOL": "reads", "READ_FLOAT": "reads", "READ_INT": "reads",
    "emulated_gpu": "session", "preload": "session", "EmuEvent": "streams", "EmuStream": "streams",
    "DEFAULT_STREAM": "timeline", "Recorder": "timeline", "recorder_table": "trace",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f"{__name__}.{mod}")
    return getattr(module, "MODES" if name == "HOST_TIME_MODES" else name)
