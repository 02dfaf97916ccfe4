"""ViT (Dosovitskiy et al. 2021): a patch embedding (a convolution of patch size and stride), a
class token and learned position embeddings, pre-norm encoder blocks (nn.LayerNorm, multi-head
self-attention written with nn.Linear q, k, v and out projections, an MLP with exact GELU), a
final layer norm and a linear head on the class token, trained with the mean cross-entropy of
the class labels.

Factories (tools/plancc-import torch models/torch/vit.py:FACTORY):
  make      a tiny variant (16x16 images, 4x4 patches, dim 32, 2 layers, 4 heads, 10 classes);
  make_b16  ViT-B/16 at 224x224 (12 layers, dim 768, 12 heads, MLP 3072, 1000 classes):
            86,567,656 parameters (torchvision vit_b_16), on the meta device.
Each returns (module, (images, labels)).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    def __init__(self, image, patch, dim, layers, heads, mlp, classes, batch, device=None):
        self.image, self.patch, self.dim, self.layers, self.heads = image, patch, dim, layers, heads
        self.mlp, self.classes, self.batch, self.device = mlp, classes, batch, device
        self.tokens = (image // patch) ** 2 + 1
        self.head_dim = dim // heads


class SelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.q = nn.Linear(c.dim, c.dim, device=c.device)
        self.k = nn.Linear(c.dim, c.dim, device=c.device)
        self.v = nn.Linear(c.dim, c.dim, device=c.device)
        self.out = nn.Linear(c.dim, c.dim, device=c.device)

    def forward(self, x):
        c = self.c
        b, s, h, d = c.batch, c.tokens, c.heads, c.head_dim
        q = self.q(x).view(b, s, h, d).transpose(1, 2)
        k = self.k(x).view(b, s, h, d).transpose(1, 2)
        v = self.v(x).view(b, s, h, d).transpose(1, 2)
        p = F.softmax(torch.matmul(q, k.transpose(-2, -1)) * d ** -0.5, dim=-1)
        return self.out(torch.matmul(p, v).transpose(1, 2).reshape(b, s, h * d))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = nn.LayerNorm(c.dim, eps=1e-6, device=c.device)
        self.self_attention = SelfAttention(c)
        self.ln_2 = nn.LayerNorm(c.dim, eps=1e-6, device=c.device)
        self.mlp_1 = nn.Linear(c.dim, c.mlp, device=c.device)
        self.mlp_2 = nn.Linear(c.mlp, c.dim, device=c.device)

    def forward(self, x):
        x = x + self.self_attention(self.ln_1(x))
        return x + self.mlp_2(F.gelu(self.mlp_1(self.ln_2(x))))


class ViT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.conv_proj = nn.Conv2d(3, c.dim, c.patch, stride=c.patch, device=c.device)
        self.class_token = nn.Parameter(torch.zeros(1, 1, c.dim, device=c.device))
        self.pos_embedding = nn.Parameter(torch.empty(1, c.tokens, c.dim, device=c.device).normal_(std=0.02))
        self.layers = nn.ModuleList([Block(c) for _ in range(c.layers)])
        self.ln = nn.LayerNorm(c.dim, eps=1e-6, device=c.device)
        self.head = nn.Linear(c.dim, c.classes, device=c.device)

    def forward(self, images, labels):
        c = self.c
        x = self.conv_proj(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.class_token.expand(c.batch, -1, -1), x], dim=1) + self.pos_embedding
        for layer in self.layers:
            x = layer(x)
        logits = self.head(self.ln(x)[:, 0])
        return F.cross_entropy(logits, labels)


def _make(c):
    torch.manual_seed(0)
    m = ViT(c)
    images = torch.randn(c.batch, 3, c.image, c.image, device=c.device)
    labels = torch.randint(0, c.classes, (c.batch,), device=c.device)
    return m, (images, labels)


def make():
    return _make(Config(image=16, patch=4, dim=32, layers=2, heads=4, mlp=64, classes=10, batch=2))


def make_b16():
    return _make(Config(image=224, patch=16, dim=768, layers=12, heads=12, mlp=3072, classes=1000, batch=2, device="meta"))
