#!/usr/bin/env bash
# Installs actmem's build and test dependencies from Debian 12 (as root). Skips apt when all are present.
#   bash scripts/deps.sh          everything the test suite needs (torch, pybind11, pytest, GoogleTest, ...)
#   bash scripts/deps.sh quick    only what building the `actmem` binary needs (the quick start)
set -euo pipefail
packages=(cmake ninja-build g++ make nlohmann-json3-dev libcli11-dev libfmt-dev libtomlplusplus-dev libyaml-cpp-dev)
if [ "${1:-}" != quick ]; then
  packages+=(libgtest-dev libbenchmark-dev python3 python3-torch
             pybind11-dev python3-pybind11 python3-pytest python3-dev python3-setuptools python3-wheel python3-venv)
fi
[ "${ACTMEM_FUZZ:-0}" = 1 ] && packages+=(clang libclang-rt-14-dev)
# The web page (scripts/build-web.sh) and its browser test (ctest -L web).
if [ "${ACTMEM_WEB:-0}" = 1 ]; then
  packages+=(emscripten chromium chromium-driver python3-selenium)
  command -v npm >/dev/null || packages+=(npm)  # Debian's, unless a Node.js distribution brought its own
fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
