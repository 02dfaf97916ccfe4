"""stdlayers.py: torch.nn's transformer layers, written again so that torch.fx can trace into them.

torch 1.13's nn.MultiheadAttention, nn.TransformerEncoderLayer, nn.TransformerEncoder and
nn.Transformer test their inputs before computing anything (src.dim() == 3, the mask's dtype,
the fast path's conditions); on a traced value each test is data-dependent control flow, and
torch.fx refuses the model. The importer's tracer (fxmap.Tracer) calls, for a module of these
classes, the forward below instead of the module's own: the same arithmetic as PyTorch's slow
(training) path, from the module's own parameters (so they keep their PyTorch names), written
with the operators the importer maps, the attention in the form fuse.py turns into plancc's
attention operator:

  MultiheadAttention   q, k, v projections (one linear and a split when query, key and value
                       are one tensor; else the slices of in_proj_weight, or q/k/v_proj_weight),
                       softmax(q k^T / sqrt(d) + mask) v per head, out_proj. batch_first or not.
                       attn_mask [L, S] or [N heads, L, S] (float: added; bool: True masked) and
                       key_padding_mask [N, S] (bool: True masked; float: added). Dropout of
                       the probabilities while training (the module's dropout, PyTorch's
                       default 0.1 in the transformer layers): fuse.py makes it attention's
                       "dropout". Returns (output, None): the attention weights are not
                       computed.
  TransformerEncoderLayer, TransformerDecoderLayer (norm_first or not): their slow paths.
  TransformerEncoder, TransformerDecoder, Transformer: the layers in turn, then the norm.

Refused (an exception with the model's source line; plancc-import exits 2): add_bias_kv,
add_zero_attn, need_weights used by the model (the weights are
None), a mask whose dtype cannot be known (a value computed from the inputs: only a model input
or a buffer, or a mask computed from buffers alone, can be a bool mask).
"""
import functools
import math

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F


class Unsupported(Exception):
    """A form of a standard layer the importer cannot map."""


def traceable(tracer, m, forward):
    """The forward to trace for module m: a rewrite below for torch.nn's transformer layers, else
    the module's own."""
    if isinstance(m, nn.MultiheadAttention):
        return functools.partial(mha_forward, tracer, m)
    if isinstance(m, nn.TransformerEncoderLayer):
        return functools.partial(encoder_layer_forward, m)
    if isinstance(m, nn.TransformerDecoderLayer):
        return functools.partial(decoder_layer_forward, m)
    if isinstance(m, nn.TransformerEncoder):
        return functools.partial(stack_forward, m, False)
    if isinstance(m, nn.TransformerDecoder):
        return functools.partial(stack_forward, m, True)
    if isinstance(m, nn.Transformer):
        return functools.partial(transformer_forward, m)
    return forward


def example_of(tracer, x):
    """The value of a mask before running: a tensor itself, a traced buffer (from the module) or a
    model input (from the example inputs); anything else cannot be known and is refused."""
    if isinstance(x, torch.Tensor):
        return x
    ex = tracer.example(x.node) if isinstance(x, fx.Proxy) else None
    if isinstance(ex, torch.Tensor):
        return ex
    raise Unsupported("a MultiheadAttention mask computed in the model (its dtype and rank decide what it means): "
                      "pass it as a model input or a buffer")


def additive(tracer, mask, shape, padding):
    """A mask as a float to add to the scores [n, h, s, t]: bool True becomes -inf, a float mask
    stays; [s, t] as it is, [n h, s, t] (PyTorch's 3-D form) and the padding mask [n, t] reshaped."""
    if mask is None:
        return None
    ex = example_of(tracer, mask)
    if ex.dtype == torch.bool and isinstance(mask, torch.Tensor):
        # a buffer read as a tensor: converted once, so every layer reads one constant (and
        # the copies of a module list can still become one repeated block)
        cache = tracer.__dict__.setdefault("plancc_masks", {})
        if id(mask) not in cache:
            cache[id(mask)] = (mask, torch.zeros_like(mask, dtype=torch.float32).masked_fill(mask, float("-inf")))
        mask = cache[id(mask)][1]
    elif ex.dtype == torch.bool:
        mask = torch.zeros_like(mask, dtype=torch.float32).masked_fill(mask, float("-inf"))
    n, h, s, t = shape
    if padding:
        return mask.reshape(n, 1, 1, t)
    return mask.reshape(n, h, s, t) if ex.dim() == 3 else mask


def projections(m, query, key, value):
    """q, k, v = the input projections of an nn.MultiheadAttention, [N, L, E] each."""
    e = m.embed_dim
    b = m.in_proj_bias
    bq, bk, bv = (None, None, None) if b is None else (b[:e], b[e:2 * e], b[2 * e:])
    if not m._qkv_same_embed_dim:
        return F.linear(query, m.q_proj_weight, bq), F.linear(key, m.k_proj_weight, bk), F.linear(value, m.v_proj_weight, bv)
    w = m.in_proj_weight
    if query is key and key is value:
        c = F.linear(query, w, b).chunk(3, dim=-1)  # a traced tuple: indexed, not unpacked
        return c[0], c[1], c[2]
    return F.linear(query, w[:e], bq), F.linear(key, w[e:2 * e], bk), F.linear(value, w[2 * e:], bv)


def mha_forward(tracer, m, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True):
    """nn.MultiheadAttention.forward (torch 1.13's arithmetic), traceable; returns (output, None)."""
    if m.bias_k is not None or m.add_zero_attn:
        raise Unsupported("an nn.MultiheadAttention with add_bias_kv or add_zero_attn")
    if not m.batch_first:  # [L, N, E]: transposed once each, a shared input once
        qk, kv = query is key, key is value
        query = query.transpose(0, 1)
        key = query if qk else key.transpose(0, 1)
        value = key if kv else value.transpose(0, 1)
    q, k, v = projections(m, query, key, value)
    n, s, t = q.size(0), q.size(1), k.size(1)
    h, d = m.num_heads, m.head_dim
    q = q.reshape(n, s, h, d).transpose(1, 2)
    k = k.reshape(n, t, h, d).transpose(1, 2)
    v = v.reshape(n, t, h, d).transpose(1, 2)
    scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(d)
    for mask in (additive(tracer, attn_mask, (n, h, s, t), False), additive(tracer, key_padding_mask, (n, h, s, t), True)):
        if mask is not None:
            scores = scores + mask
    p = F.softmax(scores, dim=-1)
    if m.training and m.dropout > 0:
        p = F.dropout(p, m.dropout, True)
    o = torch.matmul(p, v).transpose(1, 2).reshape(n, s, h * d)
    o = m.out_proj(o)
    return (o if m.batch_first else o.transpose(0, 1)), None


def encoder_layer_forward(m, src, src_mask=None, src_key_padding_mask=None):
    """nn.TransformerEncoderLayer.forward's slow path."""
    x = src
    if m.norm_first:
        x = x + m._sa_block(m.norm1(x), src_mask, src_key_padding_mask)
        return x + m._ff_block(m.norm2(x))
    x = m.norm1(x + m._sa_block(x, src_mask, src_key_padding_mask))
    return m.norm2(x + m._ff_block(x))


def decoder_layer_forward(m, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                          memory_key_padding_mask=None):
    """nn.TransformerDecoderLayer.forward."""
    x = tgt
    if m.norm_first:
        x = x + m._sa_block(m.norm1(x), tgt_mask, tgt_key_padding_mask)
        x = x + m._mha_block(m.norm2(x), memory, memory_mask, memory_key_padding_mask)
        return x + m._ff_block(m.norm3(x))
    x = m.norm1(x + m._sa_block(x, tgt_mask, tgt_key_padding_mask))
    x = m.norm2(x + m._mha_block(x, memory, memory_mask, memory_key_padding_mask))
    return m.norm3(x + m._ff_block(x))


def stack_forward(m, decoder, x, *args, **kwargs):
    """nn.TransformerEncoder / nn.TransformerDecoder: each layer in turn, then the norm."""
    if decoder:
        memory, *args = args if args else (kwargs.pop("memory"),)
        names = ("tgt_mask", "memory_mask", "tgt_key_padding_mask", "memory_key_padding_mask")
        kw = dict(zip(names, args), **kwargs)
        for layer in m.layers:
            x = layer(x, memory, **kw)
    else:
        kw = dict(zip(("mask", "src_key_padding_mask"), args), **kwargs)
        for layer in m.layers:
            x = layer(x, src_mask=kw.get("mask"), src_key_padding_mask=kw.get("src_key_padding_mask"))
    return m.norm(x) if m.norm is not None else x


def transformer_forward(m, src, tgt, src_mask=None, tgt_mask=None, memory_mask=None, src_key_padding_mask=None,
                        tgt_key_padding_mask=None, memory_key_padding_mask=None):
    """nn.Transformer.forward: the encoder, then the decoder on its output."""
    memory = m.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask)
    return m.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask, tgt_key_padding_mask=tgt_key_padding_mask,
                     memory_key_padding_mask=memory_key_padding_mask)
