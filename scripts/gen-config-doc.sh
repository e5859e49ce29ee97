#!/usr/bin/env bash
# Regenerates docs/CONFIG.md from the key declarations in daemon/config.h.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${VOLTAD_BIN_DIR:-build/bin}
[[ -x $bin/voltad ]] || { echo "gen-config-doc: build voltad first (scripts/build.sh)" >&2; exit 1; }
"$bin/voltad" --config-reference >docs/CONFIG.md
echo "docs/CONFIG.md regenerated"
