"""A greedy decoding loop written the way Hugging Face ``generate()`` writes it (this project's
own code, no transformers): unfinished-sequence flags, an end-of-sequence test with ``isin``, a
length criterion from real shapes and the host reading ``unfinished.max() == 0`` every step.
The logits are large (no real values in emulation), so the chosen tokens are stand-ins; the
loop must run exactly ``--new`` steps. A second loop runs on small tensors only (real values)
and must stop when its token reaches the end-of-sequence id. Prints the step counts."""

import argparse

import torch
import torch.nn as nn

p = argparse.ArgumentParser()
p.add_argument("--vocab", type=int, default=50_000)
p.add_argument("--batch", type=int, default=2)
p.add_argument("--prompt", type=int, default=5)
p.add_argument("--new", type=int, default=7)
args = p.parse_args()
device = "cuda"
torch.manual_seed(0)


class TinyLM(nn.Module):
    def __init__(self, vocab, dim=16):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids, position_ids):
        return self.head(self.emb(ids) + position_ids[..., None].float())


model = TinyLM(args.vocab).to(device).eval()
eos = torch.tensor([2, 1], device=device)            # end-of-sequence ids
pad = 0
input_ids = torch.randint(3, 100, (args.batch, args.prompt)).to(device)
attention_mask = torch.ones_like(input_ids)
unfinished = torch.ones(args.batch, dtype=torch.long, device=device)
max_length = args.prompt + args.new
steps = 0
this_peer_finished = False
with torch.no_grad():
    while not this_peer_finished:
        position_ids = attention_mask.long().cumsum(-1) - 1
        position_ids.masked_fill_(attention_mask == 0, 1)
        logits = model(input_ids, position_ids)
        next_token_logits = logits[:, -1, :].to(copy=True, dtype=torch.float32)
        next_tokens = torch.argmax(next_token_logits, dim=-1)
        next_tokens = next_tokens * unfinished + pad * (1 - unfinished)
        input_ids = torch.cat([input_ids, next_tokens[:, None]], dim=-1)
        attention_mask = torch.cat([attention_mask, attention_mask.new_ones((args.batch, 1))], dim=-1)
        is_done = torch.full((args.batch,), input_ids.shape[-1] >= max_length, device=device, dtype=torch.bool)
        is_done = is_done | torch.isin(input_ids[:, -1], eos)
        unfinished = unfinished & ~is_done
        this_peer_finished = unfinished.max() == 0
        steps += 1
        if steps > 10 * args.new:
            raise SystemExit("the decode loop did not stop")

# small tensors only: token k+1 follows token k; stops at the real end-of-sequence id 7
tok = torch.tensor([3], device=device)
counted = 0
while True:
    tok = (tok + 1) % 10
    counted += 1
    if tok.item() == 7 or counted > 50:
        break
print(f"decode steps {steps} tokens {input_ids.tolist()}")
print(f"counter steps {counted} last token {tok.item()} position_ids {position_ids[0].tolist()}")
