"""Models tools/plancc-import must refuse (exit 2), each with the construct, the fx node and the
source line in its message: tests/import_reject.py runs every factory listed in expect.tsv."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Net(nn.Module):
    def __init__(self, body):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.body = body

    def forward(self, x):
        return self.body(self, x)


def _net(body):
    torch.manual_seed(0)
    return Net(body), (torch.randn(2, 4),)


def control_flow():
    def body(s, x):
        h = s.lin(x)
        if h.sum() > 0:  # data-dependent control flow
            h = h * 2
        return h.mean()
    return _net(body)


def loop_over_rows():
    def body(s, x):
        total = 0
        for row in s.lin(x):  # iterating a traced tensor (not unpacking it into names)
            total = total + row.sum()
        return total
    return _net(body)


def unsupported_function():
    return _net(lambda s, x: torch.cumsum(s.lin(x), dim=1).mean())


def boolean_index():
    def body(s, x):
        h = s.lin(x)
        return h[h > 0].sum()  # a data-dependent shape
    return _net(body)


def softmax_first_dim():
    return _net(lambda s, x: F.softmax(s.lin(x), dim=0).mean())


def output_not_scalar():
    return _net(lambda s, x: s.lin(x))


def label_smoothing():
    def body(s, x):
        return F.cross_entropy(s.lin(x), torch.zeros(2, dtype=torch.long), label_smoothing=0.1)
    return _net(body)


def not_a_pair():
    return nn.Linear(2, 2)


class _Attn(nn.Module):
    def __init__(self, **kw):
        super().__init__()
        self.attn = nn.MultiheadAttention(4, 2, batch_first=True, **kw)

    def forward(self, x):
        return self.attn(x, x, x)[0].mean()


def mha_bias_kv():
    torch.manual_seed(0)
    return _Attn(add_bias_kv=True), (torch.randn(2, 3, 4),)

