"""BERT-small-like encoder inference (google/bert_uncased_L-4_H-512_A-8 shape; written for a
CUDA GPU), bf16, one batch of synthetic token ids per iteration, each annotated ``ProfilerStep#N``.

    python examples/bert_infer.py --batch 1 --seq 141 --iters 3
    python examples/bert_infer.py --batch 8 --seq 128 --from-host   # serving: inputs H2D, predictions D2H

``--from-host``: every iteration copies its token ids and mask from pinned host memory
(``non_blocking=True``) and reads the predicted token ids back with ``.cpu()``, as a server does.
"""

import argparse

import torch

from toy_models import Bert, BertConfig


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--dim", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--ffn", type=int, default=2048)
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--from-host", action="store_true", help="inputs H2D and predictions D2H every iteration")
    args = p.parse_args()
    cfg = BertConfig(dim=args.dim, layers=args.layers, heads=args.heads, ffn=args.ffn)

    device = "cuda"
    torch.manual_seed(0)
    model = Bert(cfg).to(device=device, dtype=torch.bfloat16).eval()
    if args.from_host:
        host_ids = torch.randint(0, cfg.vocab, (args.batch, args.seq)).pin_memory()
        host_mask = torch.ones(args.batch, args.seq, dtype=torch.long).pin_memory()
    else:
        input_ids = torch.randint(0, cfg.vocab, (args.batch, args.seq), device=device)
        mask = torch.ones(args.batch, args.seq, dtype=torch.long, device=device)
    with torch.inference_mode():
        for i in range(args.iters):
            with torch.profiler.record_function(f"ProfilerStep#{i}"):
                if args.from_host:
                    input_ids = host_ids.to(device, non_blocking=True)
                    mask = host_mask.to(device, non_blocking=True)
                logits = model(input_ids, mask)
                if args.from_host:
                    predicted = logits.argmax(dim=-1).cpu()  # D2H + stream synchronisation
            if not args.from_host:
                torch.cuda.synchronize()
    if args.from_host:
        print(f"predicted {tuple(predicted.shape)}")
    print(f"logits {tuple(logits.shape)} {logits.dtype}")


if __name__ == "__main__":
    main()
