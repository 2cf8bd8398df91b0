"""Llama-style generation: one prefill, then a decode loop that reads every token back with
``.item()`` (written for a CUDA GPU). Each forward is annotated ``ProfilerStep#N`` (prefill = 0).

    python examples/llama_infer.py --prompt 128 --new-tokens 16
    tracegen capture examples/llama_infer.py -- --config small
"""

import argparse
import dataclasses

import torch

from toy_models import CONFIGS, Llama, kv_caches

EOS = 2


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", choices=sorted(CONFIGS), default="tiny")
    p.add_argument("--layers", type=int)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--prompt", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=8)
    args = p.parse_args()
    cfg = CONFIGS[args.config]
    if args.layers:
        cfg = dataclasses.replace(cfg, layers=args.layers)

    device = "cuda"
    dtype = torch.bfloat16
    torch.manual_seed(0)
    with torch.device(device):
        model = Llama(cfg).to(dtype).eval()
    prompt = torch.randint(0, cfg.vocab, (args.batch, args.prompt))
    max_len = args.prompt + args.new_tokens
    caches = kv_caches(cfg, args.batch, max_len, device, dtype)

    generated = []
    with torch.inference_mode():
        tokens = prompt.to(device)
        pos = 0
        for step in range(args.new_tokens):
            with torch.profiler.record_function(f"ProfilerStep#{step}"):
                logits = model(tokens, caches, pos)
                pos += tokens.shape[1]
                next_tok = logits[:, -1].argmax(dim=-1)
                tok = next_tok[0].item()  # the host needs the token: a device->host sync
                generated.append(tok)
                if tok == EOS:
                    break
                tokens = next_tok[:, None]
    print(f"generated {len(generated)} tokens: {generated}")


if __name__ == "__main__":
    main()
