#!/usr/bin/env bash
# Quick start: install dependencies, build, and estimate the built-in default
# (Llama-3-70B, seq 8192, micro-batch 1; the seed card's "70B at 8k").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
cmake --preset release >/dev/null
cmake --build --preset release
./build/actmem estimate "$@"
