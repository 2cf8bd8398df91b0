"""Event and Future handoffs between threads: a worker waits on a threading.Event the main thread
sets, runs a matmul, and a ThreadPoolExecutor task returns a GPU result the main thread waits for."""

import concurrent.futures
import threading

import torch

w = torch.randn(128, 128, device="cuda")
go = threading.Event()
out = {}


def worker():
    go.wait()
    out["y"] = (w @ w).relu()


t = threading.Thread(target=worker)
t.start()
x = w * 2
go.set()
t.join()
with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
    fut = pool.submit(lambda: (out["y"] @ w).sum())
    s = fut.result()
print(float(s.item()) == float(s.item()))
