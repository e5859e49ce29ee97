#!/usr/bin/env python3
"""Reference fixtures for voltad's CPU engine (issue 3, "Verification").

  .venv-ref/bin/python scripts/make_reference_fixtures.py --out tests/fixtures/models

writes tiny random-weight GGUF models (llama, qwen2, qwen3; F32 and quantized variants)
with float64 reference logits from Hugging Face transformers, and reference logits and
greedy generations for SmolLM2-135M-Instruct (Q4_1 GGUF, dequantized by transformers).
Formats: docs/REFERENCE-FIXTURES.md.  Versions: scripts/requirements-reference.txt.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from reference import smollm, tiny_models  # noqa: E402

DEFAULT_SMOLLM = os.path.expanduser("~/.cache/voltad/models/SmolLM2-135M-Instruct.Q4_1.gguf")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="tests/fixtures/models")
    ap.add_argument("--only", choices=["tiny", "smollm"], help="make only one group")
    ap.add_argument("--smollm-gguf", default=DEFAULT_SMOLLM, help="from scripts/fetch-demo-model.sh")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    import torch
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    if args.only in (None, "tiny"):
        tiny_models.run(args.out)
    if args.only in (None, "smollm"):
        smollm.run(args.out, args.smollm_gguf)


if __name__ == "__main__":
    main()
