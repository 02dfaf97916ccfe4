"""A Mixtral-style decoder (Jiang et al. 2024, Mixtral of Experts): the LLaMA-style blocks of
llama.py (RMSNorm, rotary embeddings, grouped-query attention) with the feed-forward replaced by
a sparse mixture of experts: a router (linear, no bias) scores E SwiGLU experts per token, the
top 2 are kept (torch.topk), their softmax probabilities renormalized to sum to 1, and the
token's output is the gate-weighted sum of those two experts' outputs.

Written densely (MoE; make, make_8x7b): every expert runs on every token (the experts' weights
[E, dim, ffn] side by side as one [dim, E ffn] product; each expert's hidden scaled by its gate
before the down projection) and the gates of the experts not chosen are 0, so the loss and the
gradients are exactly Mixtral's, but the compute is E/2 times a routed implementation's.

Or routed (RoutedMoE; the make_routed factories): each expert computes on at most C slots of
each sequence, GShard's dispatch with a capacity, written with the operators plancc has (one-hot
products); with expert parallelism the all-to-all moves those slots only. With C at least the
sequence length nothing is dropped and it computes what MoE does.

Factories (tools/plancc-import torch models/torch/mixtral.py:FACTORY):
  make        a tiny variant (2 layers, dim 32, 4 heads over 2 kv heads, 4 experts, top 2);
  make_routed the tiny variant, routed with capacity factor 1.0;
  make_routed_ep  a small routed variant (batch 4, seq 16, dim 64) whose expert parallelism
              (--tp N --tp-batch) pays on the cpu cluster;
  make_8x7b   Mixtral 8x7B (32 layers, dim 4096, 32 heads over 8 kv heads, 8 experts of ffn
              14336, vocab 32000): 46,702,792,704 parameters, on the meta device;
  make_8x7b_routed  the same, routed with capacity factor 1.25.
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


def capacity_of(c):
    """C, each expert's slots per sequence: ceil(capacity factor x top_k x seq / E)."""
    return math.ceil(c.capacity * c.top_k * c.seq / c.experts)


class RoutedMoE(MoE):
    """The same experts and router, with GShard's dispatch (Lepikhin et al. 2020): each expert
    takes at most C = ceil(capacity * top_k * seq / E) of a sequence's token choices, the first
    choices of every token before the second ones, in token order; a choice past its expert's
    capacity is dropped (the token keeps its residual). Written with one-hot products only (the
    cumulative count as a product with an upper-triangular constant, the slot's one-hot of an
    integer-valued position p as relu(p-c+1) - 2 relu(p-c) + relu(p-c-1)): the experts then
    compute on [E, C] slots of each sequence, and splitting the experts over devices moves those
    slots (the routed tokens), not every token. Only the gates carry gradients to the router."""

    def __init__(self, c):
        super().__init__(c)
        self.cap = capacity_of(c)

    def forward(self, x, upper, slots):
        """upper: [top_k seq, top_k seq] ones on and above the diagonal; slots: 1..C (the model's
        buffers, one copy for every layer)."""
        c = self.c
        b, s, e, k, cap = c.batch, c.seq, c.experts, c.top_k, self.cap
        probs = F.softmax(self.gate(x), dim=-1)  # [b, s, E]
        top = torch.topk(probs, k, dim=-1)
        weights = top[0] / top[0].sum(dim=-1, keepdim=True)  # [b, s, k]
        chosen = F.one_hot(top[1], e).type_as(x)  # [b, s, k, E]
        m = chosen.permute(0, 3, 2, 1).reshape(b, e, k * s)  # [b, E, (k, s)]: first choices first
        pos = torch.matmul(m, upper) * m  # 1-based place in the expert's queue; 0: not chosen
        z = pos[..., None] - slots  # [b, E, ks, C]
        disp = F.relu(z + 1) - 2 * F.relu(z) + F.relu(z - 1)  # 1 at the slot the choice takes
        xs = torch.cat([x] * k, dim=1)  # [b, (k, s), dim]
        xin = torch.matmul(disp.transpose(2, 3).reshape(b, e * cap, k * s), xs).view(b, e, cap, c.dim)
        w1, w3 = self.w1.expand(b, e, c.dim, c.ffn), self.w3.expand(b, e, c.dim, c.ffn)
        w2 = self.w2.expand(b, e, c.ffn, c.dim)
        h = F.silu(torch.matmul(xin, w1)) * torch.matmul(xin, w3)  # [b, E, C, ffn]
        out = torch.matmul(h, w2).reshape(b, e * cap, c.dim)
        comb = disp * weights.transpose(1, 2).reshape(b, k * s)[:, None, :, None]  # [b, E, ks, C]
        y = torch.matmul(comb.permute(0, 2, 1, 3).reshape(b, k * s, e * cap), out)  # [b, (k, s), dim]
        return y.view(b, k, s, c.dim).sum(dim=1)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention_norm = RMSNorm(c.dim, c.eps, c.device)
        self.attention = Attention(c)
        self.ffn_norm = RMSNorm(c.dim, c.eps, c.device)
        self.moe = RoutedMoE(c) if getattr(c, "capacity", None) else MoE(c)

    def forward(self, x, cos, sin, mask, *route):
        x = x + self.attention(self.attention_norm(x), cos, sin, mask)
        return x + self.moe(self.ffn_norm(x), *route)


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
        self.route = ()
        if getattr(c, "capacity", None):  # RoutedMoE's constants
            ks = c.top_k * c.seq
            self.register_buffer("upper", torch.ones(ks, ks, device=c.device).triu())
            self.register_buffer("slots", torch.arange(1, capacity_of(c) + 1, device=c.device).float())
            self.route = ("upper", "slots")

    def forward(self, tokens, targets):
        h = self.tok_embeddings(tokens)
        route = [getattr(self, r) for r in self.route]
        for layer in self.layers:
            h = layer(h, self.cos, self.sin, self.mask, *route)
        logits = self.output(self.norm(h))
        return F.cross_entropy(logits.view(-1, self.c.vocab), targets.view(-1))


def _make(c, experts, top_k, capacity=None):
    c.experts, c.top_k, c.capacity = experts, top_k, capacity
    torch.manual_seed(0)
    m = Mixtral(c)
    tokens = torch.randint(0, c.vocab, (c.batch, c.seq), device=c.device)
    targets = torch.randint(0, c.vocab, (c.batch, c.seq), device=c.device)
    return m, (tokens, targets)


def make():
    return _make(Config(vocab=64, dim=32, layers=2, heads=4, kv_heads=2, ffn=24, seq=8, batch=2), 4, 2)


def make_routed():
    """The tiny variant with capacity routing (capacity factor 1.0: some choices are dropped)."""
    return _make(Config(vocab=64, dim=32, layers=2, heads=4, kv_heads=2, ffn=24, seq=8, batch=2), 4, 2, 1.0)


def make_routed_ep():
    """A small routed variant whose expert parallelism pays on the cpu cluster (batch 4, seq 16,
    dim 64, 4 experts of ffn 128, capacity 1.25: C = 10 slots per expert and sequence)."""
    return _make(Config(vocab=64, dim=64, layers=2, heads=4, kv_heads=2, ffn=128, seq=16, batch=4), 4, 2, 1.25)


def make_8x7b():
    return _make(Config(vocab=32000, dim=4096, layers=32, heads=32, kv_heads=8, ffn=14336, seq=4096, batch=2, theta=1e6,
                        device="meta"), 8, 2)


def make_8x7b_routed():
    """Mixtral 8x7B with capacity routing (capacity factor 1.25), on the meta device."""
    return _make(Config(vocab=32000, dim=4096, layers=32, heads=32, kv_heads=8, ffn=14336, seq=4096, batch=2, theta=1e6,
                        device="meta"), 8, 2, 1.25)
