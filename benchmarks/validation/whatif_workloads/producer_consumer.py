"""What-if workload: a producer stream computes chunks and records an event after each; a
consumer stream waits for that event and reduces the chunk; the host waits for the consumer's
last event and reads a scalar back (one per iteration). Written for a CUDA GPU."""

import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--iters", type=int, default=5)
p.add_argument("--chunks", type=int, default=6)
p.add_argument("--n", type=int, default=1536)
args = p.parse_args()

producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
w = torch.randn(args.n, args.n, device="cuda", dtype=torch.bfloat16)
src = torch.randn(args.n, args.n, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
for it in range(args.iters):
    with torch.profiler.record_function(f"ProfilerStep#{it}"):
        total = None
        done = torch.cuda.Event()
        for _ in range(args.chunks):
            ready = torch.cuda.Event()
            with torch.cuda.stream(producer):
                chunk = torch.nn.functional.gelu(src @ w)
                ready.record()
            with torch.cuda.stream(consumer):
                consumer.wait_event(ready)
                part = chunk.float().square().sum()
                total = part if total is None else total + part
        with torch.cuda.stream(consumer):
            done.record()
        done.synchronize()
        print(it, total.item())
