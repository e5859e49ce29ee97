"""SmolLM2-135M-Instruct (Q4_1 GGUF): reference last-position logits and greedy generations.

The reference model is transformers' LlamaForCausalLM in float64 holding the GGUF's weights
dequantized by gguf.quants (Q/K un-permuted), the same path as the tiny models.  transformers'
own GGUF loader (AutoModelForCausalLM.from_pretrained(..., gguf_file=...)) is run as a check.
"""
import os

import gguf
import jinja2
import numpy as np
import torch
from gguf.quants import dequantize
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

from . import gguf_forward, hf_fp64
from .common import case_stats, dump_json, versions
from .tiny_models import fp64_rotary, unpermute

PROMPTS = [
    dict(name="plain-capital", text="The capital of France is", chat=False),
    dict(name="chat-capital", text="What is the capital of France?", chat=True),
    dict(name="chat-haiku", text="Write a haiku about the sea.", chat=True),
    dict(name="plain-digits", text="Count from 1 to 10: 1, 2, 3,", chat=False),
]
TOP_K = 200
N_GEN = 64


def llamacpp_tokenizer(reader):
    """The byte-level BPE that llama.cpp builds for tokenizer.ggml.pre = "smollm":
    digits split one by one (\\p{N}), then the GPT-2 regex, then byte-level BPE with the file's merges."""
    f = reader.fields
    tokens = f["tokenizer.ggml.tokens"].contents()
    merges = [tuple(m.split(" ", 1)) for m in f["tokenizer.ggml.merges"].contents()]
    types = f["tokenizer.ggml.token_type"].contents()
    assert f["tokenizer.ggml.pre"].contents() == "smollm"
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([t for t, ty in zip(tokens, types) if ty == 3])  # CONTROL tokens match whole
    return tok


def render_chat(template, user_text):
    env = jinja2.Environment()
    return env.from_string(template).render(messages=[{"role": "user", "content": user_text}],
                                            add_generation_prompt=True)


def reference_model(path, config):
    from transformers import LlamaForCausalLM
    hf_fp64.patch()
    config._attn_implementation = "eager"
    model = LlamaForCausalLM(config)
    names = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
             "output.weight": "lm_head.weight"}
    sub = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
           "attn_output": "self_attn.o_proj", "attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
           "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
    sd = {}
    reader = gguf.GGUFReader(path)
    for t in reader.tensors:
        w = dequantize(t.data, t.tensor_type).astype(np.float32).reshape([int(n) for n in reversed(t.shape)])
        if t.name in names:
            k = names[t.name]
        else:
            _, il, mod, kind = t.name.split(".")
            k = f"model.layers.{il}.{sub[mod]}.{kind}"
            if mod == "attn_q":
                w = unpermute(w, config.num_attention_heads, config.num_attention_heads)
            elif mod == "attn_k":
                w = unpermute(w, config.num_attention_heads, config.num_key_value_heads)
        sd[k] = torch.from_numpy(np.ascontiguousarray(w))
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected and all(m == "lm_head.weight" for m in missing), (missing, unexpected)
    model.tie_weights()
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    return fp64_rotary(model.eval())


def greedy(model, prompt, n, dtype):
    """Greedy decoding with a KV cache, never stopping at EOS; returns ids and top1-top2 margins."""
    m = model.to(dtype)
    ids, margins = [], []
    with torch.no_grad():
        out = m(torch.tensor([prompt]), use_cache=True)
        for _ in range(n):
            lg = out.logits[0, -1].to(torch.float64).numpy()
            top2 = np.argpartition(-lg, 2)[:2]
            top2 = top2[np.argsort(-lg[top2])]
            ids.append(int(top2[0]))
            margins.append(float(lg[top2[0]] - lg[top2[1]]))
            out = m(torch.tensor([[ids[-1]]]), past_key_values=out.past_key_values, use_cache=True)
    return ids, margins


def last_logits(model, prompt, dtype):
    m = model.to(dtype)
    with torch.no_grad():
        return m(torch.tensor([prompt])).logits[0, -1].to(torch.float64).numpy()


def run(out_dir, path, log=print):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    if not os.path.exists(path):
        raise SystemExit(f"{path} not found: run scripts/fetch-demo-model.sh first")
    d, fname = os.path.dirname(path), os.path.basename(path)
    reader = gguf.GGUFReader(path)
    types = sorted({t.tensor_type.name for t in reader.tensors})
    template = reader.fields["tokenizer.chat_template"].contents()
    eos = int(reader.fields["tokenizer.ggml.eos_token_id"].contents())
    ltok = llamacpp_tokenizer(reader)
    htok = AutoTokenizer.from_pretrained(d, gguf_file=fname)
    hf_native = AutoModelForCausalLM.from_pretrained(d, gguf_file=fname, dtype=torch.float32).eval()
    model = reference_model(path, hf_native.config)
    kv, gt = gguf_forward.load(path)

    prompts, summary = [], {}
    for p in PROMPTS:
        text = render_chat(template, p["text"]) if p["chat"] else p["text"]
        ids = ltok.encode(text, add_special_tokens=False).ids
        hf_ids = htok(text, add_special_tokens=False)["input_ids"]
        l64 = last_logits(model, ids, torch.float64)
        l32 = last_logits(model, ids, torch.float32)
        with torch.no_grad():
            lnat = hf_native(torch.tensor([ids])).logits[0, -1].to(torch.float64).numpy()
        lnp = gguf_forward.forward(kv, gt, ids)[-1] if p["name"] == "chat-capital" else None
        st = case_stats(l64[None], l32[None], None if lnp is None else lnp[None])
        st["transformers_gguf_loader_max_abs"] = float(np.abs(lnat - l64).max())
        gen64, margins = greedy(model, ids, N_GEN, torch.float64)
        gen32_f32, _ = greedy(model, ids, 32, torch.float32)
        f32name = f"smollm2-135m.{p['name']}.last_logits.f32"
        l64.astype("<f4").tofile(os.path.join(out_dir, f32name))
        top = np.argsort(-l64, kind="stable")[:TOP_K]
        prompts.append({
            "name": p["name"],
            "user_text": p["text"],
            "chat": p["chat"],
            "prompt_text": text,
            "token_ids": [int(x) for x in ids],
            "transformers_token_ids": [int(x) for x in hf_ids],
            "same_tokenization": [int(x) for x in hf_ids] == list(ids),
            "last_logits_file": f32name,
            "last_logits_top": [[int(i), float(l64[i])] for i in top],
            "last_logits_summary": {"argmax": int(top[0]), "max": float(l64.max()), "min": float(l64.min()),
                                    "mean": float(l64.mean()), "std": float(l64.std())},
            "stats": st,
            "greedy": {
                "new_tokens": gen64,
                "text_32": ltok.decode(gen64[:32], skip_special_tokens=False),
                "text_64": ltok.decode(gen64, skip_special_tokens=False),
                "first_eos_index": gen64.index(eos) if eos in gen64 else None,
                "top1_minus_top2": margins,
                "float32_first_32_identical": gen32_f32 == gen64[:32],
            },
        })
        summary[p["name"]] = {"same_tok": prompts[-1]["same_tokenization"], "fp32_rel": st["fp32_rel"],
                              "native": st["transformers_gguf_loader_max_abs"],
                              "text_32": prompts[-1]["greedy"]["text_32"],
                              "eos": prompts[-1]["greedy"]["first_eos_index"],
                              "min_margin_32": min(margins[:32]), "f32_same": gen32_f32 == gen64[:32]}
        log(p["name"], summary[p["name"]], st)

    doc = {
        "format": "voltad-reference-smollm/1",
        "model": fname,
        "model_tensor_types": types,
        "dtype": "float64",
        "reference": ("transformers LlamaForCausalLM in float64 (eager attention, float64 RMSNorm/softmax/RoPE), "
                      "weights = the GGUF tensors dequantized by gguf.quants, Q/K un-permuted, tied output"),
        "tokenizer": ("token_ids: llama.cpp's smollm pre-tokenizer (\\p{N} split, then the GPT-2 regex) + byte-level "
                      "BPE from the GGUF's tokens/merges, control tokens matched whole; transformers_token_ids: "
                      "AutoTokenizer.from_pretrained(gguf_file=...), which uses the plain GPT-2 regex for 'smollm'"),
        "add_bos": False,
        "eos_token_id": eos,
        "last_logits_file_format": "49152 little-endian float32, the float64 reference logits rounded to float32",
        "prompts": prompts,
        "versions": versions(),
        "notes": ("greedy.new_tokens: 64 greedy tokens after token_ids, decoding does not stop at EOS "
                  "(first_eos_index says where EOS first appears); top1_minus_top2 is the float64 margin per step. "
                  "stats.fp32_* compare a float32 transformers run of the same weights with the float64 reference; "
                  "transformers_gguf_loader_max_abs compares transformers' own GGUF path (float32 compute); "
                  "numpy_gguf_max_abs (one prompt) is scripts/reference/gguf_forward.py."),
    }
    dump_json(os.path.join(out_dir, "smollm2-135m.reference.json"), doc)
    return summary
