"""A Mixtral-style decoder (Jiang et al. 2024, Mixtral of Experts): the LLaMA-style blocks of
llama.py (RMSNorm, rotary embeddings, grouped-query attention) with the feed-forward replaced by
a sparse mixture of experts: a router (linear, no bias) scores E SwiGLU experts per token, the
top 2 are kept (torch.topk), their softmax probabilities renormalized to sum to 1, and the
token's output is the gate-weighted sum of those two experts' outputs.

Written densely: every expert runs on every token (the experts' weights [E, dim, ffn] side by
side as one [dim, E ffn] product; each expert's hidden scaled by its gate before the down
projection) and the gates of the experts not chosen are 0, so the loss and the gradients are
exactly Mixtral's, but the compute is E/2 times a routed implementation's (plancc has no token
dispatch with capacity yet).

Factories (tools/plancc-import torch models/torch/mixtral.py:FACTORY):
  make        a tiny variant (2 layers, dim 32, 4 heads over 2 kv heads, 4 experts, top 2);
  make_8x7b   Mixtral 8x7B (32 layers, dim 4096, 32 heads over 8 kv heads, 8 experts of ffn
              14336, vocab 32000): 46,702,792,704 parameters, on the meta device.
Each returns (module, (tokens, targets)).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from llama import Attention, Config, RMSNorm


class MoE(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.gate = nn.Linear(c.dim, c.experts, bias=False, device=c.device)
        std = 1 / math.sqrt(c.dim)
        self.w1 = nn.Parameter(torch.empty(c.experts, c.dim, c.ffn, device=c.device).normal_(std=std))
        self.w3 = nn.Parameter(torch.empty(c.experts, c.dim, c.ffn, device=c.device).normal_(std=std))
        self.w2 = nn.Parameter(torch.empty(c.experts, c.ffn, c.dim, device=c.device).normal_(std=1 / math.sqrt(c.ffn)))

    def forward(self, x):
        c = self.c
        b, s, e, f = c.batch, c.seq, c.experts, c.ffn
        probs = F.softmax(self.gate(x), dim=-1)  # [b, s, E]
        top = torch.topk(probs, c.top_k, dim=-1)  # (torch.fx cannot unpack a traced tuple)
        weights, chosen = top[0], top[1]
        weights = weights / weights.sum(dim=-1, keepdim=True)
        gates = (F.one_hot(chosen, e).float() * weights[..., None]).sum(dim=2)  # [b, s, E]
        # every expert at once: [dim, E * ffn] products, the gates applied before the down
        # projection (linear in each expert's hidden), so the batch keeps its own axis
        w1 = self.w1.permute(1, 0, 2).reshape(c.dim, e * f)
        w3 = self.w3.permute(1, 0, 2).reshape(c.dim, e * f)
        h = F.silu(torch.matmul(x, w1)).view(b, s, e, f) * torch.matmul(x, w3).view(b, s, e, f)
        return torch.matmul((h * gates[..., None]).reshape(b, s, e * f), self.w2.reshape(e * f, c.dim))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention_norm = RMSNorm(c.dim, c.eps, c.device)
        self.attention = Attention(c)
        self.ffn_norm = RMSNorm(c.dim, c.eps, c.device)
        self.moe = MoE(c)

    def forward(self, x, cos, sin, mask):
        x = x + self.attention(self.attention_norm(x), cos, sin, mask)
        return x + self.moe(self.ffn_norm(x))


class Mixtral(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.tok_embeddings = nn.Embedding(c.vocab, c.dim, device=c.device)
        self.layers = nn.ModuleList([Block(c) for _ in range(c.layers)])
        self.norm = RMSNorm(c.dim, c.eps, c.device)
        self.output = nn.Linear(c.dim, c.vocab, bias=False, device=c.device)
        inv = 1.0 / (c.theta ** (torch.arange(0, c.head_dim, 2).double() / c.head_dim))
        emb = torch.cat((torch.outer(torch.arange(c.seq).double(), inv),) * 2, dim=-1)
        self.register_buffer("cos", emb.cos().float().to(c.device))
        self.register_buffer("sin", emb.sin().float().to(c.device))
        self.register_buffer("mask", torch.full((c.seq, c.seq), -1e9, device=c.device).triu(1))

    def forward(self, tokens, targets):
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, self.cos, self.sin, self.mask)
        logits = self.output(self.norm(h))
        return F.cross_entropy(logits.view(-1, self.c.vocab), targets.view(-1))


def _make(c, experts, top_k):
    c.experts, c.top_k = experts, top_k
    torch.manual_seed(0)
    m = Mixtral(c)
    tokens = torch.randint(0, c.vocab, (c.batch, c.seq), device=c.device)
    targets = torch.randint(0, c.vocab, (c.batch, c.seq), device=c.device)
    return m, (tokens, targets)


def make():
    return _make(Config(vocab=64, dim=32, layers=2, heads=4, kv_heads=2, ffn=24, seq=8, batch=2), 4, 2)


def make_8x7b():
    return _make(Config(vocab=32000, dim=4096, layers=32, heads=32, kv_heads=8, ffn=14336, seq=4096, batch=2, theta=1e6,
                        device="meta"), 8, 2)
