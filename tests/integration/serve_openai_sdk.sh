#!/usr/bin/env bash
# The official OpenAI Python SDK against a real voltad: serve_openai_sdk.py.
# Its venv comes from scripts/test-venv.sh (pinned); skipped when it cannot
# be built (no network to PyPI).
set -uo pipefail
source "$(dirname "$0")/serve_lib.sh"
python=$(bash "$src/scripts/test-venv.sh" 2>"$tmp/venv.log") || {
  echo "skipped: the test venv could not be created:"; cat "$tmp/venv.log"; exit 77; }
start_daemon
"$python" "$(dirname "$0")/serve_openai_sdk.py" "$sock"
check "OpenAI SDK: chat and completions, streamed and not, errors" test $? -eq 0
stop_daemon
finish
