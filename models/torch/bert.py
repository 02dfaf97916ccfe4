"""BERT for pre-training (Devlin et al. 2019), as Hugging Face's BertForPreTraining: word,
position and token-type embeddings with a layer norm, post-norm encoder layers (self-attention
over a padding mask given as 0/1 per token, turned into an additive bias; an MLP with exact
GELU), a pooler (dense + tanh on the first token), the masked-LM head (dense, GELU, layer norm,
a decoder tied to the word embeddings plus a bias) and the next-sentence head. The loss is the
MLM cross-entropy (ignore_index -100: positions not masked) plus the NSP cross-entropy.

Factories (tools/plancc-import torch models/torch/bert.py:FACTORY):
  make        a tiny variant (vocab 64, dim 32, 2 layers, 4 heads, sequence 8, batch 2);
  make_large  BERT-large (24 layers, dim 1024, 16 heads, MLP 4096, vocab 30522, 512 positions,
              sequence 512): 336,226,108 parameters = BertModel's 335,141,888 (Hugging Face
              bert-large-uncased, with the pooler) + the pre-training heads' 1,084,220; meta device.
Each returns (module, (input_ids, token_type_ids, attention_mask, mlm_labels, nsp_labels)).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    def __init__(self, vocab, dim, layers, heads, mlp, positions, seq, batch, device=None):
        self.vocab, self.dim, self.layers, self.heads, self.mlp = vocab, dim, layers, heads, mlp
        self.positions, self.seq, self.batch, self.device = positions, seq, batch, device
        self.head_dim = dim // heads


def linear(c, i, o):
    return nn.Linear(i, o, device=c.device)


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.query, self.key, self.value = linear(c, c.dim, c.dim), linear(c, c.dim, c.dim), linear(c, c.dim, c.dim)
        self.attention_output = linear(c, c.dim, c.dim)
        self.attention_norm = nn.LayerNorm(c.dim, eps=1e-12, device=c.device)
        self.intermediate = linear(c, c.dim, c.mlp)
        self.output = linear(c, c.mlp, c.dim)
        self.output_norm = nn.LayerNorm(c.dim, eps=1e-12, device=c.device)

    def forward(self, x, bias):
        c = self.c
        b, s, h, d = c.batch, c.seq, c.heads, c.head_dim
        q = self.query(x).view(b, s, h, d).transpose(1, 2)
        k = self.key(x).view(b, s, h, d).transpose(1, 2)
        v = self.value(x).view(b, s, h, d).transpose(1, 2)
        p = F.softmax(torch.matmul(q, k.transpose(-1, -2)) / d ** 0.5 + bias, dim=-1)
        a = torch.matmul(p, v).transpose(1, 2).reshape(b, s, h * d)
        x = self.attention_norm(x + self.attention_output(a))
        return self.output_norm(x + self.output(F.gelu(self.intermediate(x))))


class Bert(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.word_embeddings = nn.Embedding(c.vocab, c.dim, device=c.device)
        self.position_embeddings = nn.Embedding(c.positions, c.dim, device=c.device)
        self.token_type_embeddings = nn.Embedding(2, c.dim, device=c.device)
        self.embeddings_norm = nn.LayerNorm(c.dim, eps=1e-12, device=c.device)
        self.layers = nn.ModuleList([Layer(c) for _ in range(c.layers)])
        self.pooler = linear(c, c.dim, c.dim)
        self.mlm_transform = linear(c, c.dim, c.dim)
        self.mlm_norm = nn.LayerNorm(c.dim, eps=1e-12, device=c.device)
        self.mlm_bias = nn.Parameter(torch.zeros(c.vocab, device=c.device))
        self.nsp = linear(c, c.dim, 2)
        self.register_buffer("position_ids", torch.arange(c.positions, device=c.device)[None, : c.seq].float())

    def forward(self, input_ids, token_type_ids, attention_mask, mlm_labels, nsp_labels):
        c = self.c
        pos = self.position_embeddings.weight[: c.seq]
        x = self.word_embeddings(input_ids) + pos + self.token_type_embeddings(token_type_ids)
        x = self.embeddings_norm(x)
        bias = (1.0 - attention_mask[:, None, None, :]) * -10000.0
        for layer in self.layers:
            x = layer(x, bias)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        t = self.mlm_norm(F.gelu(self.mlm_transform(x)))
        logits = F.linear(t, self.word_embeddings.weight) + self.mlm_bias
        mlm = F.cross_entropy(logits.view(-1, c.vocab), mlm_labels.view(-1), ignore_index=-100)
        return mlm + F.cross_entropy(self.nsp(pooled), nsp_labels)


def _make(c):
    torch.manual_seed(0)
    m = Bert(c)
    ids = torch.randint(0, c.vocab, (c.batch, c.seq), device=c.device)
    types = torch.randint(0, 2, (c.batch, c.seq), device=c.device)
    mask = torch.ones(c.batch, c.seq, device=c.device)
    labels = torch.randint(0, c.vocab, (c.batch, c.seq), device=c.device)
    nsp = torch.randint(0, 2, (c.batch,), device=c.device)
    if c.device != "meta":
        mask[:, -2:] = 0  # padding at the end of each sequence
        labels[:, ::2] = -100  # only every other position is a masked-LM target
    return m, (ids, types, mask, labels, nsp)


def make():
    return _make(Config(vocab=64, dim=32, layers=2, heads=4, mlp=64, positions=16, seq=8, batch=2))


def make_large():
    return _make(Config(vocab=30522, dim=1024, layers=24, heads=16, mlp=4096, positions=512, seq=512, batch=2, device="meta"))
