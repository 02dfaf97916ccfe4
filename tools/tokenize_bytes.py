#!/usr/bin/python3
"""tokenize_bytes.py: a text file -> byte-level tokens in nanoGPT's train.bin format, and back.

  /usr/bin/python3 tools/tokenize_bytes.py data/kjv.txt                  writes data/kjv.bin
  /usr/bin/python3 tools/tokenize_bytes.py data/kjv.txt -o other.bin     writes other.bin
  /usr/bin/python3 tools/tokenize_bytes.py --check data/kjv.txt data/kjv.bin
                                    exit 0 if the .bin is exactly the text's tokens, 1 if not

The tokenizer is the simplest one there is: every byte of the file is one token (vocabulary 256,
gpt-tiny's V), with no decoding, normalization or special tokens, so the same file always gives
the same tokens and decoding is `bytes(tokens)`. The output is what nanoGPT's prepare.py writes
(`np.array(ids, dtype=np.uint16).tofile(path)`): the tokens as little-endian uint16, nothing
else, no header. planrun's --data reads that format (runtime/data.c).

Standard library only. Exit codes: 0 ok, 1 --check found a difference, 2 usage or I/O error.
"""
import argparse
import os
import sys
from array import array

VOCAB = 256  # byte-level


def encode(data):
    """The tokens of the bytes `data`, as the bytes of a little-endian uint16 file."""
    a = array("H", iter(data))  # one token per byte (array("H", bytes) would pair them up)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tobytes()


def decode(raw):
    """The tokens of a little-endian uint16 file's bytes, as a list of ints; ValueError if odd."""
    if len(raw) % 2:
        raise ValueError("%d bytes: a token file holds 2-byte tokens" % len(raw))
    a = array("H")
    a.frombytes(raw)
    if sys.byteorder != "little":
        a.byteswap()
    return a.tolist()


def check(text_path, bin_path):
    """0 if bin_path holds exactly text_path's tokens; else 1, saying where they first differ."""
    with open(text_path, "rb") as f:
        data = f.read()
    with open(bin_path, "rb") as f:
        raw = f.read()
    try:
        tok = decode(raw)
    except ValueError as e:
        print("tokenize: %s: %s" % (bin_path, e), file=sys.stderr)
        return 1
    bad = next((i for i, t in enumerate(tok) if t >= VOCAB), None)
    if bad is not None:
        print("tokenize: %s: token %d at position %d is outside the byte vocabulary (%d)"
              % (bin_path, tok[bad], bad, VOCAB), file=sys.stderr)
        return 1
    if len(tok) != len(data):
        print("tokenize: %s holds %d tokens, %s has %d bytes" % (bin_path, len(tok), text_path, len(data)),
              file=sys.stderr)
        return 1
    diff = next((i for i, (t, b) in enumerate(zip(tok, data)) if t != b), None)
    if diff is not None:
        print("tokenize: %s differs from %s at position %d: token %d, byte %d"
              % (bin_path, text_path, diff, tok[diff], data[diff]), file=sys.stderr)
        return 1
    print("tokenize: %s matches %s: %d tokens, %d distinct, vocabulary %d"
          % (bin_path, text_path, len(tok), len(set(tok)), VOCAB))
    return 0


def main():
    ap = argparse.ArgumentParser(description="Byte-level tokens of a text file, as nanoGPT's train.bin "
                                             "(little-endian uint16).")
    ap.add_argument("--check", action="store_true", help="check that BIN holds exactly TEXT's tokens")
    ap.add_argument("-o", "--output", help="the .bin to write (default: TEXT with .bin for its extension)")
    ap.add_argument("text", help="the text file")
    ap.add_argument("bin", nargs="?", help="with --check: the token file to check")
    a = ap.parse_args()
    try:
        if a.check:
            if not a.bin:
                ap.error("--check wants TEXT and BIN")
            return check(a.text, a.bin)
        if a.bin:
            ap.error("one text file (use -o for the output)")
        out = a.output or os.path.splitext(a.text)[0] + ".bin"
        with open(a.text, "rb") as f:
            data = f.read()
        if len(data) < 2:
            print("tokenize: %s: fewer than 2 bytes; planrun wants at least 2 tokens" % a.text, file=sys.stderr)
            return 2
        tokens = encode(data)
        tmp = out + ".tmp"
        with open(tmp, "wb") as f:
            f.write(tokens)
        os.replace(tmp, out)
        print("tokenize: wrote %s: %d tokens (%d distinct) from %s" % (out, len(data), len(set(data)), a.text))
        return 0
    except OSError as e:
        print("tokenize: %s" % e, file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
