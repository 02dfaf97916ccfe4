"""A LLaMA-style decoder (Touvron et al. 2023, LLaMA 2): pre-norm blocks with RMSNorm (written by
hand: x * rsqrt(mean(x^2) + eps) * w), rotary position embeddings (HF's rotate_half form, the
cos/sin tables as buffers), grouped-query attention (n_kv_heads key/value heads, each shared by
n_heads / n_kv_heads query heads), an additive causal mask built in forward (as Hugging Face's
LlamaModel builds it; plancc-import makes it attention's causal attribute), SwiGLU feed-forward
(w2(silu(w1 x) * w3 x)), untied output head, and the mean cross-entropy of next-token targets.

Factories (tools/plancc-import torch models/torch/llama.py:FACTORY):
  make      a tiny variant (2 layers, dim 32, 4 heads over 2 kv heads): the --verify and
            equivalence model;
  make_7b   LLaMA-2 7B (32 layers, dim 4096, 32 heads, no GQA, ffn 11008, vocab 32000,
            sequence 4096): 6,738,415,616 parameters, built on the meta device (no memory);
  make_3_8b_128k  Llama 3 8B (32 layers, dim 4096, 32 heads over 8 kv heads, ffn 14336, vocab
            128256, rope theta 500000) at 131,072 tokens, one sequence a micro-batch (nnScaler's
            Llama 3 8B 128K example): 8,030,261,248 parameters, on the meta device.
Each returns (module, (tokens, targets)); module(tokens, targets) is the scalar loss.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    def __init__(self, vocab, dim, layers, heads, kv_heads, ffn, seq, batch, eps=1e-5, theta=10000.0, device=None):
        self.device = device  # "meta": shapes only, no memory (the published sizes)
        self.vocab, self.dim, self.layers, self.heads, self.kv_heads = vocab, dim, layers, heads, kv_heads
        self.ffn, self.seq, self.batch, self.eps, self.theta = ffn, seq, batch, eps, theta
        self.head_dim = dim // heads


class RMSNorm(nn.Module):
    def __init__(self, dim, eps, device=None):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim, device=device))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rotate_half(x, half):
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.wq = nn.Linear(c.dim, c.heads * c.head_dim, bias=False, device=c.device)
        self.wk = nn.Linear(c.dim, c.kv_heads * c.head_dim, bias=False, device=c.device)
        self.wv = nn.Linear(c.dim, c.kv_heads * c.head_dim, bias=False, device=c.device)
        self.wo = nn.Linear(c.heads * c.head_dim, c.dim, bias=False, device=c.device)

    def forward(self, x, cos, sin, mask):
        c = self.c
        b, s, h, kv, d = c.batch, c.seq, c.heads, c.kv_heads, c.head_dim
        q = self.wq(x).view(b, s, h, d).transpose(1, 2)
        k = self.wk(x).view(b, s, kv, d).transpose(1, 2)
        v = self.wv(x).view(b, s, kv, d).transpose(1, 2)
        q = q * cos + rotate_half(q, d // 2) * sin
        k = k * cos + rotate_half(k, d // 2) * sin
        if kv != h:  # each key/value head serves h / kv query heads (HF's repeat_kv)
            k = k[:, :, None, :, :].expand(b, kv, h // kv, s, d).reshape(b, h, s, d)
            v = v[:, :, None, :, :].expand(b, kv, h // kv, s, d).reshape(b, h, s, d)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(d) + mask
        p = F.softmax(scores, dim=-1)
        o = torch.matmul(p, v).transpose(1, 2).reshape(b, s, h * d)
        return self.wo(o)


class FeedForward(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.w1 = nn.Linear(c.dim, c.ffn, bias=False, device=c.device)
        self.w2 = nn.Linear(c.ffn, c.dim, bias=False, device=c.device)
        self.w3 = nn.Linear(c.dim, c.ffn, bias=False, device=c.device)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attention_norm = RMSNorm(c.dim, c.eps, c.device)
        self.attention = Attention(c)
        self.ffn_norm = RMSNorm(c.dim, c.eps, c.device)
        self.feed_forward = FeedForward(c)

    def forward(self, x, cos, sin, mask):
        x = x + self.attention(self.attention_norm(x), cos, sin, mask)
        return x + self.feed_forward(self.ffn_norm(x))


class LLaMA(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.tok_embeddings = nn.Embedding(c.vocab, c.dim, device=c.device)
        self.layers = nn.ModuleList([Block(c) for _ in range(c.layers)])
        self.norm = RMSNorm(c.dim, c.eps, c.device)
        self.output = nn.Linear(c.dim, c.vocab, bias=False, device=c.device)
        inv = 1.0 / (c.theta ** (torch.arange(0, c.head_dim, 2).double() / c.head_dim))
        freqs = torch.outer(torch.arange(c.seq).double(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos().float().to(c.device))
        self.register_buffer("sin", emb.sin().float().to(c.device))

    def forward(self, tokens, targets):
        mask = tokens.new_full((self.c.seq, self.c.seq), -1e9, dtype=torch.float32).triu(1)
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, self.cos, self.sin, mask)
        logits = self.output(self.norm(h))
        return F.cross_entropy(logits.view(-1, self.c.vocab), targets.view(-1))


def _make(c):
    torch.manual_seed(0)
    m = LLaMA(c)
    tokens = torch.randint(0, c.vocab, (c.batch, c.seq), device=c.device)
    targets = torch.randint(0, c.vocab, (c.batch, c.seq), device=c.device)
    return m, (tokens, targets)


def make():
    return _make(Config(vocab=64, dim=32, layers=2, heads=4, kv_heads=2, ffn=48, seq=8, batch=2))


def make_7b():
    return _make(Config(vocab=32000, dim=4096, layers=32, heads=32, kv_heads=32, ffn=11008, seq=4096, batch=2, device="meta"))


def make_3_8b_128k():
    return _make(Config(vocab=128256, dim=4096, layers=32, heads=32, kv_heads=8, ffn=14336, seq=131072, batch=1,
                        theta=500000.0, device="meta"))
