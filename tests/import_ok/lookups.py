"""A small model of the lookups tools/plancc-import maps (torch.gather, torch.index_select, x[rows]
with a list of rows, torch.topk, F.one_hot): the torch suite imports it and verifies it against
PyTorch (--verify), so each mapping is checked numerically, gradients included. The indices are
inputs (integer constants are refused: the model format's constants are floats)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Lookups(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Linear(6, 6)

    def forward(self, x, picks, rows, rows0, target):
        h = torch.tanh(self.w(x))                       # [3, 5, 6]
        g = torch.gather(h, 1, picks)                   # [3, 4, 6]: picks index axis 1
        s = torch.index_select(h, 1, rows)              # [3, 4, 6]
        r = h[:, :, :4][rows0]                          # rows of axis 0 (a list): [3, 5, 4]
        top = torch.topk(g * s, 2, dim=-1)
        oh = F.one_hot(target, 5).float()               # [3, 5]
        return top[0].mean() + (r.sum(-1) * oh).mean() + F.cross_entropy(h.sum(-1), target)


def make():
    torch.manual_seed(0)
    return Lookups(), (torch.randn(3, 5, 6), torch.randint(0, 5, (3, 4, 6)), torch.tensor([4, 0, 2, 2]), torch.tensor([0, 2, 2]),
                       torch.randint(0, 5, (3,)))
