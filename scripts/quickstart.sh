#!/usr/bin/env bash
# Quick start: install what building actmem needs (compiler, CMake, the header libraries), build the
# `actmem` binary alone (preset quick: no tests, -O1, into build-quick/), and estimate the built-in
# default (Llama-3-70B, seq 8192, micro-batch 1; the seed card's "70B at 8k"). Arguments go to
# `actmem estimate`. The test suite (bash scripts/test.sh) installs and builds the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
bash scripts/deps.sh quick
cmake --preset quick >/dev/null
cmake --build --preset quick
echo "actmem: set up and built in $(( $(date +%s) - start )) s: build-quick/actmem" >&2
./build-quick/actmem estimate "$@"
