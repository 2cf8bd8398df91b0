"""A training-style loop that times itself with time.perf_counter() and prints ms/iter, as
benchmark scripts do (tests/test_capture_clock.py). Each iteration is one ProfilerStep: ten
8192^3 bf16 GEMMs and a synchronize, so the emulated step (about 14 ms on the H100 model) is
far longer than this machine needs to run it on meta tensors."""

import sys
import time

import torch

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 4
x = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
torch.cuda.synchronize()
prev = time.perf_counter()
for i in range(steps):
    with torch.profiler.record_function(f"ProfilerStep#{i}"):
        for _ in range(10):
            y = x @ x
        torch.cuda.synchronize()
    now = time.perf_counter()
    print(f"step {i}: {(now - prev) * 1e3:.6f} ms/iter")
    prev = now
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
start.record()
y = x @ x
end.record()
end.synchronize()
print(f"event: {start.elapsed_time(end):.6f} ms")
