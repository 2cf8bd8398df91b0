"""An LLM server loop as vLLM runs it (written for a CUDA GPU; captured under emulation).

Closed-loop load, as SGLang's and vLLM's benchmark clients drive a server with
``--max-concurrency``: ``--requests`` requests with prompts of different lengths (``--input-len``
scaled by a random factor in [``--range-ratio``, 1], as ``--random-range-ratio``) and output
lengths; ``--concurrency`` of them are in the server at once, and each one that finishes is
replaced by the next. Every step the scheduler admits new requests into free KV-cache slots,
cuts their prompts into chunks within a token budget (``--max-batched-tokens``: chunked prefill)
and runs ONE forward over every running request: prefill chunks and decode tokens together,
flattened into one token batch (continuous batching, no padding).

Per step, as vLLM's model runner does:

* **small H2D inputs** built by the host: token ids, positions, slot mapping (where each token's
  K/V goes in the cache), sequence lengths and logits indices (the query start locations),
  from persistent pinned host buffers (``--pageable-inputs``: from pageable memory), each a
  ``non_blocking`` copy on the compute stream (``--async-h2d``: on a separate copy stream that the
  compute stream waits for; ``--copy-thread``: issued by a copy thread, below);
* the forward: fused QKV and gate/up projections, RMSNorm, rotary embedding, the K/V of the
  step written into a KV cache that lives in GPU memory (one region of ``--max-len`` tokens per
  slot: a block table whose blocks are contiguous), attention over each request's own context
  as paged attention runs it (one variable-length FlashAttention call over the flattened batch,
  each sequence reading only its own cache positions; grouped-query attention where the model
  has fewer KV heads);
* **sampling on the GPU** (temperature, the exponential-race sampler vLLM uses) and a per-step
  **D2H readback** of the sampled token ids (``.tolist()``);
* **output processing**: incremental detokenization of each token (as vLLM's
  ``detokenize_incrementally``, over a stand-in vocabulary) and the request markers.

``--overlap`` runs the scheduler one step ahead (SGLang's overlap scheduler, vLLM's async
scheduling): the next step's inputs are built and its forward launched before the previous step's
tokens are read back, which a side stream copies into pinned memory; the decode token ids are
taken on the GPU from the previous step's samples. ``--cuda-graphs`` runs decode-only steps as
CUDA-graph replays, as vLLM does: one graph per batch-size bucket (``CAPTURE_SIZES`` up to the
concurrency) captured at start-up, before the first request; a decode step pads its batch to the
next bucket, its H2D input copies write straight into that graph's static input buffers (padding
rows point at a scratch KV slot), then ``graph.replay()`` (one ``cudaGraphLaunch``) runs the
forward and the sampler, and the D2H token readback follows. Steps with a prefill chunk run eagerly.
A graph's attention reads the context lengths of the step from its static buffers on a GPU; an
emulated capture prices it once, at capture, with every row at the longest context of the run
(``--input-len`` + ``--output-len``): an upper bound (docs/emulation.md, "Decode pricing").

Engine threads and ranks (docs/serving.md, "The serving example"): ``--copy-thread`` (SGLang's
CC fix, SGLang PR #15188 and #31447) hands each step's H2D input copies to an input-copy thread
with its own stream, which hands an event back through a queue before the forward is launched,
and with ``--overlap`` the token readback to a readback thread with its own stream, so that
copies that block their thread under CC block those threads, not the scheduler;
``--async-output`` (vLLM's asynchronous output processor) hands each step's outputs to an output
thread that detokenizes them and writes the token markers while the scheduler runs the next
step; ``--tp`` (under ``tracegen capture --nproc N`` or ``torchrun``) shards every layer over the
ranks as Megatron-LM does, with two all-reduces per layer and one all-gather of the logits
(with ``--cuda-graphs`` captured into the decode graphs, as vLLM and SGLang capture them).

``--multi-step N`` (vLLM's multi-step scheduling, ``--num-scheduler-steps``, v0.6.0): a decode-only
step is scheduled and its inputs prepared and copied once, then the GPU runs N decode steps back
to back; between them the inputs advance on the GPU (each step's samples become the next step's
token ids, positions, slot mapping and context lengths move one on) and each step's tokens are
read back after the next step is launched, so the host stays one step ahead. A step with a
prefill chunk runs alone (vLLM's "force single step" with chunked prefill). The batch of a round
is fixed when it is scheduled: a request that finishes inside it keeps its row to the end of the
round (its extra tokens are dropped) and new requests are admitted only at the next round. Every
GPU step is its own ``ProfilerStep`` with its own engine-step marker; the round's scheduling and
input preparation are in its first step.

Host-side scheduling never depends on GPU values: output lengths are drawn up front (as a
benchmark with ``ignore_eos`` does), so token ids read back under emulation are stand-ins.
Request markers (``request:arrive|first_token|token|finish:<id>``, docs/serving.md) are written
with ``torch.profiler.record_function`` when the host has admitted a request and when it has a
token in hand; every step is ``ProfilerStep#N`` and carries an engine-step marker (an NVTX instant
``engine_step:<prefill tokens>:<decode requests>:<context tokens>``, read by ``replay serve``).

    python examples/serving.py --model llama3-8b --concurrency 8
    tracegen capture examples/serving.py -- --model tiny --requests 8 --concurrency 4
    tracegen capture examples/serving.py -- --model llama3-8b --cuda-graphs --overlap --copy-thread
    tracegen capture --nproc 2 examples/serving.py -- --model llama3-70b --layers 8 --tp --overlap
    tracegen capture examples/serving.py -- --model llama3-8b --cuda-graphs --multi-step 8
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import queue
import random
import sys
import threading
from collections import deque
from dataclasses import dataclass, field

import torch
import torch.nn as nn
import torch.nn.functional as F

from toy_models import LlamaConfig

try:  # variable-length FlashAttention with per-sequence KV lengths (PyTorch's paged-attention entry point)
    from torch.nn.attention.varlen import varlen_attn
except ImportError:  # older PyTorch: one SDPA call per sequence (eager steps only)
    varlen_attn = None
VARLEN = varlen_attn is not None and "seqused_k" in inspect.signature(varlen_attn).parameters

# Model configurations (public architecture figures of each family; weights are random).
MODELS = {
    "tiny": LlamaConfig(dim=256, layers=2, heads=8, kv_heads=4, ffn=688, vocab=1024),
    # dense multi-head attention, sub-1B
    "qwen1.5-0.5b": LlamaConfig(dim=1024, layers=24, heads=16, kv_heads=16, ffn=2816, vocab=151936,
                                rope_theta=1000000.0, norm_eps=1e-6, qkv_bias=True),
    # grouped-query attention with QKV bias, Qwen-class 7B (huggingface.co/Qwen/Qwen2.5-7B, config.json:
    # hidden 3584, 28 layers, 28 query / 4 KV heads, intermediate 18944, vocabulary 152064, rope_theta 1e6)
    "qwen2.5-7b": LlamaConfig(dim=3584, layers=28, heads=28, kv_heads=4, ffn=18944, vocab=152064,
                              rope_theta=1000000.0, norm_eps=1e-6, qkv_bias=True),
    # grouped-query attention, 8B
    "llama3-8b": LlamaConfig(dim=4096, layers=32, heads=32, kv_heads=8, ffn=14336, vocab=128256),
    # dense multi-head attention, 13B
    "llama2-13b": LlamaConfig(dim=5120, layers=40, heads=40, kv_heads=40, ffn=13824, vocab=32000,
                              rope_theta=10000.0),
    # grouped-query attention, 70B (huggingface.co/meta-llama/Meta-Llama-3-70B, config.json: hidden 8192,
    # 80 layers, 64 query / 8 KV heads, intermediate 28672, vocabulary 128256; 140 GB of bf16 weights,
    # more than one 80 GB H100 holds: --tp over 2 or more ranks, a what-if on one GPU, or --layers)
    "llama3-70b": LlamaConfig(dim=8192, layers=80, heads=64, kv_heads=8, ffn=28672, vocab=128256),
}
CAPTURE_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)  # decode batch sizes with a CUDA graph (vLLM's ladder)
MAX_CONCURRENCY = CAPTURE_SIZES[-1]


# --------------------------------------------------------------------------- the model


class Layer(nn.Module):
    """One decoder layer; with ``tp`` > 1 (``--tp``) this rank's shard of it, as Megatron-LM's
    tensor parallelism splits it: the QKV and gate/up projections column-parallel (this rank's
    ``heads / tp`` query heads, ``kv_heads / tp`` KV heads and ``ffn / tp`` FFN columns), the
    output and down projections row-parallel, each followed by an all-reduce of its partial sums
    (two per layer)."""

    def __init__(self, c: LlamaConfig, tp: int = 1):
        super().__init__()
        self.tp = tp
        self.h, self.kvh, self.hd = c.heads // tp, c.kv_heads // tp, c.dim // c.heads
        self.eps = c.norm_eps
        self.attn_norm = nn.Parameter(torch.ones(c.dim))
        self.qkv = nn.Linear(c.dim, (self.h + 2 * self.kvh) * self.hd, bias=c.qkv_bias)
        self.o = nn.Linear(self.h * self.hd, c.dim, bias=False)
        self.mlp_norm = nn.Parameter(torch.ones(c.dim))
        self.gate_up = nn.Linear(c.dim, 2 * (c.ffn // tp), bias=False)
        self.down = nn.Linear(c.ffn // tp, c.dim, bias=False)

    def reduce(self, partial):
        """--tp: the row-parallel projection's partial sums, summed over the ranks (all-reduce)."""
        if self.tp > 1:
            torch.distributed.all_reduce(partial)
        return partial

    def forward(self, x, cos, sin, cache, batch: "Batch"):
        t = x.shape[0]
        h = F.rms_norm(x, (x.shape[-1],), self.attn_norm, self.eps)
        q, k, v = self.qkv(h).split([self.h * self.hd, self.kvh * self.hd, self.kvh * self.hd], dim=-1)
        q = rotary(q.view(t, self.h, self.hd), cos, sin)
        k = rotary(k.view(t, self.kvh, self.hd), cos, sin)
        kc, vc = cache  # [slots * max_len, kv_heads, head_dim]
        kc.index_copy_(0, batch.slot_mapping, k)  # this step's K/V into the cache
        vc.index_copy_(0, batch.slot_mapping, v.view(t, self.kvh, self.hd))
        out = attention(q, kc, vc, batch, self.h, self.kvh)
        x = x + self.reduce(self.o(out.reshape(t, -1)))
        h = F.rms_norm(x, (x.shape[-1],), self.mlp_norm, self.eps)
        gate, up = self.gate_up(h).chunk(2, dim=-1)
        return x + self.reduce(self.down(F.silu(gate) * up))


def rotary(x, cos, sin):
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def attention(q, kc, vc, batch: "Batch", heads: int, kv_heads: int):
    """Attention of every scheduled token over its own request's context in the cache, as paged
    attention runs it: one variable-length FlashAttention call over the flattened batch. Sequence
    ``i`` (a prefill chunk or a decode row) has the query rows ``cu_seq_q[i]:cu_seq_q[i+1]`` and
    reads the first ``seq_used[i]`` positions of its slot's cache region, which starts at row
    ``cu_seq_k[i]`` (FlashAttention takes a sequence's keys from ``cu_seq_k[i]`` on for
    ``seqused_k[i]`` positions). Causal, aligned to the end of the context: a prefill chunk sees
    its request's past and itself causally, a decode row its whole context. Without varlen
    attention (older PyTorch): one SDPA call per sequence, over the same positions."""
    gqa = kv_heads != heads
    if VARLEN:
        return varlen_attn(q, kc, vc, batch.cu_seq_q, batch.cu_seq_k, batch.max_q, batch.max_k,
                           window_size=(-1, 0), enable_gqa=gqa, seqused_k=batch.seq_used)
    hd = q.shape[-1]
    kv = kc.view(-1, batch.max_len, kv_heads, hd)  # [slots, max_len, kv_heads, head_dim]
    vv = vc.view(-1, batch.max_len, kv_heads, hd)
    outs = []
    for (row, n, slot, used) in batch.seqs:
        qs = q[row:row + n].transpose(0, 1)[None]
        ks, vs = kv[slot, :used].transpose(0, 1)[None], vv[slot, :used].transpose(0, 1)[None]
        mask = None if n in (1, used) else torch.ones(n, used, dtype=torch.bool, device=q.device).tril(used - n)
        outs.append(F.scaled_dot_product_attention(qs, ks, vs, attn_mask=mask, is_causal=n == used > 1,
                                                   enable_gqa=gqa)[0].transpose(0, 1))
    return outs[0] if len(outs) == 1 else torch.cat(outs, dim=0)


class ServeModel(nn.Module):
    """The decoder. With ``tp`` > 1 (``--tp``): the layers sharded (:class:`Layer`), the embedding
    replicated on every rank, the LM head vocabulary-parallel (``vocab / tp`` rows per rank) with
    the logits all-gathered so that every rank samples from the whole vocabulary, as vLLM's
    parallel LM head and logits gather do."""

    def __init__(self, c: LlamaConfig, tp: int = 1):
        super().__init__()
        self.c, self.tp = c, tp
        self.embed = nn.Embedding(c.vocab, c.dim)
        self.layers = nn.ModuleList(Layer(c, tp) for _ in range(c.layers))
        self.norm = nn.Parameter(torch.ones(c.dim))
        self.head = nn.Linear(c.dim, c.vocab // tp, bias=False)
        hd = c.dim // c.heads
        inv = 1.0 / (c.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, batch: "Batch", caches):
        x = self.embed(batch.input_ids)
        freqs = batch.positions[:, None].float() * self.inv_freq[None, :]
        cos, sin = freqs.cos().to(x.dtype)[:, None, :], freqs.sin().to(x.dtype)[:, None, :]
        for layer, cache in zip(self.layers, caches):
            x = layer(x, cos, sin, cache, batch)
        h = F.rms_norm(x.index_select(0, batch.logits_indices), (x.shape[-1],), self.norm, self.c.norm_eps)
        if self.tp > 1:
            return self.gather_logits(self.head(h))
        return self.head(h)

    def gather_logits(self, local):
        """--tp: every rank's ``[rows, vocab / tp]`` slice of the logits gathered (one all-gather)
        into ``[rows, vocab]``."""
        rows, part = local.shape
        out = torch.empty(self.tp * rows, part, dtype=local.dtype, device=local.device)
        torch.distributed.all_gather_into_tensor(out, local.contiguous())
        return out.view(self.tp, rows, part).permute(1, 0, 2).reshape(rows, self.tp * part)


def sample(logits, temperature: float):
    """Sampling on the GPU: temperature, softmax, then the exponential race (argmax of p / E with
    E ~ Exp(1)), as vLLM's sampler draws from the distribution without a host round trip."""
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    noise = torch.empty_like(probs).exponential_()
    return probs.div_(noise).argmax(dim=-1)


# --------------------------------------------------------------------------- the scheduler (host only)


@dataclass
class Request:
    rid: int
    prompt: list[int]
    output_len: int
    slot: int = -1
    computed: int = 0  # prompt tokens whose K/V are in the cache
    sampled: int = 0  # output tokens sampled on the GPU (scheduled)
    delivered: int = 0  # output tokens the host has read back
    last_token: int = 0  # the last token read back (a stand-in value under emulation)

    @property
    def prefilling(self) -> bool:
        return self.computed < len(self.prompt)

    @property
    def decoding(self) -> bool:
        return not self.prefilling and 0 < self.sampled < self.output_len


@dataclass
class Batch:
    """One step's inputs on the GPU and the host-side layout the forward needs."""

    input_ids: torch.Tensor
    positions: torch.Tensor
    slot_mapping: torch.Tensor
    logits_indices: torch.Tensor
    cu_seq_q: torch.Tensor  # int32 [sequences + 1]: first query row of each sequence, then the row count
    cu_seq_k: torch.Tensor  # int32 [sequences + 1]: first cache row of each sequence's slot, then the pool size
    seq_used: torch.Tensor  # int32 [sequences]: cache positions each sequence reads (its context)
    max_q: int  # the most query rows of one sequence
    max_k: int  # the most cache positions one sequence may read
    max_len: int
    seqs: list[tuple[int, int, int, int]]  # host copy: (first row, rows, slot, context) of each sequence
    num_prefill_tokens: int
    num_decode: int
    sampled_rows: list[Request] = field(default_factory=list)  # requests that get a token this step
    graph_size: int = 0  # --cuda-graphs: the bucket whose graph runs this decode-only step (0: eager)
    buffers: dict[str, torch.Tensor] = field(default_factory=dict)  # --cuda-graphs: a graph's static inputs


FRONTEND = [True]  # --tp: only rank 0 writes the request and engine-step markers (the engine's frontend)


def mark(event: str, rid: int) -> None:
    """A request marker (fastrack_core/markers.py names): the host is at this moment now."""
    if not FRONTEND[0]:
        return
    with torch.profiler.record_function(f"request:{event}:{rid}"):
        pass


def step_marker(chunks, decodes) -> None:
    """The engine-step marker (docs/serving.md, "Engine-step markers"): an NVTX instant named
    ``engine_step:<prefill tokens>:<decode requests>:<context tokens>`` at the start of the step's
    work, the shape ``replay serve`` prices the step by (the context counts every cache position
    the step's attention reads)."""
    prefill = sum(n for _, n in chunks)
    context = sum(r.computed + n for r, n in chunks) + sum(len(r.prompt) + r.sampled for r in decodes)
    if FRONTEND[0]:
        torch.cuda.nvtx.mark(f"engine_step:{prefill}:{len(decodes)}:{context}")


class CopyWorker:
    """A host thread with a CUDA stream of its own that runs the copies the scheduler thread hands
    it (``--copy-thread``, SGLang's CC fix): jobs arrive on one ``queue.Queue`` in order, results
    go back on another; the scheduler thread blocks only when it takes a result."""

    def __init__(self, name: str):
        self.stream = torch.cuda.Stream()
        self.jobs: queue.Queue = queue.Queue()
        self.results: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        # inference mode and the current stream are per thread in PyTorch
        with torch.inference_mode(), torch.cuda.stream(self.stream):
            while True:
                job = self.jobs.get()
                if job is None:
                    return
                self.results.put(job())

    def submit(self, job) -> None:
        self.jobs.put(job)

    def result(self):
        return self.results.get()

    def close(self) -> None:
        self.jobs.put(None)
        self.thread.join()


def token_text(tok: int) -> str:
    """The text of token ``tok`` in a stand-in vocabulary (the weights are random, so there is no
    real tokenizer): 1 to 4 letters, every third token starting a word."""
    letters = []
    n = tok
    while True:
        letters.append(chr(97 + n % 26))
        n //= 26
        if not n or len(letters) == 4:
            break
    return (" " if tok % 3 == 0 else "") + "".join(letters)


class Detokenizer:
    """Incremental detokenization as vLLM's ``detokenize_incrementally`` runs it: per request the
    tokens so far, a prefix offset and a read offset; each new token decodes the window from the
    prefix offset with and without it, and the text past the previous window is the new output
    (pure Python: host time in ``--host-time script`` captures, none in ``modelled``)."""

    WINDOW = 5  # tokens of context kept before the read offset (vLLM keeps 5)

    def __init__(self):
        self.state: dict[int, list] = {}  # rid -> [tokens, prefix offset, read offset, output text]

    def add(self, rid: int, tok: int) -> str:
        st = self.state.setdefault(rid, [[], 0, 0, ""])
        tokens, prefix, read = st[0], st[1], st[2]
        tokens.append(tok)
        before = "".join(token_text(t) for t in tokens[prefix:read])
        after = "".join(token_text(t) for t in tokens[prefix:])
        delta = after[len(before):]
        st[1], st[2] = max(0, len(tokens) - self.WINDOW), len(tokens)
        st[3] += delta
        return delta

    def finish(self, rid: int) -> str:
        return self.state.pop(rid, [None, 0, 0, ""])[3]


class OutputProcessor:
    """--async-output: a host thread that takes each step's outputs from a ``queue.Queue`` and
    processes them (detokenization, the request markers) off the scheduler thread."""

    def __init__(self, detok: Detokenizer):
        self.detok = detok
        self.jobs: queue.Queue = queue.Queue()
        self.thread = threading.Thread(target=self._run, name="output-processor", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while True:
            outputs = self.jobs.get()
            if outputs is None:
                return
            for rid, tok, first, last in outputs:
                self.detok.add(rid, tok)
                mark("first_token" if first else "token", rid)
                if last:
                    self.detok.finish(rid)
                    mark("finish", rid)

    def submit(self, outputs) -> None:
        self.jobs.put(outputs)

    def close(self) -> None:
        self.jobs.put(None)
        self.thread.join()


class Server:
    def __init__(self, args, cfg: LlamaConfig, device: str, dtype, tp: int = 1):
        self.args, self.cfg, self.device = args, cfg, device
        self.max_len = args.max_len
        self.slots = args.concurrency
        with torch.device(device):  # weights created on the GPU (no H2D of random weights)
            self.model = ServeModel(cfg, tp).to(dtype=dtype).eval()
        hd = cfg.dim // cfg.heads
        self.rows = (self.slots + 1) * self.max_len  # one slot more: the scratch slot padding rows write to
        kvh = cfg.kv_heads // tp  # --tp: this rank's KV heads
        self.caches = [(torch.zeros(self.rows, kvh, hd, device=device, dtype=dtype),
                        torch.zeros(self.rows, kvh, hd, device=device, dtype=dtype))
                       for _ in range(cfg.layers)]
        self.compute = torch.cuda.current_stream()
        self.copy_stream = torch.cuda.Stream() if args.async_h2d else None
        self.readback_stream = torch.cuda.Stream() if args.overlap or args.multi_step > 1 else None
        self.pin = not args.pageable_inputs
        cap = args.max_batched_tokens + self.slots
        self.host_buf = {name: self._host(cap) for name in ("input_ids", "positions", "slot_mapping")}
        rows = max(self.slots + 1, next(s for s in CAPTURE_SIZES if s >= self.slots))  # a padded decode batch
        self.host_buf.update({name: self._host(rows) for name in ("logits_indices", "prev_rows")})
        seqs = max(cap, rows)  # sequences of one step: at most one per token
        self.host_buf["seq_starts"] = self._host(2 * (seqs + 1), torch.int32)  # cu_seq_q, then cu_seq_k
        self.host_buf["seq_used"] = self._host(seqs, torch.int32)
        self.graphs: dict[int, tuple] = {}  # bucket size -> (graph, static Batch, sampled tokens)
        self.prev_tokens = None  # --overlap: the previous step's samples, on the GPU
        self.prev_rows: list[Request] = []
        self.pending = None  # --overlap: (pinned tokens, event, rows) of the step not yet read back
        # --multi-step: (samples on the GPU, event, rows) of the round's steps not yet read back, and the
        # persistent pinned buffer they are read into (vLLM's pinned_sampled_token_ids)
        self.staged: deque = deque()
        self.sampled_host = torch.zeros(rows, dtype=torch.int64).pin_memory() if args.multi_step > 1 else None
        # --copy-thread: the input copies on one thread, the --overlap readback on another
        self.h2d_worker = CopyWorker("input-copy") if args.copy_thread else None
        self.d2h_worker = CopyWorker("readback-copy") if args.copy_thread and args.overlap else None
        self.copies_in_flight = 0  # --copy-thread: input-copy jobs whose event the compute stream has not waited for
        self.detok = Detokenizer()
        self.outputs = OutputProcessor(self.detok) if args.async_output else None  # --async-output

    def close(self) -> None:
        for worker in (self.h2d_worker, self.d2h_worker, self.outputs):
            if worker is not None:
                worker.close()

    def _host(self, n: int, dtype=torch.int64) -> torch.Tensor:
        t = torch.zeros(n, dtype=dtype)
        return t.pin_memory() if self.pin else t

    # -- host side
    def schedule(self, running: list[Request]) -> tuple[list[tuple[Request, int]], list[Request]]:
        """Every decode, then prefill chunks within the rest of the token budget (first come, first
        served), as vLLM's scheduler does with chunked prefill."""
        budget = self.args.max_batched_tokens
        decodes = [r for r in running if r.decoding]
        budget -= len(decodes)
        chunks = []
        for r in running:
            if r.prefilling and budget > 0:
                n = min(len(r.prompt) - r.computed, budget)
                chunks.append((r, n))
                budget -= n
        return chunks, decodes

    def inputs(self, chunks, decodes) -> Batch:
        """Fill the host buffers (vectorised, as vLLM's input preparation) and copy them to the GPU."""
        ids, pos, slots_, logit_rows = [], [], [], []
        seqs, row, sampled = [], 0, []  # seqs: (first row, rows, slot, context after this step)
        for r, n in chunks:
            start = r.computed
            seqs.append((row, n, r.slot, start + n))
            ids += r.prompt[start:start + n]
            pos += range(start, start + n)
            slots_ += range(r.slot * self.max_len + start, r.slot * self.max_len + start + n)
            row += n
            if start + n == len(r.prompt):  # the chunk that completes the prompt samples the first token
                logit_rows.append(row - 1)
                sampled.append(r)
        n_pre = row
        for r in decodes:
            p = len(r.prompt) + r.sampled - 1  # position of the last sampled token, fed back now
            seqs.append((row, 1, r.slot, p + 1))
            ids.append(r.last_token)
            pos.append(p)
            slots_.append(r.slot * self.max_len + p)
            logit_rows.append(row)
            row += 1
            sampled.append(r)
        host = {"input_ids": ids, "positions": pos, "slot_mapping": slots_, "logits_indices": logit_rows}
        if self.graphs and decodes and not chunks:
            return self.graph_inputs(host, seqs, decodes, sampled)
        host.update(self.seq_lists(seqs, row))
        gpu = self.upload(host)
        self.overlap_ids(gpu["input_ids"], n_pre, decodes)
        cu = gpu["seq_starts"]
        return Batch(input_ids=gpu["input_ids"], positions=gpu["positions"], slot_mapping=gpu["slot_mapping"],
                     logits_indices=gpu["logits_indices"], cu_seq_q=cu[:len(seqs) + 1], cu_seq_k=cu[len(seqs) + 1:],
                     seq_used=gpu["seq_used"], max_q=max(n for _, n, _, _ in seqs),
                     max_k=max(u for _, _, _, u in seqs), max_len=self.max_len, seqs=seqs, num_prefill_tokens=n_pre,
                     num_decode=len(decodes), sampled_rows=sampled)

    def seq_lists(self, seqs: list[tuple[int, int, int, int]], total_rows: int) -> dict[str, list[int]]:
        """The varlen attention metadata of ``seqs``: query starts and cache-region starts (one
        buffer, two views) and the positions each sequence reads."""
        cu_q = [row for row, _, _, _ in seqs] + [total_rows]
        cu_k = [slot * self.max_len for _, _, slot, _ in seqs] + [self.rows]
        return {"seq_starts": cu_q + cu_k, "seq_used": [used for _, _, _, used in seqs]}

    def overlap_ids(self, input_ids: torch.Tensor, n_pre: int, decodes: list[Request]) -> None:
        """--overlap: decode token ids come from the previous step's samples on the GPU, never
        through the host."""
        if self.args.overlap and decodes and self.prev_tokens is not None:
            prev = {id(r): i for i, r in enumerate(self.prev_rows)}
            idx = self.upload({"prev_rows": [prev.get(id(r), 0) for r in decodes]})["prev_rows"]
            self.inputs_ready()
            input_ids[n_pre:n_pre + len(decodes)] = self.prev_tokens.index_select(0, idx)

    def graph_inputs(self, host: dict[str, list[int]], seqs, decodes: list[Request], sampled: list[Request]) -> Batch:
        """A decode-only step for a CUDA graph: the batch padded to the next bucket (padding rows
        write their K/V to the scratch slot and attend over one position), the host lists copied
        straight into that graph's static input buffers."""
        n = len(decodes)
        size = next(s for s in CAPTURE_SIZES if s >= n)
        pad = size - n
        scratch = self.slots
        seqs = seqs + [(n + i, 1, scratch, 1) for i in range(pad)]
        padded = {"input_ids": host["input_ids"] + [0] * pad, "positions": host["positions"] + [0] * pad,
                  "slot_mapping": host["slot_mapping"] + [scratch * self.max_len] * pad, **self.seq_lists(seqs, size)}
        _, static, _ = self.graphs[size]
        self.upload(padded, into=static.buffers)
        self.overlap_ids(static.input_ids, 0, decodes)
        return dataclasses.replace(static, num_decode=n, sampled_rows=sampled, graph_size=size, seqs=seqs)

    def upload(self, values: dict[str, list[int]], into: dict[str, torch.Tensor] | None = None
               ) -> dict[str, torch.Tensor]:
        """Each list into its persistent host buffer (pinned unless --pageable-inputs), then one
        non_blocking H2D copy each (into ``into[name]``, a graph's static buffer, when given): on
        the compute stream, or on the copy stream (--async-h2d) that the compute stream then
        waits for. With --copy-thread: :meth:`upload_threaded`."""
        if self.h2d_worker is not None:
            return self.upload_threaded(values, into)
        stream = self.copy_stream or self.compute
        out = {}
        with torch.cuda.stream(stream):
            for name, vals in values.items():
                buf = self.host_buf[name]
                n = max(len(vals), 1)
                if vals:
                    buf[:len(vals)] = torch.tensor(vals, dtype=buf.dtype)
                if into is not None:
                    out[name] = into[name][:n].copy_(buf[:n], non_blocking=True)
                else:
                    out[name] = buf[:n].to(self.device, non_blocking=True)
        if self.copy_stream is not None:
            self.compute.wait_stream(self.copy_stream)
        return out

    def upload_threaded(self, values: dict[str, list[int]], into: dict[str, torch.Tensor] | None = None
                        ) -> dict[str, torch.Tensor]:
        """--copy-thread: the scheduler thread fills the host buffers and allocates the GPU
        destinations (or takes a graph's static buffers), then hands the copies to the input-copy
        thread and goes on; that thread issues one non_blocking H2D copy each on its own stream and
        records an event, which the scheduler thread takes (:meth:`inputs_ready`) before the compute
        stream first uses the inputs."""
        out, pairs = {}, []
        for name, vals in values.items():
            buf = self.host_buf[name]
            n = max(len(vals), 1)
            if vals:
                buf[:len(vals)] = torch.tensor(vals, dtype=buf.dtype)
            dst = into[name][:n] if into is not None else torch.empty(n, dtype=buf.dtype, device=self.device)
            pairs.append((dst, buf[:n]))
            out[name] = dst
        stream = self.h2d_worker.stream

        def copy():
            for dst, src in pairs:
                dst.copy_(src, non_blocking=True)
            ev = torch.cuda.Event()
            ev.record(stream)
            return ev

        self.h2d_worker.submit(copy)
        self.copies_in_flight += 1
        return out

    def inputs_ready(self) -> None:
        """--copy-thread: the compute stream waits for every input copy handed out so far (the
        scheduler thread first takes each copy's event from the input-copy thread)."""
        while self.copies_in_flight:
            self.compute.wait_event(self.h2d_worker.result())
            self.copies_in_flight -= 1

    # -- one step
    def forward(self, batch: Batch):
        self.inputs_ready()
        if batch.graph_size:
            graph, _, out = self.graphs[batch.graph_size]
            graph.replay()  # the forward and the sampler of the bucket, one cudaGraphLaunch
            # --overlap and --multi-step read the tokens back on a side stream while the next replay rewrites `out`
            keep = self.args.overlap or self.args.multi_step > 1
            return out[:batch.num_decode].clone() if keep else out[:batch.num_decode]
        logits = self.model(batch, self.caches)
        return sample(logits, self.args.temperature)

    def capture_graphs(self) -> None:
        """--cuda-graphs, at start-up as vLLM does: one graph per bucket up to the concurrency, each
        over static input buffers (padding rows: the scratch slot). The attention metadata the
        graph is captured with has every row at the longest context of this run (--input-len +
        --output-len, in the scratch slot): on a GPU the values at capture do not matter (a replay
        reads the step's own), and an emulated capture prices each graph's attention with them."""
        dev, scratch = self.device, self.slots
        longest = min(self.args.input_len + self.args.output_len, self.max_len)
        top = next(s for s in CAPTURE_SIZES if s >= self.slots)
        for size in [s for s in CAPTURE_SIZES if s <= top]:
            meta = self.seq_lists([(i, 1, scratch, longest) for i in range(size)], size)
            buffers = {"input_ids": torch.zeros(size, dtype=torch.int64, device=dev),
                       "positions": torch.zeros(size, dtype=torch.int64, device=dev),
                       "slot_mapping": torch.full((size,), scratch * self.max_len, dtype=torch.int64, device=dev),
                       "seq_starts": torch.tensor(meta["seq_starts"], dtype=torch.int32, device=dev),
                       "seq_used": torch.tensor(meta["seq_used"], dtype=torch.int32, device=dev)}
            static = Batch(input_ids=buffers["input_ids"], positions=buffers["positions"],
                           slot_mapping=buffers["slot_mapping"], logits_indices=torch.arange(size, device=dev),
                           cu_seq_q=buffers["seq_starts"][:size + 1], cu_seq_k=buffers["seq_starts"][size + 1:],
                           seq_used=buffers["seq_used"], max_q=1, max_k=self.max_len, max_len=self.max_len,
                           seqs=[], num_prefill_tokens=0, num_decode=size, buffers=buffers)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = sample(self.model(static, self.caches), self.args.temperature)
            self.graphs[size] = (graph, static, out)

    def advance(self, batch: Batch, tokens) -> Batch:
        """--multi-step: the inputs of the round's next decode step, made on the GPU from this step's
        (vLLM's ``advance_step``): the samples become the token ids, and every row's position, cache
        slot and context length move one on (four in-place ops on the compute stream; vLLM fuses them
        into one kernel). No host buffer is filled and nothing is copied H2D. Padding rows of a
        graph's bucket are left as they are (the scratch slot, one position)."""
        n = batch.num_decode
        batch.input_ids[:n].copy_(tokens[:n])
        batch.positions[:n].add_(1)
        batch.slot_mapping[:n].add_(1)
        batch.seq_used[:n].add_(1)
        seqs = [(row, q, slot, used + 1) if i < n else (row, q, slot, used)
                for i, (row, q, slot, used) in enumerate(batch.seqs)]
        return dataclasses.replace(batch, seqs=seqs, max_k=batch.max_k if batch.graph_size else batch.max_k + 1)

    def stage(self, tokens, rows) -> None:
        """--multi-step: an event after this step's sampler on the compute stream; its tokens are read
        back later (:meth:`flush`)."""
        ev = torch.cuda.Event()
        ev.record(self.compute)
        self.staged.append((tokens, ev, rows))

    def flush(self, keep: int, finished_cb) -> None:
        """--multi-step: read back every staged step but the last ``keep`` (vLLM pythonizes a step's
        output while the next one runs, and the round's last one at its end): on the readback stream,
        after the step's event, a D2H copy of its samples into the pinned buffer, waited for, then
        output processing of the tokens of requests that still want them (a row whose request already
        has every token runs on to the end of the round; its token is dropped)."""
        while len(self.staged) > keep:
            tokens, ev, rows = self.staged.popleft()
            host = self.sampled_host[:tokens.shape[0]]
            with torch.cuda.stream(self.readback_stream):
                self.readback_stream.wait_event(ev)
                host.copy_(tokens, non_blocking=True)
                done = torch.cuda.Event()
                done.record(self.readback_stream)
            done.synchronize()
            wanted = [(r, tok) for r, tok in zip(rows, host.tolist()) if r.delivered < r.output_len]
            self.deliver([tok for _, tok in wanted], [r for r, _ in wanted], finished_cb)

    def read_back(self, tokens, rows, finished_cb):
        """The per-step D2H readback of the sampled tokens, then the markers of their requests."""
        if self.d2h_worker is not None:
            self.read_back_threaded(tokens, rows, finished_cb)
        elif self.args.overlap:
            host = torch.empty(tokens.shape, dtype=torch.int64).pin_memory()
            ev = torch.cuda.Event()
            ev.record(self.compute)
            with torch.cuda.stream(self.readback_stream):
                self.readback_stream.wait_event(ev)
                host.copy_(tokens, non_blocking=True)
                done = torch.cuda.Event()
                done.record(self.readback_stream)
            previous, self.pending = self.pending, (host, done, rows)
            if previous is not None:
                previous[1].synchronize()
                self.deliver(previous[0].tolist(), previous[2], finished_cb)
        else:
            self.deliver(tokens.tolist(), rows, finished_cb)

    def read_back_threaded(self, tokens, rows, finished_cb):
        """--overlap --copy-thread: the readback-copy thread waits (on its stream) for the
        forward just launched, copies its tokens D2H into pinned memory, waits for that copy and
        hands the token list back; the scheduler thread takes the previous step's list, one step
        later, as --overlap does."""
        host = torch.empty(tokens.shape, dtype=torch.int64).pin_memory()
        ev = torch.cuda.Event()
        ev.record(self.compute)
        stream = self.d2h_worker.stream

        def copy():
            stream.wait_event(ev)
            host.copy_(tokens, non_blocking=True)
            done = torch.cuda.Event()
            done.record(stream)
            done.synchronize()
            return host.tolist()

        self.d2h_worker.submit(copy)
        previous, self.pending = self.pending, rows
        if previous is not None:
            self.deliver(self.d2h_worker.result(), previous, finished_cb)

    def drain(self, finished_cb):
        if self.pending is not None and self.d2h_worker is not None:
            self.deliver(self.d2h_worker.result(), self.pending, finished_cb)
            self.pending = None
        elif self.pending is not None:
            self.pending[1].synchronize()
            self.deliver(self.pending[0].tolist(), self.pending[2], finished_cb)
            self.pending = None

    def deliver(self, token_ids, rows, finished_cb):
        """The host has these tokens in hand: output processing (incremental detokenization, the
        markers), then requests that are done leave. Lengths were fixed up front, so no decision
        depends on the values (stand-ins under emulation). --async-output: :meth:`deliver_async`."""
        if self.outputs is not None:
            return self.deliver_async(token_ids, rows, finished_cb)
        for r, tok in zip(rows, token_ids):
            r.delivered += 1
            r.last_token = int(tok)
            self.detok.add(r.rid, r.last_token)
            mark("first_token" if r.delivered == 1 else "token", r.rid)
            if r.delivered >= r.output_len:
                self.detok.finish(r.rid)
                mark("finish", r.rid)
                finished_cb(r)

    def deliver_async(self, token_ids, rows, finished_cb):
        """--async-output (vLLM's asynchronous output processor): the scheduler thread keeps only
        its own accounting (tokens delivered, the last token for the next step's input, a finished
        request's slot freed now) and hands the step's outputs to the output thread, which
        detokenizes them and writes the markers while the scheduler thread prepares and launches
        the next step."""
        outputs = []
        for r, tok in zip(rows, token_ids):
            r.delivered += 1
            r.last_token = int(tok)
            outputs.append((r.rid, r.last_token, r.delivered == 1, r.delivered >= r.output_len))
            if r.delivered >= r.output_len:
                finished_cb(r)
        self.outputs.submit(outputs)


def make_requests(args, vocab: int) -> list[Request]:
    rng = random.Random(args.seed)
    reqs = []
    for i in range(args.requests):
        n_in = max(1, int(args.input_len * rng.uniform(args.range_ratio, 1.0)))
        n_out = max(1, int(args.output_len * rng.uniform(args.range_ratio, 1.0)))
        reqs.append(Request(rid=i, prompt=[rng.randrange(vocab) for _ in range(n_in)], output_len=n_out))
    return reqs


def check_args(args) -> str | None:
    """What is wrong with the options (one line), or None."""
    if not 1 <= args.concurrency <= MAX_CONCURRENCY:
        return f"--concurrency must be in [1, {MAX_CONCURRENCY}] (the largest CUDA-graph batch), got {args.concurrency}"
    if args.requests < 1:
        return f"--requests must be at least 1, got {args.requests}"
    if args.input_len < 1 or args.output_len < 1:
        return "--input-len and --output-len must be at least 1"
    if args.input_len + args.output_len > args.max_len:
        return f"--input-len + --output-len ({args.input_len + args.output_len}) exceeds --max-len ({args.max_len})"
    if args.max_batched_tokens < args.concurrency:
        return (f"--max-batched-tokens ({args.max_batched_tokens}) must hold one decode token per request "
                f"(--concurrency {args.concurrency})")
    if not 0 < args.range_ratio <= 1:
        return f"--range-ratio must be in (0, 1], got {args.range_ratio}"
    if args.multi_step < 1:
        return f"--multi-step must be at least 1, got {args.multi_step}"
    if args.multi_step > 1 and args.overlap:
        return ("--multi-step with --overlap: multi-step scheduling belongs to a synchronous engine loop "
                "(vLLM's v0 engine); no engine runs it with the overlap scheduler")
    if args.input_len + args.output_len + args.multi_step - 1 > args.max_len:
        return (f"--input-len + --output-len + --multi-step - 1 ({args.input_len + args.output_len + args.multi_step - 1})"
                f" exceeds --max-len ({args.max_len}): a round's rows may run up to --multi-step - 1 steps "
                "past their last token")
    if args.cuda_graphs and not VARLEN:
        return "--cuda-graphs needs torch.nn.attention.varlen.varlen_attn with seqused_k (a newer PyTorch)"
    return None


def init_tensor_parallel(cfg: LlamaConfig) -> tuple[int, str | None]:
    """--tp: join the process group (``RANK``/``WORLD_SIZE`` from the launcher) and check that the
    model splits evenly; (world size, what is wrong or None)."""
    import os

    import torch.distributed as dist

    if "WORLD_SIZE" not in os.environ:
        return 1, "--tp needs the ranks of torch.distributed: run it with tracegen capture --nproc N or torchrun"
    dist.init_process_group("nccl")
    tp = dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", dist.get_rank())))
    FRONTEND[0] = dist.get_rank() == 0
    for name, n in (("heads", cfg.heads), ("kv_heads", cfg.kv_heads), ("ffn", cfg.ffn), ("vocab", cfg.vocab)):
        if n % tp:
            return tp, f"--tp over {tp} ranks: the model's {name} ({n}) does not split evenly"
    return tp, None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(MODELS), default="tiny")
    p.add_argument("--layers", type=int, help="Keep only this many layers (a slice of a large model).")
    p.add_argument("--requests", type=int, default=16)
    p.add_argument("--concurrency", type=int, default=4, help=f"Requests in the server at once (1-{MAX_CONCURRENCY}).")
    p.add_argument("--input-len", type=int, default=256)
    p.add_argument("--output-len", type=int, default=32)
    p.add_argument("--range-ratio", type=float, default=0.5,
                   help="Lengths are drawn uniformly in [ratio x len, len] (random-range-ratio).")
    p.add_argument("--max-len", type=int, default=2048, help="KV-cache positions per request slot.")
    p.add_argument("--max-batched-tokens", type=int, default=2048, help="Token budget of one step (chunked prefill).")
    p.add_argument("--temperature", type=float, default=0.8)
    p.add_argument("--overlap", action="store_true",
                   help="Schedule one step ahead; read tokens back on a side stream (SGLang overlap scheduler).")
    p.add_argument("--async-h2d", action="store_true",
                   help="Input H2D copies on their own stream, off the compute stream (the SGLang/vLLM CC fix).")
    p.add_argument("--copy-thread", action="store_true",
                   help="Input H2D copies (and, with --overlap, the token readback) on copy threads of their "
                        "own, each with its own stream (SGLang's CC fix).")
    p.add_argument("--async-output", action="store_true",
                   help="Output processing (detokenization, request markers) on a thread of its own while the "
                        "next step runs (vLLM's async output processor).")
    p.add_argument("--tp", action="store_true",
                   help="Tensor parallelism over the ranks of torch.distributed (run with tracegen capture "
                        "--nproc N or torchrun): each rank holds 1/N of the heads, the FFN and the LM head.")
    p.add_argument("--multi-step", type=int, default=1, metavar="N",
                   help="Decode-only steps run N at a time from one scheduling (vLLM's --num-scheduler-steps); "
                        "1: every step scheduled (default).")
    p.add_argument("--pageable-inputs", action="store_true", help="Host input buffers in pageable memory.")
    p.add_argument("--cuda-graphs", action="store_true", help="Decode-only steps as CUDA-graph replays.")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    problem = check_args(args)
    if problem:
        print(f"serving.py: {problem}", file=sys.stderr)
        sys.exit(2)
    cfg = MODELS[args.model]
    if args.layers:
        cfg = dataclasses.replace(cfg, layers=args.layers)

    tp = 1
    if args.tp:
        tp, problem = init_tensor_parallel(cfg)
        if problem:
            print(f"serving.py: {problem}", file=sys.stderr)
            sys.exit(2)
    torch.manual_seed(args.seed)
    server = Server(args, cfg, "cuda", torch.bfloat16, tp)
    if args.cuda_graphs:
        with torch.inference_mode():
            server.capture_graphs()
    waiting = deque(make_requests(args, cfg.vocab))
    running: list[Request] = []
    free_slots = list(range(args.concurrency))
    done = 0

    def finished(r: Request) -> None:
        nonlocal done
        running.remove(r)
        free_slots.append(r.slot)
        done += 1

    step = 0
    with torch.inference_mode():
        while waiting or running:
            with torch.profiler.record_function(f"ProfilerStep#{step}"):
                while waiting and free_slots:  # a request arrives when a client's previous one is done
                    r = waiting.popleft()
                    free_slots.sort()
                    r.slot = free_slots.pop(0)
                    running.append(r)
                    mark("arrive", r.rid)
                chunks, decodes = server.schedule(running)
                step_marker(chunks, decodes)
                round_steps = args.multi_step if decodes and not chunks else 1  # --multi-step: a decode-only round
                if chunks or decodes:
                    batch = server.inputs(chunks, decodes)
                    tokens = server.forward(batch)
                    for r, n in chunks:
                        r.computed += n
                    for r in batch.sampled_rows:
                        r.sampled += 1
                    if args.overlap:
                        server.prev_tokens, server.prev_rows = tokens, batch.sampled_rows
                    if round_steps > 1:
                        server.stage(tokens, batch.sampled_rows)
                    else:
                        server.read_back(tokens, batch.sampled_rows, finished)
                else:  # everything is sampled; only the last readback is outstanding (--overlap)
                    server.drain(finished)
            step += 1
            for k in range(1, round_steps):  # --multi-step: the round's later GPU steps, each a step of its own
                with torch.profiler.record_function(f"ProfilerStep#{step}"):
                    step_marker([], decodes)
                    batch = server.advance(batch, tokens)
                    tokens = server.forward(batch)
                    for r in batch.sampled_rows:
                        r.sampled += 1
                    server.stage(tokens, batch.sampled_rows)
                    server.flush(0 if k == round_steps - 1 else 1, finished)
                step += 1
    server.close()
    print(f"served {done} requests in {step} steps ({args.model}, concurrency {args.concurrency})", file=sys.stderr)


if __name__ == "__main__":
    main()
