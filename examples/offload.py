"""Offloaded LLM generation: weights or KV cache moved between host and GPU every step, as FlexGen
(weight offloading) and vLLM's swapping (KV cache in host memory) do (written for a CUDA GPU;
captured under emulation).

An OPT-style decoder (LayerNorm, multi-head attention, ReLU FFN of 4 x dim, learned positions)
generates ``--gen-len`` tokens for a batch of ``--batch`` requests with ``--prompt-len``-token
prompts, all admitted at once (FlexGen's offline batch).

* ``--offload weights`` (FlexGen, the GPU holds no layer's weights for good): every forward, each
  layer's weight matrices are copied from pinned host memory into one of two GPU buffers
  (double buffering) on a copy stream, one layer ahead of the compute stream, which waits for
  them with an event; the KV cache stays in GPU memory.
* ``--offload kv`` (vLLM swapping, FlexGen's CPU KV cache): weights stay in GPU memory; each layer's
  KV cache lives in pinned host memory and is copied in before that layer's attention (one layer
  ahead, double buffered), and the new token's K/V is copied back out after it.

Each step ends with sampling on the GPU and a D2H readback of the tokens (``.tolist()``); request
markers (docs/serving.md) are written when the host has them. Host-side control never depends on
token values (lengths are fixed), so the stand-in values of an emulated capture change nothing.

Host memory: the weights of one layer are the same size as those of every other, so by default
one pinned host buffer per weight shape stands for every layer's copy of it (the bytes moved and
their timing are the same; an emulated capture could not hold 60-130 GB of host weights).
``--distinct-host-weights`` allocates them per layer, as a real run with enough host memory does.

    python examples/offload.py --model opt-30b --offload weights --batch 32
    tracegen capture examples/offload.py -- --model opt-1.3b --batch 8 --gen-len 4
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import sys
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class OptConfig:
    dim: int
    layers: int
    heads: int
    vocab: int = 50272
    max_pos: int = 2048

    @property
    def ffn(self) -> int:
        return 4 * self.dim


# public OPT architecture figures (weights are random)
MODELS = {
    "tiny": OptConfig(dim=256, layers=2, heads=4),
    "opt-1.3b": OptConfig(dim=2048, layers=24, heads=32),
    "opt-13b": OptConfig(dim=5120, layers=40, heads=40),
    "opt-30b": OptConfig(dim=7168, layers=48, heads=56),
    "opt-66b": OptConfig(dim=9216, layers=64, heads=72),
}
WEIGHT_SHAPES = ("qkv", "o", "fc1", "fc2")


def weight_shapes(c: OptConfig) -> dict[str, tuple[int, int]]:
    return {"qkv": (3 * c.dim, c.dim), "o": (c.dim, c.dim), "fc1": (c.ffn, c.dim), "fc2": (c.dim, c.ffn)}


def mark(event: str, rid: int) -> None:
    """A request marker (fastrack_core/markers.py names): the host is at this moment now."""
    with torch.profiler.record_function(f"request:{event}:{rid}"):
        pass


class Offloaded:
    def __init__(self, args, c: OptConfig, device: str, dtype):
        self.args, self.c, self.device, self.dtype = args, c, device, dtype
        self.hd = c.dim // c.heads
        self.max_ctx = args.prompt_len + args.gen_len
        shapes = weight_shapes(c)
        with torch.device(device):
            self.embed = torch.randn(c.vocab, c.dim, dtype=dtype)  # also the (tied) LM head
            self.pos = torch.randn(c.max_pos, c.dim, dtype=dtype)
            self.norms = torch.ones(c.layers, 2, c.dim, dtype=dtype)
            self.final_norm = torch.ones(c.dim, dtype=dtype)
        self.compute = torch.cuda.current_stream()
        self.copy_stream = torch.cuda.Stream()
        kv_shape = (args.batch, self.max_ctx, c.dim)
        if args.offload == "weights":
            # host: every layer's weights (one buffer per shape stands for all layers unless distinct)
            n_host = c.layers if args.distinct_host_weights else 1
            self.host_w = [{k: torch.empty(s, dtype=dtype, pin_memory=True) for k, s in shapes.items()}
                           for _ in range(n_host)]
            self.gpu_w = [{k: torch.empty(s, dtype=dtype, device=device) for k, s in shapes.items()} for _ in range(2)]
            self.kv = [(torch.zeros(kv_shape, dtype=dtype, device=device),
                        torch.zeros(kv_shape, dtype=dtype, device=device)) for _ in range(c.layers)]
        else:
            with torch.device(device):
                self.weights = [{k: torch.randn(s, dtype=dtype) * 0.02 for k, s in shapes.items()}
                                for _ in range(c.layers)]
            n_host = c.layers if args.distinct_host_weights else 1
            self.host_kv = [(torch.empty(kv_shape, dtype=dtype, pin_memory=True),
                             torch.empty(kv_shape, dtype=dtype, pin_memory=True)) for _ in range(n_host)]
            self.gpu_kv = [(torch.empty(kv_shape, dtype=dtype, device=device),
                            torch.empty(kv_shape, dtype=dtype, device=device)) for _ in range(2)]
        self.ready = [torch.cuda.Event() for _ in range(2)]  # buffer b filled (copy stream)
        self.free = [torch.cuda.Event() for _ in range(2)]  # buffer b no longer read (compute stream)

    # -- moving data
    def _fetch(self, layer: int, ctx: int) -> None:
        """Copy what ``layer`` needs into GPU buffer ``layer % 2`` on the copy stream, once the
        compute stream is done with that buffer's previous contents."""
        b = layer % 2
        with torch.cuda.stream(self.copy_stream):
            self.copy_stream.wait_event(self.free[b])
            if self.args.offload == "weights":
                src = self.host_w[layer % len(self.host_w)]
                for k in WEIGHT_SHAPES:
                    self.gpu_w[b][k].copy_(src[k], non_blocking=True)
            elif ctx > 0:  # the past K/V (none before the prompt's forward)
                hk, hv = self.host_kv[layer % len(self.host_kv)]
                gk, gv = self.gpu_kv[b]
                gk[:, :ctx].copy_(hk[:, :ctx], non_blocking=True)
                gv[:, :ctx].copy_(hv[:, :ctx], non_blocking=True)
            self.ready[b].record(self.copy_stream)

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, start: int) -> torch.Tensor:
        """One forward over ``ids`` [batch, n] at positions start..start+n-1; returns last logits."""
        c = self.c
        b_, n = ids.shape
        end = start + n
        x = F.embedding(ids, self.embed) + F.embedding(positions, self.pos)
        self._fetch(0, start)
        for i in range(c.layers):
            if i + 1 < c.layers:
                self._fetch(i + 1, start)  # one layer ahead (FlexGen's overlap of I/O and compute)
            buf = i % 2
            self.compute.wait_event(self.ready[buf])
            w = self.gpu_w[buf] if self.args.offload == "weights" else self.weights[i]
            if self.args.offload == "weights":
                kc, vc = self.kv[i]
            else:
                kc, vc = self.gpu_kv[buf]
            h = F.layer_norm(x, (c.dim,), self.norms[i, 0])
            q, k, v = F.linear(h, w["qkv"]).view(b_, n, 3, c.heads, self.hd).unbind(2)
            kc[:, start:end] = k.reshape(b_, n, c.dim)
            vc[:, start:end] = v.reshape(b_, n, c.dim)
            kk = kc[:, :end].view(b_, end, c.heads, self.hd).transpose(1, 2)
            vv = vc[:, :end].view(b_, end, c.heads, self.hd).transpose(1, 2)
            a = F.scaled_dot_product_attention(q.transpose(1, 2), kk, vv, is_causal=n > 1)
            x = x + F.linear(a.transpose(1, 2).reshape(b_, n, c.dim), w["o"])
            h = F.layer_norm(x, (c.dim,), self.norms[i, 1])
            x = x + F.linear(F.relu(F.linear(h, w["fc1"])), w["fc2"])
            if self.args.offload == "kv":  # the new tokens' K/V go back to host memory
                hk, hv = self.host_kv[i % len(self.host_kv)]
                hk[:, start:end].copy_(kc[:, start:end], non_blocking=True)
                hv[:, start:end].copy_(vc[:, start:end], non_blocking=True)
            self.free[buf].record(self.compute)
        h = F.layer_norm(x[:, -1], (c.dim,), self.final_norm)
        return F.linear(h, self.embed)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(MODELS), default="tiny")
    p.add_argument("--layers", type=int, help="Keep only this many layers (a slice of a large model).")
    p.add_argument("--offload", choices=("weights", "kv"), default="weights")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--gen-len", type=int, default=8)
    p.add_argument("--distinct-host-weights", action="store_true",
                   help="One host buffer per layer (needs the whole model's bytes in host memory).")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    cfg = MODELS[args.model]
    if args.layers:
        cfg = dataclasses.replace(cfg, layers=args.layers)
    for what, v in (("--batch", args.batch), ("--prompt-len", args.prompt_len), ("--gen-len", args.gen_len)):
        if v < 1:
            print(f"offload.py: {what} must be at least 1, got {v}", file=sys.stderr)
            sys.exit(2)
    if args.prompt_len + args.gen_len > cfg.max_pos:
        print(f"offload.py: --prompt-len + --gen-len exceeds the model's {cfg.max_pos} positions", file=sys.stderr)
        sys.exit(2)

    torch.manual_seed(args.seed)
    rng = random.Random(args.seed)
    model = Offloaded(args, cfg, "cuda", torch.float16)
    prompts = torch.tensor([[rng.randrange(cfg.vocab) for _ in range(args.prompt_len)] for _ in range(args.batch)])
    with torch.inference_mode():
        for rid in range(args.batch):
            mark("arrive", rid)
        ids = prompts.pin_memory().to("cuda", non_blocking=True)
        pos = torch.arange(args.prompt_len).expand(args.batch, -1).pin_memory().to("cuda", non_blocking=True)
        start = 0
        for step in range(args.gen_len):
            with torch.profiler.record_function(f"ProfilerStep#{step}"):
                logits = model.forward(ids, pos, start)
                start += ids.shape[1]
                tokens = logits.argmax(dim=-1)  # greedy, on the GPU
                values = tokens.tolist()  # the per-step readback
                for rid in range(args.batch):
                    mark("first_token" if step == 0 else "token", rid)
                if step + 1 < args.gen_len:  # the next step's inputs: the tokens, the position
                    ids = torch.tensor(values, dtype=torch.int64)[:, None].pin_memory().to("cuda", non_blocking=True)
                    pos = torch.full((args.batch, 1), start, dtype=torch.int64).pin_memory().to("cuda",
                                                                                                non_blocking=True)
        for rid in range(args.batch):
            mark("finish", rid)
    print(f"generated {args.gen_len} tokens for {args.batch} requests ({args.model}, offload {args.offload})",
          file=sys.stderr)


if __name__ == "__main__":
    main()
