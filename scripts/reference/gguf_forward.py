"""An independent float64 forward pass that reads a GGUF file with llama.cpp's semantics.

It is the executable statement of what a GGUF means for llama / qwen2 / qwen3,
used to cross-check the exported files against Hugging Face transformers:
- llama: Q/K rows were permuted by the converter, so RoPE rotates ADJACENT pairs
  (x[2i], x[2i+1])  ("normal" rope, LLAMA_ROPE_TYPE_NORM);
- qwen2, qwen3: not permuted, RoPE rotates HALVES (x[i], x[i + d/2])  (NeoX);
- angle(pos, i) = pos * base^(-2i/d) / rope_freqs[i]   (rope_freqs.weight if present);
- qwen3 applies attn_q_norm / attn_k_norm (RMSNorm over head_dim, per head) before RoPE;
- qwen2 adds attn_{q,k,v}.bias;  no output.weight means output = token_embd.
"""
import numpy as np
from gguf import GGUFReader
from gguf.quants import dequantize


def load(path):
    r = GGUFReader(path)
    kv = {}
    for k, f in r.fields.items():
        if k.startswith("tokenizer.ggml.") and k != "tokenizer.ggml.model":
            continue
        try:
            kv[k] = f.contents()
        except Exception:  # noqa: BLE001 - some array fields; not needed here
            pass
    t = {}
    for ti in r.tensors:
        w = dequantize(ti.data, ti.tensor_type).astype(np.float64)
        # GGUF shape is (ne0, ne1, ...) with ne0 fastest; numpy array is (ne1, ne0)
        t[ti.name] = w.reshape([int(n) for n in reversed(ti.shape)])
    return kv, t


def _rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _rope(x, pos, base, freq_factors, neox):
    # x: (T, H, d)
    d = x.shape[-1]
    inv = base ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    if freq_factors is not None:
        inv = inv / freq_factors
    ang = pos[:, None] * inv[None, :]  # (T, d/2)
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    if neox:
        a, b = x[..., : d // 2], x[..., d // 2:]
        return np.concatenate([a * c - b * s, a * s + b * c], axis=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = a * c - b * s
    out[..., 1::2] = a * s + b * c
    return out


def forward(kv, t, tokens):
    arch = kv["general.architecture"]
    g = lambda k, d=None: kv.get(f"{arch}.{k}", d)  # noqa: E731
    n_layer = g("block_count")
    n_head, n_kv = g("attention.head_count"), g("attention.head_count_kv")
    eps = g("attention.layer_norm_rms_epsilon")
    base = g("rope.freq_base", 10000.0)
    n_embd = g("embedding_length")
    hd = g("attention.key_length", n_embd // n_head)
    neox = arch in ("qwen2", "qwen3")
    ff = t.get("rope_freqs.weight")
    tokens = np.asarray(tokens)
    T = len(tokens)
    pos = np.arange(T, dtype=np.float64)
    x = t["token_embd.weight"][tokens]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for il in range(n_layer):
        p = f"blk.{il}."
        h = _rms(x, t[p + "attn_norm.weight"], eps)
        q, k, v = (h @ t[p + f"attn_{n}.weight"].T + t.get(p + f"attn_{n}.bias", 0.0) for n in "qkv")
        q, k, v = q.reshape(T, n_head, hd), k.reshape(T, n_kv, hd), v.reshape(T, n_kv, hd)
        if p + "attn_q_norm.weight" in t:
            q = _rms(q, t[p + "attn_q_norm.weight"], eps)
            k = _rms(k, t[p + "attn_k_norm.weight"], eps)
        q, k = _rope(q, pos, base, ff, neox), _rope(k, pos, base, ff, neox)
        rep = n_head // n_kv
        k, v = np.repeat(k, rep, axis=1), np.repeat(v, rep, axis=1)  # head h uses kv head h // rep
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", s, v).reshape(T, n_head * hd)
        x = x + o @ t[p + "attn_output.weight"].T
        h = _rms(x, t[p + "ffn_norm.weight"], eps)
        gt = h @ t[p + "ffn_gate.weight"].T
        up = h @ t[p + "ffn_up.weight"].T
        x = x + (gt / (1 + np.exp(-gt)) * up) @ t[p + "ffn_down.weight"].T
    x = _rms(x, t["output_norm.weight"], eps)
    out = t.get("output.weight", t["token_embd.weight"])
    return x @ out.T
