"""The request-level discrete-event loop of the serving simulator (docs/serving.md, "The
request-level simulator").

The server holds at most ``max_seqs`` requests (KV-cache slots, one per request, as the captured
example's slots). Each engine step, at its start: the requests that have arrived by then wait in
arrival order; the scheduler admits them into free slots (:mod:`replay.serve.schedulers`); the
step runs every decoding request (one token each) and then prefill chunks first come, first
served within the token budget ``max_batched_tokens`` (chunked prefill). The step lasts the price
of its shape (prefill tokens, decode requests) under the protocol (:mod:`replay.serve.steps`),
composed with the scheduler's host time. At the step's end the tokens it sampled are delivered:
a request whose prompt completed gets its first token, each decoding request its next one; a
request with all its output tokens leaves and its slot is freed (one step later under an overlap
scheduler). A closed-loop client sends its next request at its previous one's last token.

So CC feeds back: a slower step delays every token of the batch, so requests stay longer, slots
free later, waiting requests queue longer (TTFT) and open-loop batches grow.

Runs of decode-only steps in which nothing arrives, finishes or is admitted have one shape and
one price; they are advanced together (one event), so a simulation costs per arrival and finish,
not per token.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from fastrack_core.errors import ConfigError
from replay.serve.schedulers import Scheduler, host_extra_ns
from replay.serve.steps import PriceTable
from replay.serve.workloads import Workload


@dataclass
class SimResult:
    protocol: str
    scheduler: str
    arrival_ns: np.ndarray
    admit_ns: np.ndarray
    first_ns: np.ndarray
    last_ns: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray
    steps: int
    busy_ns: int
    itl_period_ns: np.ndarray  # inter-token gaps: time between the deliveries of two consecutive steps' tokens
    itl_weight: np.ndarray  # ... times the requests that got a token from both (the later step's decodes)
    batch_tokens: np.ndarray  # per run: tokens per step (prefill + decodes)
    batch_steps: np.ndarray  # per run: steps
    mechanism_ns: dict[str, float] = field(default_factory=dict)
    host_extra_ns: int = 0


def simulate(work: Workload, table: PriceTable, sched: Scheduler, max_seqs: int, max_batched_tokens: int,
             host_time: str = "capture") -> SimResult:
    if max_seqs < 1:
        raise ConfigError("--max-seqs must be at least 1")
    if max_batched_tokens < max_seqs:
        raise ConfigError("--max-batched-tokens must hold one decode token per request (at least --max-seqs)")
    n = work.n
    n_in = work.input_tokens.astype(np.int64)
    n_out = work.output_tokens.astype(np.int64)
    closed = work.arrival_ns is None
    arrival = np.full(n, -1, np.int64) if closed else work.arrival_ns.astype(np.int64).copy()
    admit = np.full(n, -1, np.int64)
    first = np.full(n, -1, np.int64)
    last = np.full(n, -1, np.int64)
    waiting: deque[int] = deque()
    nxt = 0  # next request id to arrive
    if closed:
        nxt = min(work.concurrency, n)
        arrival[:nxt] = 0
        waiting.extend(range(nxt))
    prefill: deque[list[int]] = deque()  # [rid, prompt tokens computed]
    decoding: list[tuple[int, int]] = []  # heap (step of its last sample, rid)
    releasing: list[tuple[int, int]] = []  # heap (step after which its slot is freed, rid)
    held = 0
    t = 0
    step = 0  # index of the next step
    busy = 0
    extra_total = 0
    periods: dict[tuple[int, int], tuple[int, int]] = {}
    seg_p, seg_w, seg_tok, seg_k = [], [], [], []
    mech: dict[str, float] = {}
    mech_runs: dict[tuple[int, int], int] = {}
    lag = sched.finish_lag

    def period_of(shape: tuple[int, int]) -> tuple[int, ...]:
        hit = periods.get(shape)
        if hit is None:
            price = table.price(*shape)
            extra = host_extra_ns(host_time, price.gpu_ns)
            per = sched.period(price, extra)
            # where in the step tokens reach the host: a synchronous loop its own, at its token
            # markers (else its end); an overlap loop the previous step's, read after this launch
            # (an overlap loop hands out the previous step's tokens: the offset of this step's
            # token markers, 0 without them)
            if lag:
                tok = min(price.token_ns or 0, per)
            else:
                tok = min(price.token_ns, per) if price.token_ns is not None else per
            hit = periods[shape] = (per, extra, min(price.admit_ns, per), tok, max(price.gpu_end_ns, price.gpu_ns),
                                    price.host_ns + extra, price.busy_ns, price.sync_ns, price.sync_gpu_end_ns)
        return hit

    def deliver(firsts: list[int], done: list[int], now: int) -> None:
        nonlocal nxt
        for rid in firsts:
            first[rid] = now
        for rid in done:
            last[rid] = now
            if closed and nxt < n:
                arrival[nxt] = now
                heapq.heappush(future, (now, nxt))
                nxt += 1

    def finish(rid: int, f: int) -> None:
        nonlocal held
        if lag:
            heapq.heappush(releasing, (f + lag, rid))
        else:
            held -= 1

    future: list[tuple[int, int]] = []  # closed loop: (arrival, rid) of requests sent, not yet arrived
    # overlap: tokens sampled, not yet read back, and when the GPU finished them
    pending: tuple[list[int], list[int]] | None = None
    gpu_free = 0  # overlap: when the GPU has finished the last step launched
    last_read: int | None = None  # when the last step's tokens whose delivery is known reached the host
    pending_d = 0  # overlap: the decodes of the step not yet read back

    def read(now: int, decodes: int, count: int = 1, every: int = 0) -> None:
        """``count`` steps' tokens reach the host, the first at ``now``, the others ``every`` ns
        apart: a request decoding in a step got its previous token from the step before, so the
        step gives each of its ``decodes`` requests one inter-token gap, from the previous
        delivery to this one (the first token's gap is its TTFT, never an ITL)."""
        nonlocal last_read
        if decodes and last_read is not None:
            _gap(now - last_read, decodes)
        if decodes and count > 1:
            _gap(every, decodes * (count - 1))
        last_read = now + (count - 1) * every

    def _gap(g: int, w: int) -> None:
        if seg_p and seg_p[-1] == g:
            seg_w[-1] += w
        else:
            seg_p.append(g)
            seg_w.append(w)
    while True:
        if closed:
            while future and future[0][0] <= t:
                waiting.append(heapq.heappop(future)[1])
        else:
            while nxt < n and arrival[nxt] <= t:
                waiting.append(nxt)
                nxt += 1
        admitted = []
        if sched.continuous or held == 0:
            while waiting and held < max_seqs:
                rid = waiting.popleft()
                admitted.append(rid)
                prefill.append([rid, 0])
                held += 1
        d = len(decoding)
        if not d and not prefill:
            if pending is not None:  # the last readback (the loop's drain)
                read(max(t, gpu_free), pending_d)
                deliver(pending[0], pending[1], max(t, gpu_free))
                pending = None
                continue
            if releasing:  # nothing runs: slots still held after their last step are free now
                held -= len(releasing)
                releasing.clear()
                continue
            if not closed and nxt < n:
                t = max(t, int(arrival[nxt]))
                continue
            if closed and future:
                t = max(t, future[0][0])
                continue
            if waiting:  # a static batch waits for an empty server; it is empty now
                continue
            break
        budget = max_batched_tokens - d
        chunks = []
        for entry in prefill:
            if budget <= 0:
                break
            take = min(int(n_in[entry[0]]) - entry[1], budget)
            chunks.append((entry, take))
            budget -= take
        p_tok = sum(c for _, c in chunks)
        shape = (p_tok, d)
        per, extra, admit_off, tok_off, gpu_end, host_ns, gpu_busy, sync_off, sync_end = period_of(shape)
        for rid in admitted:
            admit[rid] = t + admit_off
        if pending is not None:
            read(max(t + tok_off, gpu_free), pending_d)
            deliver(pending[0], pending[1], max(t + tok_off, gpu_free))
            pending = None
        k = 1
        if not chunks:
            k = decoding[0][0] - step + 1
            if releasing:
                k = min(k, releasing[0][0] - step + 1)
            can_admit = held < max_seqs and (sched.continuous or held == 0)
            upcoming = future[0][0] if closed and future else (int(arrival[nxt]) if not closed and nxt < n else None)
            if can_admit and upcoming is not None and per > 0:
                k = min(k, max(1, math.ceil((upcoming - t) / per)))
            k = max(k, 1)
        t_start = t
        if lag:
            # overlap: the host and the GPU as two stages of a pipeline. The GPU finishes a step no
            # earlier than the step's own timeline has it (its last GPU node gpu_end into the step,
            # the host issuing its work as it goes) and no earlier than its busy time after the GPU
            # finished the previous step (the work the host issued meanwhile queued behind it); the
            # host, after launching, reads the previous step's tokens (no earlier than the GPU
            # finished them) and then does the rest of its work for the step. Where the host first
            # waits on the GPU (sync_off) it waits for the earlier steps' work (the step graph has
            # nothing before it to wait for): what follows, and the GPU work issued after it, later
            after = max(host_ns - tok_off, 0)
            for i in range(k):
                ready_prev = gpu_free
                stall = max(ready_prev - (t + sync_off), 0) if sync_off is not None else 0
                gpu_free = max(t + gpu_end, t + stall + sync_end if sync_end else 0, gpu_free + gpu_busy)
                got = max(t + tok_off + (stall if sync_off is not None and sync_off <= tok_off else 0),
                          ready_prev)
                if i:
                    read(got, d)
                t = max(t + host_ns + stall, got + after)
            pending_d = d
        else:
            t_tok = t + (k - 1) * per + tok_off  # the last step of the run: its tokens reach the host
            read(t + tok_off, d, k, per)
            t += k * per
        busy += t - t_start
        extra_total += k * extra
        mech_runs[shape] = mech_runs.get(shape, 0) + k
        step += k
        done_step = step - 1
        seg_tok.append(p_tok + d)
        seg_k.append(k)
        for entry, take in chunks:
            entry[1] += take
        firsts, done = [], []
        while prefill and prefill[0][1] >= n_in[prefill[0][0]]:
            rid = prefill.popleft()[0]
            firsts.append(rid)
            if n_out[rid] == 1:
                done.append(rid)
                finish(rid, done_step)
            else:
                heapq.heappush(decoding, (done_step + int(n_out[rid]) - 1, rid))
        # chunks are a prefix of the queue and all but the last complete their prompt: completed
        # prompts leave from the front, a partial last chunk keeps its place
        while decoding and decoding[0][0] <= done_step:
            _, rid = heapq.heappop(decoding)
            done.append(rid)
            finish(rid, done_step)
        if lag:
            pending = (firsts, done)
        else:
            deliver(firsts, done, t_tok)
        while releasing and releasing[0][0] <= done_step:
            heapq.heappop(releasing)
            held -= 1
    for shape, k in mech_runs.items():
        for lab, v in table.price(*shape).mechanism_ns.items():
            mech[lab] = mech.get(lab, 0.0) + v * k
    return SimResult(protocol=table.protocol, scheduler=sched.name, arrival_ns=arrival, admit_ns=admit,
                     first_ns=first, last_ns=last, input_tokens=n_in, output_tokens=n_out, steps=step, busy_ns=busy,
                     itl_period_ns=np.array(seg_p, np.int64), itl_weight=np.array(seg_w, np.int64),
                     batch_tokens=np.array(seg_tok, np.int64), batch_steps=np.array(seg_k, np.int64),
                     mechanism_ns=mech, host_extra_ns=extra_total)
