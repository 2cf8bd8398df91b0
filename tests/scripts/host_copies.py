"""Copies PyTorch makes below Python, one ``ProfilerStep#N`` per case (this project's own code).
argv[1]: a checkpoint written by the test (``torch.save``) to load with ``map_location``.
Value checks run outside the annotated steps, so each step holds only its case's ops."""

import sys

import torch

rf = torch.profiler.record_function
v = torch.arange(32, dtype=torch.float32, device="cuda").view(4, 8)
y = torch.zeros(4, dtype=torch.long, device="cuda")
t = torch.zeros(5, dtype=torch.long, device="cuda")
idx = torch.tensor([0, 1], device="cuda")
torch.cuda.synchronize()
with rf("ProfilerStep#0"):
    a = v[:, [-1]]                    # list index: the index (8 bytes) is copied H2D
with rf("ProfilerStep#1"):
    b = v[range(4), y]                # range index: 4 x int64 copied H2D
with rf("ProfilerStep#2"):
    t[2] = 3                          # 0-d destination: an H2D copy of the value (8 bytes)
with rf("ProfilerStep#3"):
    v[1] = -1.0                       # a row: one fill kernel (the value is read on the host)
with rf("ProfilerStep#4"):
    v[idx] = 2.0                      # index_put_: the value moves H2D (4 bytes)
with rf("ProfilerStep#5"):
    v[v > 30] = 1.0                   # a boolean mask on the device: masked_fill, no copy
maps = ["cuda", torch.device("cuda"), "cuda:0", lambda storage, loc: storage.cuda(), {"cpu": "cuda"}]
loaded = []
for i, ml in enumerate(maps):
    with rf(f"ProfilerStep#{6 + i}"):
        loaded.append(torch.load(sys.argv[1], map_location=ml))
with rf("ProfilerStep#11"):           # empty tensors: no copy, no sync
    e = torch.empty(0, device="cuda").cpu()
    f = torch.empty(0).cuda()
    g = torch.tensor([], device="cuda")
    h = v[[]]
with rf("ProfilerStep#12"):          # the value checks: reads (D2H + syncs)
    assert a.tolist() == [[7.0], [15.0], [23.0], [31.0]], a.tolist()
    assert b.tolist() == [0.0, 8.0, 16.0, 24.0]
    assert t.tolist() == [0, 0, 3, 0, 0]
    assert v[1].tolist() == [2.0] * 8 and v[0, 0].item() == 2.0 and v[3, 7].item() == 1.0
    assert h.shape == (0, 8) and e.shape == (0,)
    for ck in loaded:
        assert ck["w"].is_cuda and ck["tied"].is_cuda and ck["step"] == 3
        assert ck["ids"].tolist() == [1, 2, 3] and ck["w"][1, 1].item() == 5.0 and ck["row"][2].item() == 6.0
print("ok")
