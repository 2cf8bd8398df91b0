"""Small model definitions shared by the example workloads (plain PyTorch, no downloads).

``Llama`` follows the structure of the Hugging Face Llama/Qwen2 eager implementation (RMSNorm in
float32, rotary embedding with ``rotate_half``, grouped-query attention through
``scaled_dot_product_attention``, SwiGLU MLP) so that its operator mix is the one those models
launch. ``Bert`` follows Hugging Face ``BertForMaskedLM`` with the SDPA attention path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class LlamaConfig:
    dim: int = 256
    layers: int = 2
    heads: int = 8
    kv_heads: int = 4
    ffn: int = 688
    vocab: int = 1024
    max_seq: int = 2048
    rope_theta: float = 500000.0
    norm_eps: float = 1e-5
    qkv_bias: bool = False
    lm_head: bool = True


CONFIGS = {
    "tiny": LlamaConfig(),
    "small": LlamaConfig(dim=512, layers=4, heads=8, kv_heads=4, ffn=1376, vocab=8192),
    "llama3-8b": LlamaConfig(dim=4096, layers=32, heads=32, kv_heads=8, ffn=14336, vocab=128256, max_seq=8192),
    "qwen1.5-0.5b": LlamaConfig(dim=1024, layers=24, heads=16, kv_heads=16, ffn=2816, vocab=151936,
                                max_seq=32768, rope_theta=1000000.0, norm_eps=1e-6, qkv_bias=True),
}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        h = x.to(torch.float32)
        var = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(var + self.eps)
        return self.weight * h.to(dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Rotary(nn.Module):
    def __init__(self, head_dim: int, theta: float):
        super().__init__()
        inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, x, positions):
        # positions: [B, S] int64 on the device
        inv = self.inv_freq[None, :, None].float().expand(positions.shape[0], -1, 1)
        freqs = (inv.float() @ positions[:, None, :].float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


class Attention(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.h, self.kvh, self.hd = c.heads, c.kv_heads, c.dim // c.heads
        self.q = nn.Linear(c.dim, c.heads * self.hd, bias=c.qkv_bias)
        self.k = nn.Linear(c.dim, c.kv_heads * self.hd, bias=c.qkv_bias)
        self.v = nn.Linear(c.dim, c.kv_heads * self.hd, bias=c.qkv_bias)
        self.o = nn.Linear(c.heads * self.hd, c.dim, bias=False)

    def forward(self, x, cos, sin, cache=None, pos: int = 0):
        b, s, _ = x.shape
        q = self.q(x).view(b, s, self.h, self.hd).transpose(1, 2)
        k = self.k(x).view(b, s, self.kvh, self.hd).transpose(1, 2)
        v = self.v(x).view(b, s, self.kvh, self.hd).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q = (q * cos) + (rotate_half(q) * sin)
        k = (k * cos) + (rotate_half(k) * sin)
        if cache is not None:  # static KV cache: write this chunk, attend to everything so far
            kc, vc = cache
            kc[:, :, pos:pos + s] = k
            vc[:, :, pos:pos + s] = v
            k, v = kc[:, :, :pos + s], vc[:, :, :pos + s]
        if self.kvh != self.h:  # repeat_kv
            rep = self.h // self.kvh
            k = k[:, :, None].expand(b, self.kvh, rep, k.shape[2], self.hd).reshape(b, self.h, k.shape[2], self.hd)
            v = v[:, :, None].expand(b, self.kvh, rep, v.shape[2], self.hd).reshape(b, self.h, v.shape[2], self.hd)
        out = F.scaled_dot_product_attention(q.contiguous(), k.contiguous(), v.contiguous(),
                                             is_causal=(s > 1))
        out = out.transpose(1, 2).contiguous().reshape(b, s, -1)
        return self.o(out)


class MLP(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.gate = nn.Linear(c.dim, c.ffn, bias=False)
        self.up = nn.Linear(c.dim, c.ffn, bias=False)
        self.down = nn.Linear(c.ffn, c.dim, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class Block(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.attn_norm = RMSNorm(c.dim, c.norm_eps)
        self.attn = Attention(c)
        self.mlp_norm = RMSNorm(c.dim, c.norm_eps)
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, cache=None, pos=0):
        x = x + self.attn(self.attn_norm(x), cos, sin, cache, pos)
        return x + self.mlp(self.mlp_norm(x))


class Llama(nn.Module):
    def __init__(self, c: LlamaConfig):
        super().__init__()
        self.c = c
        self.embed = nn.Embedding(c.vocab, c.dim)
        self.rotary = Rotary(c.dim // c.heads, c.rope_theta)
        self.blocks = nn.ModuleList(Block(c) for _ in range(c.layers))
        self.norm = RMSNorm(c.dim, c.norm_eps)
        self.head = nn.Linear(c.dim, c.vocab, bias=False) if c.lm_head else None

    def forward(self, tokens, caches=None, pos: int = 0):
        b, s = tokens.shape
        x = self.embed(tokens)
        positions = torch.arange(pos, pos + s, device=tokens.device).unsqueeze(0).expand(b, -1)
        cos, sin = self.rotary(x, positions)
        for i, blk in enumerate(self.blocks):
            x = blk(x, cos, sin, None if caches is None else caches[i], pos)
        x = self.norm(x)
        return self.head(x) if self.head is not None else x


def kv_caches(c: LlamaConfig, batch: int, max_len: int, device, dtype):
    hd = c.dim // c.heads
    return [(torch.zeros(batch, c.kv_heads, max_len, hd, device=device, dtype=dtype),
             torch.zeros(batch, c.kv_heads, max_len, hd, device=device, dtype=dtype)) for _ in range(c.layers)]


# ----------------------------------------------------------------------------- BERT

@dataclass
class BertConfig:
    vocab: int = 30522
    dim: int = 512
    layers: int = 4
    heads: int = 8
    ffn: int = 2048
    max_pos: int = 512
    type_vocab: int = 2
    eps: float = 1e-12


class BertLayer(nn.Module):
    def __init__(self, c: BertConfig):
        super().__init__()
        self.h, self.hd = c.heads, c.dim // c.heads
        self.q, self.k, self.v = (nn.Linear(c.dim, c.dim) for _ in range(3))
        self.o = nn.Linear(c.dim, c.dim)
        self.ln1 = nn.LayerNorm(c.dim, eps=c.eps)
        self.up = nn.Linear(c.dim, c.ffn)
        self.down = nn.Linear(c.ffn, c.dim)
        self.ln2 = nn.LayerNorm(c.dim, eps=c.eps)

    def forward(self, x, mask=None):
        b, s, d = x.shape
        split = lambda t: t.view(b, s, self.h, self.hd).permute(0, 2, 1, 3)  # noqa: E731
        a = F.scaled_dot_product_attention(split(self.q(x)), split(self.k(x)), split(self.v(x)), attn_mask=mask)
        a = a.transpose(1, 2).reshape(b, s, d)
        x = self.ln1(self.o(a) + x)
        return self.ln2(self.down(F.gelu(self.up(x))) + x)


class Bert(nn.Module):
    """BertForMaskedLM-like: embeddings, encoder, MLM head (dense, gelu, LayerNorm, decoder)."""

    def __init__(self, c: BertConfig):
        super().__init__()
        self.word = nn.Embedding(c.vocab, c.dim)
        self.pos = nn.Embedding(c.max_pos, c.dim)
        self.ttype = nn.Embedding(c.type_vocab, c.dim)
        self.ln = nn.LayerNorm(c.dim, eps=c.eps)
        self.layers = nn.ModuleList(BertLayer(c) for _ in range(c.layers))
        self.head_dense = nn.Linear(c.dim, c.dim)
        self.head_ln = nn.LayerNorm(c.dim, eps=c.eps)
        self.decoder = nn.Linear(c.dim, c.vocab)
        self.register_buffer("position_ids", torch.arange(c.max_pos).expand(1, -1), persistent=False)
        self.register_buffer("token_type_ids", torch.zeros(1, c.max_pos, dtype=torch.long), persistent=False)

    def forward(self, input_ids, attention_mask):
        s = input_ids.shape[1]
        x = self.word(input_ids) + self.ttype(self.token_type_ids[:, :s])
        x = x + self.pos(self.position_ids[:, :s])
        x = self.ln(x)
        # Hugging Face drops an all-ones mask so that SDPA can use the flash kernel (one host sync)
        mask = None if bool(torch.all(attention_mask == 1)) else attention_mask[:, None, None, :].bool()
        for layer in self.layers:
            x = layer(x, mask)
        return self.decoder(self.head_ln(F.gelu(self.head_dense(x))))
