"""Simple Q4_K and Q6_K *encoders* (gguf.quants can only decode K-quants).

The encoding is a plain min/max fit, not llama.cpp's search-based quantizer: the
fixtures only need valid blocks, because reference logits are computed from the
weights as gguf.quants *decodes* them.  Layouts follow gguf.quants' decoders:

Q4_K block (256 values, 144 bytes): f16 d, f16 dmin, 12 bytes of packed 6-bit
(scale, min) for 8 sub-blocks of 32, 128 bytes of 4-bit q.  x = d*sc*q - dmin*m.
Q6_K block (256 values, 210 bytes): 128 bytes ql (low 4 bits), 64 bytes qh (high
2 bits), 16 int8 scales (one per 16 values), f16 d.  x = d*sc*(q - 32).
"""
import numpy as np

QK_K = 256


def _f16(x):
    return np.asarray(x, dtype=np.float32).astype(np.float16)


def quantize_q4_k(data: np.ndarray) -> np.ndarray:
    rows, cols = data.shape
    assert cols % QK_K == 0
    x = data.astype(np.float32).reshape(-1, 8, 32)  # (nb, sub, 32)
    nb = x.shape[0]
    lo = np.minimum(x.min(axis=-1), 0.0)  # (nb, 8) <= 0
    hi = x.max(axis=-1)
    scale = np.maximum(hi - lo, 1e-12) / 15.0
    mneg = -lo
    d = _f16(scale.max(axis=-1) / 63.0)
    dmin = _f16(mneg.max(axis=-1) / 63.0)
    d32 = d.astype(np.float32)[:, None]
    dm32 = dmin.astype(np.float32)[:, None]
    sc = np.clip(np.round(np.where(d32 > 0, scale / np.where(d32 > 0, d32, 1), 0)), 1, 63).astype(np.uint8)
    m = np.clip(np.round(np.where(dm32 > 0, mneg / np.where(dm32 > 0, dm32, 1), 0)), 0, 63).astype(np.uint8)
    step = (d32 * sc.astype(np.float32))[..., None]
    off = (dm32 * m.astype(np.float32))[..., None]
    q = np.clip(np.round((x + off) / np.where(step > 0, step, 1)), 0, 15).astype(np.uint8)  # (nb, 8, 32)

    scales = np.zeros((nb, 12), dtype=np.uint8)
    for j in range(4):
        scales[:, j] = (sc[:, j] & 63) | ((sc[:, j + 4] >> 4) << 6)
        scales[:, j + 4] = (m[:, j] & 63) | ((m[:, j + 4] >> 4) << 6)
        scales[:, j + 8] = (sc[:, j + 4] & 0xF) | ((m[:, j + 4] & 0xF) << 4)
    qs = (q[:, 0::2, :] | (q[:, 1::2, :] << 4)).reshape(nb, 128)
    out = np.concatenate([d.reshape(nb, 1).view(np.uint8), dmin.reshape(nb, 1).view(np.uint8), scales, qs], axis=1)
    assert out.shape[1] == 144
    return out.reshape(rows, cols // QK_K * 144)


def quantize_q6_k(data: np.ndarray) -> np.ndarray:
    rows, cols = data.shape
    assert cols % QK_K == 0
    x = data.astype(np.float32).reshape(-1, 16, 16)
    nb = x.shape[0]
    amax_i = np.abs(x).argmax(axis=-1)
    vmax = np.take_along_axis(x, amax_i[..., None], axis=-1)[..., 0]  # signed value of largest magnitude
    scale = -vmax / 32.0  # so the extreme value maps to q = -32 exactly, like ggml does
    d = _f16(np.abs(scale).max(axis=-1) / 127.0)
    d32 = d.astype(np.float32)[:, None]
    sc = np.clip(np.round(np.where(d32 > 0, scale / np.where(d32 > 0, d32, 1), 0)), -128, 127).astype(np.int8)
    step = (d32 * sc.astype(np.float32))[..., None]
    q = np.clip(np.round(x / np.where(step != 0, step, 1)), -32, 31).astype(np.int16) + 32
    q = q.reshape(nb, QK_K).astype(np.uint8)
    ql = np.zeros((nb, 128), dtype=np.uint8)
    qh = np.zeros((nb, 64), dtype=np.uint8)
    for i in range(QK_K):
        h, r = divmod(i, 128)
        s, p = divmod(r, 64)
        ql[:, h * 64 + p] |= (q[:, i] & 0xF) << (4 * s)
        s2, p2 = divmod(r, 32)
        qh[:, h * 32 + p2] |= (q[:, i] >> 4) << (2 * s2)
    out = np.concatenate([ql, qh, sc.view(np.uint8), d.reshape(nb, 1).view(np.uint8)], axis=1)
    assert out.shape[1] == 210
    return out.reshape(rows, cols // QK_K * 210)
