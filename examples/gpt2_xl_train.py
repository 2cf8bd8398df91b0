"""GPT-2-XL training on synthetic tokens (written for a CUDA GPU; random init, no downloads).

GPT-2-XL: 48 layers, hidden 1600, 25 heads, vocabulary 50257, context 1024, 1.56 B parameters
(1.5 B without the position embedding; the LM head shares the token embedding). The structure
follows Hugging Face ``GPT2LMHeadModel`` / nanoGPT: pre-LayerNorm blocks, fused QKV projection,
causal SDPA attention, GELU (tanh) MLP of 4 x hidden.

    python examples/gpt2_xl_train.py                          # GPT-2-XL, batch 4 x 1024, 3 steps
    python examples/gpt2_xl_train.py --layers 2 --hidden 256 --heads 4 --vocab 1024 --seq 128   # tiny
    tracegen capture --skip-steps 1 --steps 1 examples/gpt2_xl_train.py -- --steps 2   # no GPU needed
"""

import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, hidden: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln_1 = nn.LayerNorm(hidden)
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.attn_proj = nn.Linear(hidden, hidden)
        self.ln_2 = nn.LayerNorm(hidden)
        self.c_fc = nn.Linear(hidden, 4 * hidden)
        self.mlp_proj = nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(h, dim=2)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(b, s, h))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, layers=48, hidden=1600, heads=25, vocab=50257, context=1024):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(context, hidden)
        self.blocks = nn.ModuleList(Block(hidden, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as GPT-2
        for name, p in self.named_parameters():  # GPT-2 init
            if name.endswith("proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--layers", type=int, default=48)
    p.add_argument("--hidden", type=int, default=1600)
    p.add_argument("--heads", type=int, default=25)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--lr", type=float, default=1.5e-4)
    args = p.parse_args()

    device = "cuda"
    torch.manual_seed(0)
    with torch.device(device):  # build the weights directly on the GPU
        model = GPT2(args.layers, args.hidden, args.heads, args.vocab, args.seq)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"GPT-2: {n_params / 1e9:.2f} B parameters on {torch.cuda.get_device_name()}")

    for step in range(args.steps):
        t0 = time.perf_counter()
        tokens = torch.randint(0, args.vocab, (args.batch, args.seq + 1))
        tokens = tokens.pin_memory().to(device, non_blocking=True)
        inputs, targets = tokens[:, :-1], tokens[:, 1:]
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(inputs)
            loss = F.cross_entropy(logits.view(-1, args.vocab).float(), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}: loss {loss.item():.4f} ({(time.perf_counter() - t0) * 1e3:.1f} ms)")
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
