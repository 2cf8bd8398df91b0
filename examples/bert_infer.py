"""BERT-small-like encoder inference (google/bert_uncased_L-4_H-512_A-8 shape; written for a
CUDA GPU), bf16, one batch of synthetic token ids per iteration, each annotated ``ProfilerStep#N``.

    python examples/bert_infer.py --batch 1 --seq 141 --iters 3
"""

import argparse

import torch

from models import Bert, BertConfig


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--ffn", type=int, default=2048)
    p.add_argument("--iters", type=int, default=3)
    args = p.parse_args()
    cfg = BertConfig(dim=args.dim, layers=args.layers, heads=args.heads, ffn=args.ffn)

    device = "cuda"
    torch.manual_seed(0)
    model = Bert(cfg).to(device=device, dtype=torch.bfloat16).eval()
    input_ids = torch.randint(0, cfg.vocab, (args.batch, args.seq), device=device)
    mask = torch.ones(args.batch, args.seq, dtype=torch.long, device=device)
    with torch.inference_mode():
        for i in range(args.iters):
            with torch.profiler.record_function(f"ProfilerStep#{i}"):
                logits = model(input_ids, mask)
            torch.cuda.synchronize()
    print(f"logits {tuple(logits.shape)} {logits.dtype}")


if __name__ == "__main__":
    main()
