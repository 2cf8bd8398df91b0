"""Qwen1.5-0.5B-like decoder forward pass (the setup of the real H100 trace
h100_qwen1.5_0.5b_chat: base model without LM head, bf16, batch 16 x 559 tokens, SDPA flash,
inference mode), one forward per ``ProfilerStep#N``. Written for a CUDA GPU; random weights."""

import argparse

import torch

from toy_models import CONFIGS, Llama

p = argparse.ArgumentParser()
p.add_argument("--batch", type=int, default=16)
p.add_argument("--seq", type=int, default=559)
p.add_argument("--iters", type=int, default=2)
args = p.parse_args()

cfg = CONFIGS["qwen1.5-0.5b"]
cfg.lm_head = False
device = "cuda"
with torch.device(device):
    model = Llama(cfg).to(torch.bfloat16).eval()
ids = torch.randint(0, cfg.vocab, (args.batch, args.seq), device=device)
mask = torch.ones(args.batch, args.seq, dtype=torch.long, device=device)
with torch.inference_mode():
    for i in range(args.iters):
        with torch.profiler.record_function(f"ProfilerStep#{i}"):
            # Hugging Face checks the mask on the host before choosing the SDPA path
            if not bool(torch.all(mask == 1)):
                raise SystemExit("unexpected mask")
            hidden = model(ids)
        torch.cuda.synchronize()
print(tuple(hidden.shape))
