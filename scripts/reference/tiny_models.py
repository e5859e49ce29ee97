"""Tiny random-weight llama / qwen2 / qwen3 models: HF model -> GGUF (as llama.cpp's
convert_hf_to_gguf.py writes it) -> reference logits from transformers in float64."""
import json
import math
import os

import gguf
import numpy as np
import torch
from gguf import GGMLQuantizationType as QT
from gguf.quants import dequantize, quantize

from . import gguf_forward, hf_fp64, kquants, tiny_tokenizer
from .common import case_stats, dump_json, versions

VOCAB = 320

# name, arch, HF config overrides, GGUF variants to write
MODELS = [
    dict(name="tiny-llama", arch="llama", seed=1,
         cfg=dict(hidden_size=64, intermediate_size=160, num_hidden_layers=3, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, rms_norm_eps=1e-5, rope_theta=10000.0,
                  tie_word_embeddings=False),
         variants=["F32", "Q8_0", "Q4_0", "Q4_1"]),
    dict(name="tiny-llama3rope", arch="llama", seed=2,
         cfg=dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=1, head_dim=16, rms_norm_eps=1e-5, rope_theta=10000.0,
                  rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                    original_max_position_embeddings=64),
                  tie_word_embeddings=False),
         variants=["F32"], long_case=24),
    dict(name="tiny-qwen2", arch="qwen2", seed=3,
         cfg=dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=False),
         variants=["F32"]),
    dict(name="tiny-qwen3", arch="qwen3", seed=4,
         cfg=dict(hidden_size=64, intermediate_size=160, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6, rope_theta=1000000.0,
                  tie_word_embeddings=True),
         variants=["F32"]),
    # K-quants need rows that are a multiple of 256 values
    dict(name="tiny-llama256", arch="llama", seed=5,
         cfg=dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
                  num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-5, rope_theta=10000.0,
                  tie_word_embeddings=False),
         variants=["Q4_K_M"]),
]

FILE_TYPE = {"F32": gguf.LlamaFileType.ALL_F32, "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
             "Q4_0": gguf.LlamaFileType.MOSTLY_Q4_0, "Q4_1": gguf.LlamaFileType.MOSTLY_Q4_1,
             "Q4_K_M": gguf.LlamaFileType.MOSTLY_Q4_K_M}


def tensor_type(variant, name):
    """The ggml type of a 2-D tensor in each variant (1-D tensors are always F32)."""
    if variant == "F32":
        return QT.F32
    if variant == "Q8_0":
        return QT.Q8_0
    if variant == "Q4_0":
        return QT.Q8_0 if name == "output.weight" else QT.Q4_0
    if variant == "Q4_1":
        return QT.Q8_0 if name in ("output.weight", "token_embd.weight") else QT.Q4_1
    if variant == "Q4_K_M":
        return QT.Q6_K if name.endswith(("attn_v.weight", "ffn_down.weight")) or name == "output.weight" else QT.Q4_K
    raise ValueError(variant)


def hf_classes(arch):
    from transformers import (LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                              Qwen3ForCausalLM)
    return {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM),
            "qwen3": (Qwen3Config, Qwen3ForCausalLM)}[arch]


def build_hf(spec):
    hf_fp64.patch()
    cfg_cls, model_cls = hf_classes(spec["arch"])
    cfg = cfg_cls(vocab_size=VOCAB, max_position_embeddings=256, bos_token_id=0, eos_token_id=2,
                  attn_implementation="eager", **spec["cfg"])
    torch.manual_seed(spec["seed"])
    model = model_cls(cfg).eval()
    g = torch.Generator().manual_seed(spec["seed"])
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))  # norms far from all-ones
            elif name.endswith(".bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name or "lm_head" in name:
                p.copy_(0.3 * torch.randn(p.shape, generator=g))
            else:
                p.copy_(0.08 * torch.randn(p.shape, generator=g))
    return fp64_rotary(model)


# --- HF state dict -> GGUF, the way convert_hf_to_gguf.py does it -------------------------------

def permute(w, n_head, n_head_kv=None):
    """convert_hf_to_gguf.py LlamaModel.permute: HF rotate-half rows -> adjacent-pair rows."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def unpermute(w, n_head, n_head_kv=None):
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


_NAME_MAP = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
    "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
    "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
}


def gguf_name(hf_name):
    if hf_name == "model.embed_tokens.weight":
        return "token_embd.weight"
    if hf_name == "model.norm.weight":
        return "output_norm.weight"
    if hf_name == "lm_head.weight":
        return "output.weight"
    parts = hf_name.split(".")  # model.layers.N.<module...>.weight|bias
    assert parts[:2] == ["model", "layers"], hf_name
    return f"blk.{parts[2]}.{_NAME_MAP['.'.join(parts[3:-1])]}.{parts[-1]}"


def llama3_rope_factors(cfg, dtype=torch.float32):
    """convert_hf_to_gguf.py LlamaModel.generate_extra_tensors (rope_freqs.weight).

    Caveat: some converter revisions read original_max_position_embeddings from the top level of
    config.json (default 8192) instead of from rope_scaling; HF uses rope_scaling's, and so do we."""
    rp = cfg.rope_parameters
    base = rp["rope_theta"]
    dim = cfg.head_dim
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=dtype) / dim))
    factor, lo, hi = rp["factor"], rp["low_freq_factor"], rp["high_freq_factor"]
    old_ctx = rp["original_max_position_embeddings"]
    lo_wavelen, hi_wavelen = old_ctx / lo, old_ctx / hi
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < hi_wavelen:
            out.append(1)
        elif wavelen > lo_wavelen:
            out.append(factor)
        else:
            smooth = (old_ctx / wavelen - lo) / (hi - lo)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array([float(x) for x in out], dtype=np.float32 if dtype == torch.float32 else np.float64)


def fp64_rotary(model):
    """HF computes RoPE cos/sin in float32 even for a float64 model; make float64 runs float64 throughout."""
    cfg, rot = model.config, model.model.rotary_emb
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    inv = 1.0 / (cfg.rope_parameters["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float64) / hd))
    if cfg.rope_parameters.get("rope_type") == "llama3":
        inv = inv / torch.from_numpy(llama3_rope_factors(cfg, torch.float64))
    elif cfg.rope_parameters.get("rope_type", "default") != "default":
        raise NotImplementedError(cfg.rope_parameters)
    orig = rot.forward

    def forward(x, position_ids):
        if x.dtype != torch.float64:
            return orig(x, position_ids)
        emb = position_ids[..., None].to(torch.float64) * inv
        emb = torch.cat((emb, emb), dim=-1)
        return emb.cos() * rot.attention_scaling, emb.sin() * rot.attention_scaling

    rot.forward = forward
    return model


def hf_to_gguf_tensors(model, arch):
    cfg = model.config
    sd = {k: v.detach().to(torch.float32).numpy() for k, v in model.state_dict().items()}
    if cfg.tie_word_embeddings:
        sd.pop("lm_head.weight", None)  # the converter reads safetensors, where the tied copy is absent
    out = {}
    if arch == "llama" and (cfg.rope_parameters or {}).get("rope_type") == "llama3":
        out["rope_freqs.weight"] = llama3_rope_factors(cfg)  # the converter yields it first
    for k, w in sd.items():
        if arch == "llama" and k.endswith("q_proj.weight"):
            w = permute(w, cfg.num_attention_heads, cfg.num_attention_heads)
        elif arch == "llama" and k.endswith("k_proj.weight"):
            w = permute(w, cfg.num_attention_heads, cfg.num_key_value_heads)
        out[gguf_name(k)] = np.ascontiguousarray(w)
    return out


def write_gguf(path, spec, model, tensors, variant, tok):
    arch, cfg = spec["arch"], model.config
    w = gguf.GGUFWriter(path, arch)
    w.add_type("model")
    w.add_name(f"{spec['name']} ({variant}, random weights, voltad test fixture)")
    w.add_block_count(cfg.num_hidden_layers)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    head_dim = getattr(cfg, "head_dim", None)
    if head_dim is not None:  # the converter writes these only when config.json has head_dim
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_file_type(FILE_TYPE[variant])
    if arch == "llama":
        w.add_vocab_size(cfg.vocab_size)
        w.add_rope_dimension_count(cfg.head_dim)
    tokens, types, merges = tiny_tokenizer.gguf_vocab(tok)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("gpt2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(0)
    w.add_eos_token_id(2)
    w.add_pad_token_id(0)
    w.add_add_bos_token(False)
    w.add_chat_template(tiny_tokenizer.CHATML_TEMPLATE)
    w.add_quantization_version(gguf.GGML_QUANT_VERSION)
    types_written = {}
    for name, arr in tensors.items():
        qt = QT.F32 if arr.ndim == 1 else tensor_type(variant, name)
        types_written[name] = qt.name
        if qt == QT.F32:
            w.add_tensor(name, arr.astype(np.float32))
        elif qt == QT.Q4_K:
            w.add_tensor(name, kquants.quantize_q4_k(arr), raw_dtype=qt)
        elif qt == QT.Q6_K:
            w.add_tensor(name, kquants.quantize_q6_k(arr), raw_dtype=qt)
        else:
            w.add_tensor(name, quantize(arr, qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return types_written


def model_from_gguf_tensors(spec, path):
    """The HF model with the weights exactly as the GGUF stores them (dequantized, Q/K un-permuted)."""
    cfg_model = build_hf(spec)
    cfg = cfg_model.config
    reader = gguf.GGUFReader(path)
    hf_names = {gguf_name(k): k for k in cfg_model.state_dict().keys() if k != "lm_head.weight" or not cfg.tie_word_embeddings}
    sd = {}
    for t in reader.tensors:
        if t.name == "rope_freqs.weight":
            continue
        wt = dequantize(t.data, t.tensor_type).astype(np.float32).reshape([int(n) for n in reversed(t.shape)])
        k = hf_names[t.name]
        if spec["arch"] == "llama" and k.endswith("q_proj.weight"):
            wt = unpermute(wt, cfg.num_attention_heads, cfg.num_attention_heads)
        elif spec["arch"] == "llama" and k.endswith("k_proj.weight"):
            wt = unpermute(wt, cfg.num_attention_heads, cfg.num_key_value_heads)
        sd[k] = torch.from_numpy(np.ascontiguousarray(wt))
    missing, unexpected = cfg_model.load_state_dict(sd, strict=False)
    assert not unexpected, unexpected
    assert all(m == "lm_head.weight" for m in missing), missing
    if cfg.tie_word_embeddings:
        cfg_model.tie_weights()
    return cfg_model.eval()


def logits(model, tokens, dtype):
    m = model.to(dtype)
    with torch.no_grad():
        return m(torch.tensor([tokens])).logits[0].to(torch.float64).numpy()


def greedy(model, prompt, n):
    """Greedy continuation in float64, recomputing the whole sequence each step (no KV cache)."""
    m = model.to(torch.float64)
    seq, out, margins = list(prompt), [], []
    with torch.no_grad():
        for _ in range(n):
            lg = m(torch.tensor([seq])).logits[0, -1].numpy()
            top2 = np.argsort(lg)[::-1][:2]
            out.append(int(top2[0]))
            margins.append(float(lg[top2[0]] - lg[top2[1]]))
            seq.append(int(top2[0]))
    return out, margins


def transformers_gguf_check(path, ref_logits, tokens):
    """Reload the GGUF through transformers' own GGUF loader and compare (proves the Q/K permutation)."""
    from transformers import AutoModelForCausalLM
    try:
        m = AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                 dtype=torch.float64, attn_implementation="eager").eval()
        with torch.no_grad():
            lg = m(torch.tensor([tokens])).logits[0].numpy()
        return {"max_abs_diff": float(np.abs(lg - ref_logits).max())}
    except Exception as e:  # noqa: BLE001 - reported in the fixture
        return {"error": f"{type(e).__name__}: {str(e)[:200]}"}


def make_cases(spec, tok):
    rng = np.random.default_rng(1000 + spec["seed"])
    text = "<|im_start|>user\nWhat is the capital of France?<|im_end|>"
    single = tok.encode(text).ids[:12]
    assert len(single) == 12
    b0 = [int(x) for x in rng.integers(3, VOCAB, 5)]
    b1 = [int(x) for x in rng.integers(3, VOCAB, 9)]
    b1[3] = VOCAB - 1  # the last vocab row
    cases = [dict(name="single", batch=None, tokens=[int(x) for x in single]),
             dict(name="batch0.seq0", batch=0, tokens=b0),
             dict(name="batch0.seq1", batch=0, tokens=b1)]
    if spec.get("long_case"):
        cases.append(dict(name="long", batch=None,
                          tokens=[int(x) for x in rng.integers(0, VOCAB, spec["long_case"])]))
    return cases


def run(out_dir, log=print):
    tok = tiny_tokenizer.build(VOCAB)
    with open(os.path.join(out_dir, "tiny-bpe.tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(tok.to_str(pretty=False))
    tokenize_fixture(out_dir, tok)
    written = []
    for spec in MODELS:
        hf_orig = build_hf(spec)
        tensors = hf_to_gguf_tensors(hf_orig, spec["arch"])
        for variant in spec["variants"]:
            fname = f"{spec['name']}.{variant}.gguf"
            path = os.path.join(out_dir, fname)
            types_written = write_gguf(path, spec, hf_orig, tensors, variant, tok)
            ref_model = model_from_gguf_tensors(spec, path)
            kv, gt = gguf_forward.load(path)
            cases = make_cases(spec, tok)
            out_cases, worst = [], {}
            for c in cases:
                l64 = logits(ref_model, c["tokens"], torch.float64)
                l32 = logits(ref_model, c["tokens"], torch.float32)
                lnp = gguf_forward.forward(kv, gt, c["tokens"])
                st = case_stats(l64, l32, lnp)
                for k, v in st.items():
                    worst[k] = max(worst.get(k, 0.0), v)
                out_cases.append(dict(c, logits=l64.tolist(), stats=st))
            if variant == "F32":
                orig = logits(hf_orig, cases[0]["tokens"], torch.float64)
                worst["f32_gguf_vs_original_hf_max_abs"] = float(np.abs(orig - out_cases[0]["logits"]).max())
            gen, margins = greedy(ref_model, cases[0]["tokens"], 16)
            tcheck = transformers_gguf_check(path, np.array(out_cases[0]["logits"]), cases[0]["tokens"])
            doc = {
                "format": "voltad-reference-logits/1",
                "model": fname,
                "arch": spec["arch"],
                "weights": variant,
                "tensor_types": types_written,
                "hf_config": {k: v for k, v in ref_model.config.to_dict().items()
                              if k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                                       "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps",
                                       "rope_parameters", "tie_word_embeddings", "max_position_embeddings",
                                       "attention_bias")},
                "rope": "neox (halves)" if spec["arch"] != "llama" else "normal (adjacent pairs; Q/K permuted by the converter)",
                "dtype": "float64",
                "reference": ("transformers %s in float64 (eager attention), weights = the GGUF tensors dequantized "
                              "by gguf.quants, Q/K un-permuted for llama" % ref_model.__class__.__name__),
                "cases": out_cases,
                "greedy": {"prompt": cases[0]["tokens"], "new_tokens": gen, "top1_minus_top2": margins,
                           "note": "float64, full recompute each step; a margin below ~1e-3 is a near-tie"},
                "checks": dict(worst, transformers_gguf_loader=tcheck),
                "versions": versions(),
                "notes": NOTES,
            }
            dump_json(os.path.join(out_dir, fname.replace(".gguf", ".logits.json")), doc)
            log(f"{fname}: {os.path.getsize(path)} bytes; checks {json.dumps(doc['checks'])}")
            written.append(fname)
    return written


TOKENIZE_TEXTS = [
    "Hello world",
    "The capital of France is Paris.",
    "  leading spaces and trailing  ",
    "line one\nline two\n\n",
    "it's they're we've I'm you'll he'd",
    "numbers 1234567890 and 3.14",
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "caf\u00e9 na\u00efve \u65e5\u672c\u8a9e \U0001f600",
    "tabs\tand\r\nwindows",
]


def tokenize_fixture(out_dir, tok):
    """text -> ids with the tiny vocab (HF tokenizers), checked against transformers' GGUF tokenizer."""
    from transformers import AutoTokenizer
    gguf_path = os.path.join(out_dir, "tiny-llama.F32.gguf")
    htok = None
    if os.path.exists(gguf_path):
        htok = AutoTokenizer.from_pretrained(out_dir, gguf_file="tiny-llama.F32.gguf")
    cases = []
    for text in TOKENIZE_TEXTS:
        ids = tok.encode(text).ids
        c = {"text": text, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)}
        if htok is not None:
            c["transformers_gguf_ids_equal"] = htok(text, add_special_tokens=False)["input_ids"] == ids
        cases.append(c)
    dump_json(os.path.join(out_dir, "tiny-bpe.tokenize.json"), {
        "format": "voltad-reference-tokenize/1",
        "vocab": "the tokenizer.ggml.* arrays of every tiny-*.gguf (also tiny-bpe.tokenizer.json); pre = gpt2",
        "special_tokens_parsed": True, "add_bos": False, "cases": cases, "versions": versions()})


NOTES = ("logits[i][v] is the logit of vocab id v after tokens[0..i] (positions start at 0 in every case). "
         "Cases with the same 'batch' number are meant to be run together as one batch; each is an independent "
         "sequence, so its logits equal a single-sequence run. stats: fp32_max_abs / fp32_rel = how far a float32 "
         "run of the same transformers model is from the float64 reference (rel = max_abs / max|logit|); "
         "numpy_gguf_max_abs = scripts/reference/gguf_forward.py reading the GGUF with llama.cpp semantics.")
