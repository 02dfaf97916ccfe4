"""nanoGPT's model (Karpathy, github.com/karpathy/nanoGPT, model.py), its slow attention path as
written there: q, k, v from one c_attn product split in three, the scores masked with
masked_fill(bias[:, :, :T, :T] == 0, -inf) where `bias` is a buffer of tril(ones), exact GELU,
pre-LayerNorm blocks, learned positions, and the LM head tied to the token embedding, its forward
as nanoGPT writes it (b, t = idx.size(); assert t <= block_size; arange(0, t, device=...); the
mask buffer sliced to the sequence), at a sequence shorter than the block. The tests import it
(tests/import_causal.py): the masked_fill becomes attention's causal attribute, the unpacking
traces (fxmap.py's Tracer.iter), and the sizes are numbers (Tracer.shape_of).

Factories: make  (2 layers, 4 heads, embedding 32, block size 16, sequence 8, vocabulary 64,
                 batch 2);
           make_window  the same with each query seeing itself and the 3 keys before it only (a
                        band, not a causal mask: it must stay a masked_fill of the scores).
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head, block_size, window=None):
        super().__init__()
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_head, self.n_embd = n_head, n_embd
        seen = torch.tril(torch.ones(block_size, block_size))
        if window is not None:
            seen = seen.triu(-(window - 1))
        self.register_buffer("bias", seen.view(1, 1, block_size, block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size, window=None):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head, block_size, window)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, block_size, n_layer, n_head, n_embd, window=None):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.h = nn.ModuleList([Block(n_embd, n_head, block_size, window) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying, as nanoGPT does

    def forward(self, idx, targets):
        device = idx.device
        b, t = idx.size()
        assert t <= self.block_size, f"Cannot forward sequence of length {t}, block size is only {self.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def make(window=None):
    torch.manual_seed(0)
    m = GPT(vocab=64, block_size=16, n_layer=2, n_head=4, n_embd=32, window=window)
    idx = torch.randint(0, 64, (2, 8))
    targets = torch.randint(0, 64, (2, 8))
    return m, (idx, targets)


def make_window():
    return make(window=4)
