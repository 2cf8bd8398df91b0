"""A decode loop whose inputs a producer thread pins and copies to the GPU on a side stream and
hands over through a queue.Queue (the SGLang-style input copy thread). --fail N: the producer
raises before its N-th batch (the main thread is then waiting on the queue)."""

import argparse
import queue
import threading

import torch

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=4)
p.add_argument("--fail", type=int, default=-1)
args = p.parse_args()

dev = "cuda"
w = torch.randn(256, 256, device=dev)
q: queue.Queue = queue.Queue(maxsize=2)
side = torch.cuda.Stream()


def producer():
    for i in range(args.steps):
        if i == args.fail:
            raise RuntimeError("producer failed")
        x = torch.randn(64, 256).pin_memory()
        with torch.cuda.stream(side):
            xd = x.to(dev, non_blocking=True)
            ev = torch.cuda.Event()
            ev.record(side)
        q.put((xd, ev))
    q.put(None)


t = threading.Thread(target=producer)
t.start()
h = torch.zeros(64, 256, device=dev)
while True:
    item = q.get()
    if item is None:
        break
    xd, ev = item
    torch.cuda.current_stream().wait_event(ev)
    h = torch.relu(xd @ w + h)
    tok = h.sum().item()
t.join()
torch.cuda.synchronize()
