#!/usr/bin/env bash
# Serves build-web/site/ (scripts/build-web.sh) on http://127.0.0.1:PORT/ (default 8000) for a local look.
set -euo pipefail
cd "$(dirname "$0")/../build-web/site"
port=${1:-8000}
echo "actmem web page: http://127.0.0.1:$port/"
exec python3 -m http.server "$port" --bind 127.0.0.1
