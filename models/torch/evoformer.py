"""A stack of AlphaFold2 Evoformer blocks (Jumper et al. 2021, supplementary Algorithms 6-14),
on an MSA representation m [B, S, R, c_m] and a pair representation z [B, R, R, c_z]:

  m += RowAttentionWithPairBias(m, z)      gated (sigmoid) attention along residues, with a bias
                                           per head from a projection of z
  m += ColumnAttention(m)                  gated attention along the sequences of each column
  m += MSATransition(m)                    LN, 4x linear, ReLU, linear
  z += OuterProductMean(m)                 LN, two projections, their outer product averaged over
                                           the sequences, flattened, projected to c_z
  z += TriangleMultiplicationOutgoing(z)   gated projections a, b; sum_k a_ik b_jk; LN, gated
  z += TriangleMultiplicationIncoming(z)   ... sum_k a_ki b_kj
  z += TriangleAttentionStartingNode(z)    gated attention along each row of z, biased by z
  z += TriangleAttentionEndingNode(z)      ... along each column
  z += PairTransition(z)

written with matmul, permute and broadcasting (no einsum), dropout left out (the reference
trains deterministically). The loss is the mean squared error of a linear read-out of the final
pair representation against a target, plus that of the first MSA row: a loss on both stacks.

Factories (tools/plancc-import torch models/torch/evoformer.py:FACTORY):
  make         a tiny stack (2 blocks; 3 sequences of 5 residues; c_m 8, c_z 6, heads of 4);
  make_af2     AlphaFold2's Evoformer stack: 48 blocks, c_m 256, c_z 128, 8 MSA heads and 4
               pair heads of 32, outer product 32, triangle multiplication 128 (supplement,
               section 1.6); 128 sequences of 256 residues; on the meta device: 87,837,696
               parameters in the blocks (48 x 1,829,952, a recount of the supplement's
               algorithms; AlphaFold2 reports about 93 M for the whole model) plus the 386 of
               the loss's read-outs.
Each returns (module, (m, z, pair_target, msa_target)).
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Config:
    def __init__(self, blocks, seqs, res, c_m, c_z, heads_m, heads_z, c, c_opm, c_tri, batch, device=None):
        self.blocks, self.seqs, self.res, self.c_m, self.c_z = blocks, seqs, res, c_m, c_z
        self.heads_m, self.heads_z, self.c, self.c_opm, self.c_tri = heads_m, heads_z, c, c_opm, c_tri
        self.batch, self.device = batch, device


def lin(c, i, o, bias=True):
    return nn.Linear(i, o, bias=bias, device=c.device)


def ln(c, n):
    return nn.LayerNorm(n, device=c.device)


class GatedAttention(nn.Module):
    """Gated multi-head attention over the second-to-last axis of x [B, A, L, C] (each of the A
    rows attends within itself), with an optional bias [B, heads, L, L]."""

    def __init__(self, c, dim, heads):
        super().__init__()
        self.cfg, self.heads = c, heads
        self.q, self.k, self.v = lin(c, dim, heads * c.c, False), lin(c, dim, heads * c.c, False), lin(c, dim, heads * c.c, False)
        self.g = lin(c, dim, heads * c.c)
        self.o = lin(c, heads * c.c, dim)

    def forward(self, x, bias, a, l):
        b, h, d = self.cfg.batch, self.heads, self.cfg.c
        q = self.q(x).view(b, a, l, h, d).permute(0, 1, 3, 2, 4)
        k = self.k(x).view(b, a, l, h, d).permute(0, 1, 3, 4, 2)
        v = self.v(x).view(b, a, l, h, d).permute(0, 1, 3, 2, 4)
        logits = torch.matmul(q, k) * d ** -0.5
        if bias is not None:
            logits = logits + bias.unsqueeze(1)
        o = torch.matmul(F.softmax(logits, dim=-1), v).permute(0, 1, 3, 2, 4).reshape(b, a, l, h * d)
        return self.o(torch.sigmoid(self.g(x)) * o)


class Transition(nn.Module):
    def __init__(self, c, dim):
        super().__init__()
        self.norm, self.l1, self.l2 = ln(c, dim), lin(c, dim, 4 * dim), lin(c, 4 * dim, dim)

    def forward(self, x):
        return self.l2(F.relu(self.l1(self.norm(x))))


class TriangleMultiplication(nn.Module):
    def __init__(self, c, outgoing):
        super().__init__()
        self.cfg, self.outgoing = c, outgoing
        self.norm_in, self.norm_out = ln(c, c.c_z), ln(c, c.c_tri)
        self.a_p, self.a_g, self.b_p, self.b_g = (lin(c, c.c_z, c.c_tri) for _ in range(4))
        self.g, self.o = lin(c, c.c_z, c.c_z), lin(c, c.c_tri, c.c_z)

    def forward(self, z):
        zn = self.norm_in(z)
        a = torch.sigmoid(self.a_g(zn)) * self.a_p(zn)
        b = torch.sigmoid(self.b_g(zn)) * self.b_p(zn)
        if self.outgoing:  # sum_k a[i,k] b[j,k]
            t = torch.matmul(a.permute(0, 3, 1, 2), b.permute(0, 3, 2, 1))
        else:  # sum_k a[k,i] b[k,j]
            t = torch.matmul(a.permute(0, 3, 2, 1), b.permute(0, 3, 1, 2))
        return torch.sigmoid(self.g(zn)) * self.o(self.norm_out(t.permute(0, 2, 3, 1)))


class TriangleAttention(nn.Module):
    def __init__(self, c, starting):
        super().__init__()
        self.cfg, self.starting = c, starting
        self.norm = ln(c, c.c_z)
        self.bias = lin(c, c.c_z, c.heads_z, False)
        self.att = GatedAttention(c, c.c_z, c.heads_z)

    def forward(self, z):
        r = self.cfg.res
        if not self.starting:
            z = z.transpose(1, 2)
        zn = self.norm(z)
        out = self.att(zn, self.bias(zn).permute(0, 3, 1, 2), r, r)
        return out if self.starting else out.transpose(1, 2)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.row_norm, self.row_bias_norm = ln(c, c.c_m), ln(c, c.c_z)
        self.row_bias = lin(c, c.c_z, c.heads_m, False)
        self.row_att = GatedAttention(c, c.c_m, c.heads_m)
        self.col_norm = ln(c, c.c_m)
        self.col_att = GatedAttention(c, c.c_m, c.heads_m)
        self.msa_transition = Transition(c, c.c_m)
        self.opm_norm = ln(c, c.c_m)
        self.opm_a, self.opm_b = lin(c, c.c_m, c.c_opm), lin(c, c.c_m, c.c_opm)
        self.opm_o = lin(c, c.c_opm * c.c_opm, c.c_z)
        self.tri_out, self.tri_in = TriangleMultiplication(c, True), TriangleMultiplication(c, False)
        self.tri_start, self.tri_end = TriangleAttention(c, True), TriangleAttention(c, False)
        self.pair_transition = Transition(c, c.c_z)

    def outer_product_mean(self, m):
        c = self.c
        b, s, r, k = c.batch, c.seqs, c.res, c.c_opm
        mn = self.opm_norm(m)
        a = self.opm_a(mn).permute(0, 2, 3, 1).reshape(b, r * k, s)
        bb = self.opm_b(mn).reshape(b, s, r * k)
        o = torch.matmul(a, bb).reshape(b, r, k, r, k).permute(0, 1, 3, 2, 4).reshape(b, r, r, k * k)
        return self.opm_o(o / s)

    def forward(self, m, z):
        c = self.c
        bias = self.row_bias(self.row_bias_norm(z)).permute(0, 3, 1, 2)
        m = m + self.row_att(self.row_norm(m), bias, c.seqs, c.res)
        mt = self.col_norm(m).transpose(1, 2)
        m = m + self.col_att(mt, None, c.res, c.seqs).transpose(1, 2)
        m = m + self.msa_transition(m)
        z = z + self.outer_product_mean(m)
        z = z + self.tri_out(z)
        z = z + self.tri_in(z)
        z = z + self.tri_start(z)
        z = z + self.tri_end(z)
        return m, z + self.pair_transition(z)


class EvoformerStack(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.blocks = nn.ModuleList([Block(c) for _ in range(c.blocks)])
        self.pair_out = lin(c, c.c_z, 1)
        self.msa_out = lin(c, c.c_m, 1)

    def forward(self, m, z, pair_target, msa_target):
        for block in self.blocks:
            m, z = block(m, z)
        pair = F.mse_loss(self.pair_out(z), pair_target)
        return pair + F.mse_loss(self.msa_out(m[:, 0]), msa_target)


def _make(c):
    torch.manual_seed(0)
    model = EvoformerStack(c)
    d = c.device
    m = torch.randn(c.batch, c.seqs, c.res, c.c_m, device=d)
    z = torch.randn(c.batch, c.res, c.res, c.c_z, device=d)
    return model, (m, z, torch.randn(c.batch, c.res, c.res, 1, device=d), torch.randn(c.batch, c.res, 1, device=d))


def make():
    return _make(Config(blocks=2, seqs=3, res=5, c_m=8, c_z=6, heads_m=2, heads_z=3, c=4, c_opm=3, c_tri=7, batch=2))


def make_af2():
    return _make(Config(blocks=48, seqs=128, res=256, c_m=256, c_z=128, heads_m=8, heads_z=4, c=32, c_opm=32, c_tri=128, batch=2,
                        device="meta"))
