#!/usr/bin/env bash
# The Python environment the integration tests drive voltad with: the
# official OpenAI SDK and httpx2 (its HTTP client, with a Unix-socket
# transport), pinned.
# Idempotent: a venv whose stamp matches the pins is left as it is.
# Prints the venv's python. VOLTAD_TEST_VENV overrides the location.
set -euo pipefail
venv="${VOLTAD_TEST_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/voltad/venv-tests}"
pins=(openai==3.51.0 httpx2==2.16.2)  # httpx2: the HTTP client openai 3.x is built on
stamp="$venv/.voltad-pins"
if [[ ! -x $venv/bin/python || ! -f $stamp || $(cat "$stamp") != "${pins[*]}" ]]; then
  echo "test-venv: installing ${pins[*]} into $venv" >&2
  python3 -m venv "$venv" >&2
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "${pins[@]}" >&2
  echo "${pins[*]}" >"$stamp"
fi
echo "$venv/bin/python"
