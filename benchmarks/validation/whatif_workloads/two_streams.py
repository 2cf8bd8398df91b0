"""What-if workload: two CUDA streams with independent work. Stream A runs a GEMM chain and
uploads an 8 MiB pinned buffer; stream B runs another GEMM chain and downloads its result into
pinned memory; the host synchronises the device once per iteration. Written for a CUDA GPU."""

import argparse

import torch

p = argparse.ArgumentParser()
p.add_argument("--iters", type=int, default=6)
p.add_argument("--n", type=int, default=2048)
args = p.parse_args()

a_stream, b_stream = torch.cuda.Stream(), torch.cuda.Stream()
a = torch.randn(args.n, args.n, device="cuda", dtype=torch.bfloat16)
b = torch.randn(args.n, args.n, device="cuda", dtype=torch.bfloat16)
upload = torch.randn(8 * 1024 * 1024 // 4).pin_memory()  # 8 MiB
download = torch.empty(args.n, args.n, dtype=torch.bfloat16).pin_memory()
torch.cuda.synchronize()
for it in range(args.iters):
    with torch.profiler.record_function(f"ProfilerStep#{it}"):
        with torch.cuda.stream(a_stream):
            x = a
            for _ in range(4):
                x = torch.relu(x @ a)
            staged = upload.to("cuda", non_blocking=True)
        with torch.cuda.stream(b_stream):
            y = b
            for _ in range(4):
                y = torch.tanh(y @ b)
            download.copy_(y, non_blocking=True)
        torch.cuda.synchronize()
print("done", float(download[0, 0]))
