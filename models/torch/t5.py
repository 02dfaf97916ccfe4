"""T5 (Raffel et al. 2020, v1.0): an encoder-decoder with T5's RMS layer norm (no mean, no bias),
relative position biases (log-spaced buckets of key minus query position, a learned scalar per
bucket and head, computed once per stack and added to every layer's scores; bidirectional in the
encoder, causal in the decoder), unscaled attention, padding masks of the source as an additive
bias on the encoder's self-attention and the decoder's cross-attention, ReLU feed-forward
layers, and a language-model head tied to the shared embedding (the decoder output scaled by
d_model^-1/2), trained with the mean cross-entropy of the target tokens.

T5 v1.1 and mT5 (Xue et al. 2021) change two things, which Config's `gated` and `tied` select:
a gated-GELU feed-forward layer (wo(gelu(wi_0 x) * wi_1 x), GELU's tanh form as Hugging Face's
"gated-gelu") and a language-model head of its own (lm_head, not tied, the output not scaled).

The bias embeddings sit in each stack rather than in its first layer (as Hugging Face places
them): the same parameters and values, and every layer of a stack is then the same, so each
stack imports as one repeated block.

Factories (tools/plancc-import torch models/torch/t5.py:FACTORY):
  make        a tiny variant (vocab 64, d_model 32, 2 + 2 layers, 4 heads of 8, source 8,
              target 6, batch 2);
  make_small  t5-small (6 + 6 layers, d_model 512, 8 heads of 64, d_ff 2048, vocab 32128, 32
              buckets up to distance 128; source and target 512): 60,506,624 parameters (Hugging
              Face t5-small), on the meta device;
  make_gated  the tiny variant with mT5's gated-GELU feed-forward and untied LM head;
  make_mt5_large  mT5-Large (Hugging Face google/mt5-large's config.json: 24 + 24 layers, d_model
              1024, 16 heads of 64, d_ff 2816, gated-GELU, vocab 250112, untied LM head, 32
              buckets up to distance 128): 1,229,581,312 parameters, on the meta device, with
              mT5's pre-training inputs of 1024 tokens (Xue et al. 2021, Sec. 3) and the 229 target
              tokens that T5's span corruption (15% noise, mean span 3) makes of them.
Each returns (module, (input_ids, attention_mask, decoder_input_ids, labels)).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    def __init__(self, vocab, d_model, d_kv, heads, d_ff, layers, buckets, max_distance, src, tgt, batch, device=None,
                 gated=False, tied=True):
        self.vocab, self.d_model, self.d_kv, self.heads, self.d_ff, self.layers = vocab, d_model, d_kv, heads, d_ff, layers
        self.gated, self.tied = gated, tied
        self.buckets, self.max_distance, self.src, self.tgt, self.batch, self.device = buckets, max_distance, src, tgt, batch, device


class Norm(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(c.d_model, device=c.device))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        inner = c.heads * c.d_kv
        self.q = nn.Linear(c.d_model, inner, bias=False, device=c.device)
        self.k = nn.Linear(c.d_model, inner, bias=False, device=c.device)
        self.v = nn.Linear(c.d_model, inner, bias=False, device=c.device)
        self.o = nn.Linear(inner, c.d_model, bias=False, device=c.device)

    def forward(self, x, kv, bias, s, t):
        c = self.c
        b, h, d = c.batch, c.heads, c.d_kv
        q = self.q(x).view(b, s, h, d).transpose(1, 2)
        k = self.k(kv).view(b, t, h, d).transpose(1, 2)
        v = self.v(kv).view(b, t, h, d).transpose(1, 2)
        p = F.softmax(torch.matmul(q, k.transpose(3, 2)) + bias, dim=-1)
        return self.o(torch.matmul(p, v).transpose(1, 2).reshape(b, s, h * d))


class FF(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wi = nn.Linear(c.d_model, c.d_ff, bias=False, device=c.device)
        self.wo = nn.Linear(c.d_ff, c.d_model, bias=False, device=c.device)

    def forward(self, x):
        return self.wo(F.relu(self.wi(x)))


class GatedFF(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.wi_0 = nn.Linear(c.d_model, c.d_ff, bias=False, device=c.device)
        self.wi_1 = nn.Linear(c.d_model, c.d_ff, bias=False, device=c.device)
        self.wo = nn.Linear(c.d_ff, c.d_model, bias=False, device=c.device)

    def forward(self, x):
        return self.wo(F.gelu(self.wi_0(x), approximate="tanh") * self.wi_1(x))


class EncoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.self_norm, self.self_attn = Norm(c), Attention(c)
        self.ff_norm, self.ff = Norm(c), (GatedFF if c.gated else FF)(c)

    def forward(self, x, bias):
        n = self.self_norm(x)
        x = x + self.self_attn(n, n, bias, self.c.src, self.c.src)
        return x + self.ff(self.ff_norm(x))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.self_norm, self.self_attn = Norm(c), Attention(c)
        self.cross_norm, self.cross_attn = Norm(c), Attention(c)
        self.ff_norm, self.ff = Norm(c), (GatedFF if c.gated else FF)(c)

    def forward(self, y, enc, self_bias, cross_bias):
        c = self.c
        n = self.self_norm(y)
        y = y + self.self_attn(n, n, self_bias, c.tgt, c.tgt)
        y = y + self.cross_attn(self.cross_norm(y), enc, cross_bias, c.tgt, c.src)
        return y + self.ff(self.ff_norm(y))


def buckets(c, q_len, k_len, bidirectional):
    """T5's relative position buckets of key minus query position (Hugging Face's
    _relative_position_bucket)."""
    rel = torch.arange(k_len)[None, :] - torch.arange(q_len)[:, None]
    n = c.buckets
    out = torch.zeros_like(rel)
    if bidirectional:
        n //= 2
        out += (rel > 0).long() * n
        rel = rel.abs()
    else:
        rel = -torch.min(rel, torch.zeros_like(rel))
    exact = n // 2
    large = exact + (torch.log(rel.float().clamp(min=1) / exact) / math.log(c.max_distance / exact) * (n - exact)).long()
    large = torch.min(large, torch.full_like(large, n - 1))
    return out + torch.where(rel < exact, rel, large)


class T5(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.shared = nn.Embedding(c.vocab, c.d_model, device=c.device)
        self.encoder_bias = nn.Embedding(c.buckets, c.heads, device=c.device)
        self.encoder = nn.ModuleList([EncoderLayer(c) for _ in range(c.layers)])
        self.encoder_norm = Norm(c)
        self.decoder_bias = nn.Embedding(c.buckets, c.heads, device=c.device)
        self.decoder = nn.ModuleList([DecoderLayer(c) for _ in range(c.layers)])
        self.decoder_norm = Norm(c)
        if not c.tied:
            self.lm_head = nn.Linear(c.d_model, c.vocab, bias=False, device=c.device)
        self.register_buffer("enc_buckets", buckets(c, c.src, c.src, True).to(c.device))
        self.register_buffer("dec_buckets", buckets(c, c.tgt, c.tgt, False).to(c.device))
        self.register_buffer("causal", torch.full((c.tgt, c.tgt), -1e9, device=c.device).triu(1))

    def forward(self, input_ids, attention_mask, decoder_input_ids, labels):
        c = self.c
        pad = (1.0 - attention_mask[:, None, None, :]) * -1e9
        enc_bias = self.encoder_bias(self.enc_buckets).permute(2, 0, 1)[None] + pad
        x = self.shared(input_ids)
        for layer in self.encoder:
            x = layer(x, enc_bias)
        enc = self.encoder_norm(x)
        self_bias = self.decoder_bias(self.dec_buckets).permute(2, 0, 1)[None] + self.causal
        y = self.shared(decoder_input_ids)
        for layer in self.decoder:
            y = layer(y, enc, self_bias, pad)
        if c.tied:
            logits = F.linear(self.decoder_norm(y) * c.d_model ** -0.5, self.shared.weight)
        else:
            logits = self.lm_head(self.decoder_norm(y))
        return F.cross_entropy(logits.view(-1, c.vocab), labels.view(-1))


def _make(c):
    torch.manual_seed(0)
    m = T5(c)
    ids = torch.randint(0, c.vocab, (c.batch, c.src), device=c.device)
    mask = torch.ones(c.batch, c.src, device=c.device)
    if c.device != "meta":
        mask[0, -3:] = 0  # the first source is 3 tokens shorter: padding
    dec = torch.randint(0, c.vocab, (c.batch, c.tgt), device=c.device)
    labels = torch.randint(0, c.vocab, (c.batch, c.tgt), device=c.device)
    return m, (ids, mask, dec, labels)


def make():
    return _make(Config(vocab=64, d_model=32, d_kv=8, heads=4, d_ff=64, layers=2, buckets=8, max_distance=16, src=8, tgt=6, batch=2))


def make_small():
    return _make(Config(vocab=32128, d_model=512, d_kv=64, heads=8, d_ff=2048, layers=6, buckets=32, max_distance=128, src=512,
                        tgt=512, batch=2, device="meta"))


def make_gated():
    return _make(Config(vocab=64, d_model=32, d_kv=8, heads=4, d_ff=48, layers=2, buckets=8, max_distance=16, src=8, tgt=6, batch=2,
                        gated=True, tied=False))


def make_mt5_large():
    return _make(Config(vocab=250112, d_model=1024, d_kv=64, heads=16, d_ff=2816, layers=24, buckets=32, max_distance=128, src=1024,
                        tgt=229, batch=2, device="meta", gated=True, tied=False))
