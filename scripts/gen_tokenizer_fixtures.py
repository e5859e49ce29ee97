#!/usr/bin/env python3
"""Writes the tokenizer and chat-template conformance fixtures in
tests/fixtures/tokenizer/ from the reference implementations:

  - <name>_encode.json: ids Hugging Face `tokenizers` gives for a corpus of
    tricky strings, with special tokens parsed ("ids") and not ("ids_plain",
    `encode_special_tokens = True`), for the shared Llama 3 and Qwen3
    tokenizer.json files and for SmolLM2's tokenizer rebuilt from its GGUF;
  - nfc.json: Python's NFC of the corpus and of every decomposable code
    point (checks engine/utf8.cpp's nfc_normalize);
  - chat_templates.json: jinja2 renders of the real chat templates (Llama 3
    and Qwen3 from tokenizer_config.json, SmolLM2 from the GGUF) for a few
    conversations.

Pinned versions (a venv, e.g. /work/main/.venv-tok):
  pip install tokenizers==0.23.3 jinja2==3.1.6 gguf==0.19.0

Usage:
  .venv-tok/bin/python scripts/gen_tokenizer_fixtures.py \
      [--shared ../shared] [--smollm2 /root/.cache/voltad/models/SmolLM2-135M-Instruct.Q4_1.gguf]

Invalid UTF-8 is not in the corpus: the Python API takes str. The C++ tests
check it separately (bytes survive encode/decode through the byte tokens).

SmolLM2's pre-tokenizer is Sequence[Digits(individual_digits=True),
ByteLevel(add_prefix_space=False, use_regex=True)], as in its tokenizer.json
(the StarCoder-style tokenizer; llama.cpp's "smollm" pre-type applies \\p{N}
then the GPT-2 regex, the same thing). Its merges keep their GGUF order and
its control-type tokens become special added tokens, as in the original.
"""
import argparse
import json
import os
import sys

import jinja2
import jinja2.ext
import jinja2.sandbox
import tokenizers
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
OUT = os.path.join(REPO, "tests", "fixtures", "tokenizer")

CORPUS = [
    "",
    "Hello, world!",
    "Hello",
    " leading space",
    "trailing space ",
    "  two leading spaces",
    "\tTab\tseparated\tvalues\t",
    "line1\nline2\r\nline3\n\n\nend\n",
    "   \n\n   \t\n  x",
    "spaces    between     words     ",
    "text\n\n",
    "\n",
    " ",
    "   ",
    "a  b   c    d",
    "Hello!\n\nWorld?\r\n",
    "\r\r\n\n\r",
    # digit runs
    "1", "12", "123", "1234", "12345", "123456", "1234567", "123456789012345",
    "3.14159", "1,000,000", "version 2.0.1-rc3", "x1y22z333w4444v55555",
    "The year 2024 was 50% better than 1999.",
    " 7 77 777 7777",
    "\u0663\u0664\u0665 \u0661\u0662",  # Arabic-Indic digits (Nd)
    "\u216b \u00bd \u00b2 \u2460",  # Nl, No
    # contractions
    "I'm you're he's we've they'll I'd don't",
    "I'M YOU'RE HE'S WE'VE THEY'LL I'D DON'T",
    "'S 'LL 'Re 'vE 'D 'T 'M",
    "rock'n'roll",
    "'tis ''quoted'' '",
    "''", "'s", " 's", "x's'",
    "it\u2019s curly",
    "'\u017f long s",
    # scripts
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u3002",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068\u30ab\u30bf\u30ab\u30ca",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a",
    "\u0395\u03bb\u03bb\u03b7\u03bd\u03b9\u03ba\u03ac \u0420\u0443\u0441\u0441\u043a\u0438\u0439 \u05e2\u05d1\u05e8\u05d9\u05ea",
    "\u00a1Hola! \u00bfQu\u00e9 tal? \u00c7a va tr\u00e8s bien.",
    # emoji
    "\U0001f600 \U0001f44d\U0001f3fd \U0001f1eb\U0001f1f7 \u2764\ufe0f",
    "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466 family",
    "\U0001f469\U0001f3fd\u200d\U0001f4bb coder",
    "emoji\U0001f600\U0001f600\U0001f600run",
    # combining marks and normalisation
    "e\u0301 decomposed vs \u00e9 composed",
    "Z\u0335\u0321a\u0337l\u0336g\u0334o",
    "A\u030a \u212b \u00c5",
    "\u1100\u1161\u11a8 jamo",
    "q\u0307\u0323 dots",
    "\u0e01\u0e34\u0e4a",
    # whitespace oddities
    "\u00a0nbsp\u00a0", "\u3000ideographic\u3000space", "a\u2028b\u2029c",
    "\u200bzero\u200bwidth", "\x0b\x0c vertical tab form feed", "\x1c\x1d\x1e\x1f separators",
    "trailing tabs\t\t", "mixed \t \n \t end",
    # bytes some vocabularies have no symbol for (SmolLM2: 0x04, 0x06, 0xF1, ...)
    "ctrl\x04\x06\x13\x14\x16\x1d chars", "a\x04b", "\U00050000 plane 5 \U000a0000",
    # code
    "def foo(x):\n    return x ** 2  # square\n",
    "int main() {\n\tprintf(\"%d\\n\", 42);\n}\n",
    "if (a&&b||!c) { x += y->z[0]; }",
    "{\"key\": [1, 2, {\"a\": null}], \"b\": \"c\"}",
    "https://example.com/path?q=1&r=two#frag",
    "<html><body class=\"x\">Hi &amp; bye</body></html>",
    "    indented\n        more\n",
    # special tokens written in the text
    "<|begin_of_text|>Hello<|eot_id|>",
    "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>",
    "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>", "a<|im_start|>b", "<|eot_id|><|eot_id|>", "<|eot_id", "<|im_end",
    "<think>reasoning</think>answer",
    "<repo_name>x<file_sep>y<|endoftext|>",
    " <|im_end|> spaced ",
    # runs
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "!!!!!!!!!!??????", "................", "----------", "=" * 80,
    "The quick brown fox jumps over the lazy dog. " * 8,
]


def added_specials(tok):
    return [t for t in tok.get_added_tokens_decoder().values()]


def encode_cases(tok):
    cases = []
    for text in CORPUS:
        tok.encode_special_tokens = False
        ids = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = True
        plain = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = False
        cases.append({"text": text, "ids": ids, "ids_plain": plain})
    return cases


def smollm2_tokenizer(gguf_path):
    from gguf import GGUFReader

    reader = GGUFReader(gguf_path)
    tokens = reader.fields["tokenizer.ggml.tokens"].contents()
    types = reader.fields["tokenizer.ggml.token_type"].contents()
    merges = reader.fields["tokenizer.ggml.merges"].contents()
    assert reader.fields["tokenizer.ggml.pre"].contents() == "smollm"
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = []
    for m in merges:
        i = m.index(" ", 1)
        pairs.append((m[:i], m[i + 1:]))
    tok = Tokenizer(models.BPE(vocab=vocab, merges=pairs))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, ty in zip(tokens, types) if ty == 3])
    template = reader.fields["tokenizer.chat_template"].contents()
    return tok, template


CONVERSATIONS = {
    "single_user": [{"role": "user", "content": "What is the capital of France?"}],
    "system_user": [{"role": "system", "content": "You are terse."},
                    {"role": "user", "content": "Name a prime number."}],
    "multi_turn": [{"role": "system", "content": "Answer in French."},
                   {"role": "user", "content": "Hello!"},
                   {"role": "assistant", "content": "Bonjour !"},
                   {"role": "user", "content": "How are you?"}],
    "whitespace": [{"role": "user", "content": "  padded question \n\n"},
                   {"role": "assistant", "content": "\n answer\t"},
                   {"role": "user", "content": "ok"}],
    "unicode": [{"role": "user", "content": "\u041f\u0440\u0438\u0432\u0435\u0442 \U0001f44b \u4f60\u597d"}],
    "ends_with_assistant": [{"role": "user", "content": "Say hi."},
                            {"role": "assistant", "content": "Hi"}],
    "history_with_think": [{"role": "user", "content": "2+2?"},
                           {"role": "assistant", "content": "<think>\nadd them\n</think>\n\n4"},
                           {"role": "user", "content": "and 3+3?"}],
    "assistant_only": [{"role": "assistant", "content": "I start."}],
}


def render(template, messages, add_generation_prompt, bos, eos):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    # As transformers renders chat templates.
    env = jinja2.sandbox.ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                       extensions=[jinja2.ext.loopcontrols])
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                            bos_token=bos, eos_token=eos)


def nfc_cases():
    """Inputs and their NFC (Python's unicodedata): the corpus, and every
    code point with a canonical decomposition, decomposed and followed by
    combining marks of several classes, in chunks."""
    import unicodedata
    cases = [(t, unicodedata.normalize("NFC", t)) for t in CORPUS]
    decomposable = [chr(c) for c in range(0x110000)
                    if not 0xD800 <= c < 0xE000 and unicodedata.normalize("NFD", chr(c)) != chr(c)
                    and not (0xAC00 <= c < 0xD7A4 and c % 97 != 0)]  # a sample of Hangul (by formula)
    marks = ["", "\u0301", "\u0323\u0307", "\u0307\u0323", "\u05b0", "\u0e38", "\u1161", "\u302a\u0301"]
    for start in range(0, len(decomposable), 64):
        chunk = decomposable[start:start + 64]
        text = "".join(unicodedata.normalize("NFD", ch) + marks[i % len(marks)] for i, ch in enumerate(chunk))
        cases.append((text, unicodedata.normalize("NFC", text)))
    return {"unicode_version": unicodedata.unidata_version, "cases": [{"in": a, "nfc": b} for a, b in cases]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", default=os.path.join(os.path.dirname(REPO), "shared"))
    ap.add_argument("--smollm2", default="/root/.cache/voltad/models/SmolLM2-135M-Instruct.Q4_1.gguf")
    args = ap.parse_args()
    os.makedirs(OUT, exist_ok=True)
    meta = {"tokenizers_version": tokenizers.__version__, "jinja2_version": jinja2.__version__,
            "generator": "scripts/gen_tokenizer_fixtures.py"}

    templates = {}
    for name in ("llama3", "qwen3"):
        tok = Tokenizer.from_file(os.path.join(args.shared, "tokenizers", name, "tokenizer.json"))
        with open(os.path.join(args.shared, "tokenizers", name, "tokenizer_config.json")) as f:
            config = json.load(f)
        templates[name] = (config["chat_template"], config.get("bos_token") or "", config.get("eos_token") or "")
        write(f"{name}_encode.json", dict(meta, tokenizer=name, cases=encode_cases(tok)))

    tok, template = smollm2_tokenizer(args.smollm2)
    templates["smollm2"] = (template, "<|im_start|>", "<|im_end|>")
    write("smollm2_encode.json", dict(meta, tokenizer="smollm2", source=os.path.basename(args.smollm2),
                                      cases=encode_cases(tok)))

    renders = []
    for family, (template, bos, eos) in templates.items():
        for conv_name, messages in CONVERSATIONS.items():
            for gen in (True, False):
                # The shared Llama 3 template appends the assistant header
                # whatever add_generation_prompt says (Meta's own template
                # honours the flag); only the True case is comparable.
                if family == "llama3" and not gen:
                    continue
                renders.append({"family": family, "conversation": conv_name, "add_generation_prompt": gen,
                                "bos_token": bos, "text": render(template, messages, gen, bos, eos)})
    write("nfc.json", dict(meta, **nfc_cases()))
    write("chat_templates.json", dict(meta, conversations=CONVERSATIONS, renders=renders,
                                      templates={k: v[0] for k, v in templates.items()}))


def write(name, obj):
    path = os.path.join(OUT, name)
    with open(path, "w") as f:
        json.dump(obj, f, ensure_ascii=False, indent=None, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
