"""weights.py: safetensors files as planrun reads and writes them (runtime/st.c), and planrun's
synthetic data (runtime/data.c, runtime/rand.c) reproduced in Python.

Names. planrun saves a tensor of a repeated block per copy as NAME.K; optimizer state as
NAME:m, NAME:v (adamw) or NAME:momentum (sgd with momentum), of float32, zeros at the start. A
weights file for `planrun --load` holds every parameter and constant and that state.

Data. An input's element with global row-major index i at step s (0-based), micro-batch mb, is
drawn from the key rt_key(rt_key(rt_key(rt_key(seed, "data"), fnv1a64(name)), s), mb), then
rt_key(key, i): normal is Box-Muller over the key's children 0 and 1, binary is uniform < 0.5 ?
0 : 1, randint is floor(uniform * high).
"""
import json
import math
import struct

MASK = (1 << 64) - 1
DOMAIN_DATA = 0x64617461


def rt_mix(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def rt_key(key, word):
    return rt_mix(key ^ rt_mix(word & MASK))


def rt_uniform(key):
    return (rt_mix(key) >> 11) * 2.0 ** -53


def rt_normal(key):
    u1, u2 = rt_uniform(rt_key(key, 0)), rt_uniform(rt_key(key, 1))
    return math.sqrt(-2.0 * math.log(1.0 - u1)) * math.cos(6.283185307179586476925286766559 * u2)


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for b in s.encode():
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def draw_input(name, kind, shape, high, seed, step, mb=0):
    """The values planrun feeds input `name` at `step`, as a flat list."""
    base = rt_key(rt_key(rt_key(rt_key(seed, DOMAIN_DATA), fnv1a64(name)), step), mb)
    n = math.prod(shape)
    if kind == "normal":
        return [rt_normal(rt_key(base, i)) for i in range(n)]
    if kind == "binary":
        return [0.0 if rt_uniform(rt_key(base, i)) < 0.5 else 1.0 for i in range(n)]
    if kind == "randint":
        return [int(rt_uniform(rt_key(base, i)) * high) for i in range(n)]
    raise ValueError(f"input {name}: data kind {kind} is not reproduced here")


def _crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


_CRC32C = _crc32c_table()


def crc32c(data):
    """CRC-32C (Castagnoli) of bytes, as runtime/plan/hash.c's plan_crc32c computes it."""
    crc, t = 0xFFFFFFFF, _CRC32C
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def write(path, tensors, meta=None):
    """tensors: name -> (shape, flat list of floats or a torch tensor); written as F32, with the
    __metadata__ planrun --load checks (runtime/st.c): the producer, step 0 and each tensor's
    CRC-32C under "crc32c:NAME" (meta adds to it)."""
    header, blobs, off = {}, [], 0
    checks = {"format": "pt", "producer": "plancc-import", "step": "0"}
    for name in sorted(tensors):
        shape, data = tensors[name]
        if hasattr(data, "detach"):
            raw = data.detach().float().contiguous().numpy().tobytes() if data.numel() else b""
        else:
            raw = struct.pack(f"<{len(data)}f", *data)
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        checks[f"crc32c:{name}"] = "%08x" % crc32c(raw)
        blobs.append(raw)
        off += len(raw)
    header["__metadata__"] = {**checks, **(meta or {})}
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def read(path):
    """name -> (shape, flat list of floats) of a safetensors file of F32 or F64 tensors."""
    with open(path, "rb") as f:
        raw = f.read()
    (hl,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + hl])
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        fmt = "d" if t["dtype"] == "F64" else "f"
        size = 8 if fmt == "d" else 4
        out[name] = (t["shape"], list(struct.unpack(f"<{(e - b) // size}{fmt}", raw[8 + hl + b:8 + hl + e])))
    return out
