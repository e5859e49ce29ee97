#!/usr/bin/env bash
# The main job: install what is needed, build, and start voltad on the
# example config (etc/voltad.yaml).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
exec build/bin/voltad --config etc/voltad.yaml
