"""Models built from torch.nn's own transformer layers, which tools/plancc-import traces through
tools/plancc_import/stdlayers.py (torch 1.13's forwards test their inputs' ranks and dtypes, which
torch.fx cannot trace): the torch suite imports each and verifies it against PyTorch (--verify).

  encoder      nn.TransformerEncoder of two nn.TransformerEncoderLayer (sequence first, norm
               first, a final LayerNorm) under a bool causal mask registered as a buffer: the two
               layers become one repeated block
  attention    nn.MultiheadAttention: self-attention with a bool key padding mask given as a model
               input, then cross-attention with kdim and vdim (separate q, k, v weights)
  transformer  nn.Transformer (one encoder and one decoder layer, batch first) with the float
               causal mask of generate_square_subsequent_mask as a buffer
  dropout      nn.TransformerEncoderLayer as PyTorch makes it by default (dropout 0.1: hidden,
               and the attention's probabilities), training: tests/import_dropout.py
  written      attention written out with dropout 0.1 of its probabilities and of its output,
               its head width computed from the input's shape (x.size(-1) // heads: ONNX's
               Shape, Gather of index -1 and an integer Div): tests/import_dropout.py exports it
               to ONNX in training mode
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 8)
        layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, norm_first=True)
        self.enc = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(8))
        self.register_buffer("causal", torch.ones(5, 5, dtype=torch.bool).triu(1))
        self.head = nn.Linear(8, 11)

    def forward(self, x, y):
        h = self.enc(self.emb(x).transpose(0, 1), mask=self.causal).transpose(0, 1)
        return F.cross_entropy(self.head(h).reshape(-1, 11), y.reshape(-1))


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.self_attn = nn.MultiheadAttention(8, 2, batch_first=True)
        self.cross = nn.MultiheadAttention(8, 2, kdim=6, vdim=6, batch_first=True)

    def forward(self, x, pad, mem):
        h = x + self.self_attn(x, x, x, key_padding_mask=pad)[0]
        return self.cross(h, mem, mem, need_weights=False)[0].pow(2).mean()


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.t = nn.Transformer(8, 2, 1, 1, 16, dropout=0.0, batch_first=True)
        self.register_buffer("tgt_mask", nn.Transformer.generate_square_subsequent_mask(4))

    def forward(self, src, tgt):
        return self.t(src, tgt, tgt_mask=self.tgt_mask).pow(2).mean()


class Dropout(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 8)
        self.enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 2)
        self.head = nn.Linear(8, 11)

    def forward(self, x, y):
        return F.cross_entropy(self.head(self.enc(self.emb(x))).reshape(-1, 11), y.reshape(-1))


class Written(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(11, 8)
        self.qkv = nn.Linear(8, 24)
        self.proj = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.1)
        self.head = nn.Linear(8, 11)

    def forward(self, x, y):
        h = self.emb(x)
        n, s, e = h.size(0), h.size(1), h.size(-1)
        d = e // 2
        c = self.qkv(h).split(e, dim=-1)  # a traced tuple: indexed, not unpacked
        q, k, v = (c[i].reshape(n, s, 2, d).transpose(1, 2) for i in range(3))
        p = F.dropout(F.softmax(q @ k.transpose(2, 3) / math.sqrt(d), dim=-1), 0.1, self.training)
        o = (p @ v).transpose(1, 2).reshape(n, s, e)
        h = h + self.drop(self.proj(o))
        return F.cross_entropy(self.head(h).reshape(-1, 11), y.reshape(-1))


def encoder():
    torch.manual_seed(0)
    return Encoder(), (torch.randint(0, 11, (2, 5)), torch.randint(0, 11, (2, 5)))


def attention():
    torch.manual_seed(0)
    pad = torch.zeros(2, 5, dtype=torch.bool)
    pad[0, 3:] = True
    return Attention(), (torch.randn(2, 5, 8), pad, torch.randn(2, 7, 6))


def transformer():
    torch.manual_seed(0)
    return Transformer(), (torch.randn(2, 5, 8), torch.randn(2, 4, 8))


def dropout():
    torch.manual_seed(0)
    return Dropout(), (torch.randint(0, 11, (2, 5)), torch.randint(0, 11, (2, 5)))


def written():
    torch.manual_seed(0)
    return Written(), (torch.randint(0, 11, (2, 5)), torch.randint(0, 11, (2, 5)))
