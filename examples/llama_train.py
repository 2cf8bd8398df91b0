"""Llama-style decoder training on synthetic tokens (written for a CUDA GPU).

    python examples/llama_train.py                      # tiny config, 3 steps
    python examples/llama_train.py --config llama3-8b --batch 1 --seq 2048 --steps 2
    tracegen capture examples/llama_train.py -- --config llama3-8b --steps 2   # no GPU needed
"""

import argparse
import dataclasses
import time

import torch
import torch.nn.functional as F
from toy_models import CONFIGS, Llama


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    p.add_argument("--dim", type=int)
    p.add_argument("--layers", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument("--kv-heads", type=int)
    p.add_argument("--ffn", type=int)
    p.add_argument("--vocab", type=int)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=256)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--lr", type=float, default=3e-4)
    args = p.parse_args()
    cfg = dataclasses.replace(CONFIGS[args.config], **{k: v for k, v in (
        ("dim", args.dim), ("layers", args.layers), ("heads", args.heads), ("kv_heads", args.kv_heads),
        ("ffn", args.ffn), ("vocab", args.vocab)) if v is not None})

    device = "cuda"
    torch.manual_seed(0)
    with torch.device(device):  # build the weights directly on the GPU
        model = Llama(cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{args.config}: {n_params / 1e6:.1f} M parameters on {torch.cuda.get_device_name()}")

    for step in range(args.steps):
        t0 = time.perf_counter()
        tokens = torch.randint(0, cfg.vocab, (args.batch, args.seq + 1))
        tokens = tokens.pin_memory().to(device, non_blocking=True)
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(inputs)
            loss = F.cross_entropy(logits.view(-1, cfg.vocab), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}: loss {loss.item():.4f} ({(time.perf_counter() - t0) * 1e3:.1f} ms)")
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
