#!/usr/bin/env python3
"""Reference outputs for voltad's dequantizers, from ggml's own Python package.

Writes tests/fixtures/gguf/dequant_reference.gguf: for every tensor type
voltad supports, a tensor "<TYPE>.input" of random but valid blocks (every
quant byte random; fp16 scales and mins finite) and a tensor
"<TYPE>.expected" (F32, same shape) holding gguf.quants.dequantize of it.
tests/engine/test_dequantize.cpp reads the file with voltad's GGUF reader
and compares its own decoders against the expected floats.

Written with gguf==0.19.0 and numpy==2.4.6 (Python 3.11). Re-run:
  python3 -m venv .venv-gguf && .venv-gguf/bin/pip install gguf==0.19.0 numpy==2.4.6
  .venv-gguf/bin/python scripts/gen_dequant_fixtures.py
The seed is fixed, so the output only changes if the packages change.
"""
import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.constants import GGML_QUANT_SIZES
from gguf.quants import dequantize

ROWS = 2
ROW_ELEMS = 512  # two K-quant super-blocks, sixteen 32-blocks

# Byte offsets of the fp16 fields in each block (scale d, min or dmin).
FP16_FIELDS = {
    T.Q4_0: [0],
    T.Q4_1: [0, 2],
    T.Q5_0: [0],
    T.Q5_1: [0, 2],
    T.Q8_0: [0],
    T.Q4_K: [0, 2],
    T.Q5_K: [0, 2],
    T.Q6_K: [208],
}


def random_halves(rng, n):
    """Finite fp16 values across the range, including subnormals and zeros."""
    v = rng.normal(0.0, 0.05, n).astype(np.float16)
    special = np.array([0.0, -0.0, 6.0e-8, -6.0e-8, 3.0e-5, 65504.0, -2.0, 1.0], dtype=np.float16)
    k = min(n, len(special))
    v[rng.choice(n, k, replace=False)] = special[:k]
    return v


def quant_input(rng, qtype):
    block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
    n_blocks = ROWS * ROW_ELEMS // block_elems
    blocks = rng.integers(0, 256, (n_blocks, block_bytes), dtype=np.uint8)
    for off in FP16_FIELDS[qtype]:
        blocks[:, off:off + 2] = random_halves(rng, n_blocks).view(np.uint8).reshape(n_blocks, 2)
    return blocks.reshape(ROWS, -1)


def float_input(rng, qtype):
    n = ROWS * ROW_ELEMS
    if qtype == T.F32:
        v = rng.normal(0.0, 1.0, n).astype(np.float32)
        v[:4] = [0.0, -0.0, 1.0e-40, -3.4e38]  # zero, subnormal, large
        return v.view(np.uint8).reshape(ROWS, -1)
    if qtype == T.F16:
        v = random_halves(rng, n)
        v[:3] = np.array([np.inf, -np.inf, 5.96e-8], dtype=np.float16)
        return v.view(np.uint8).reshape(ROWS, -1)
    # BF16: random bit patterns with the all-ones exponent (inf/NaN) avoided.
    bits = rng.integers(0, 1 << 16, n, dtype=np.uint32).astype(np.uint16)
    bits[(bits & 0x7F80) == 0x7F80] &= 0xBFFF
    return bits.view(np.uint8).reshape(ROWS, -1)


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = os.path.join(root, "tests", "fixtures", "gguf", "dequant_reference.gguf")
    rng = np.random.default_rng(20240611)
    writer = gguf.GGUFWriter(out, arch="dequant-reference")
    writer.add_string("reference.generator", "scripts/gen_dequant_fixtures.py, gguf " +
                      getattr(gguf, "__version__", "0.19.0"))
    for qtype in [T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1,
                  T.Q4_K, T.Q5_K, T.Q6_K]:
        raw = float_input(rng, qtype) if qtype in (T.F32, T.F16, T.BF16) else quant_input(rng, qtype)
        expected = dequantize(raw, qtype).astype(np.float32).reshape(ROWS, ROW_ELEMS)
        assert np.isfinite(expected).sum() >= expected.size - 2, qtype.name
        writer.add_tensor(f"{qtype.name}.input", raw, raw_shape=raw.shape, raw_dtype=qtype)
        writer.add_tensor(f"{qtype.name}.expected", expected)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    print(out, os.path.getsize(out), "bytes", file=sys.stderr)


if __name__ == "__main__":
    main()
