#!/usr/bin/env bash
# The whole test suite: unit and CLI tests, and the validation against measured PyTorch memory
# (ctest label `validation`). Installs what it needs first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake --preset release >/dev/null
cmake --build --preset release
ctest --preset release
