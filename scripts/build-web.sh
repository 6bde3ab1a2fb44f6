#!/usr/bin/env bash
# Builds the web page into build-web/site/: the library compiled to WebAssembly by Debian's
# emscripten (web/CMakeLists.txt), the page (web/*.html, *.js, *.css) and Chart.js from web/'s
# npm lock file. Serve it with scripts/serve-web.sh. ACTMEM_WEB_JOBS sets the parallel jobs (1).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/build-web
start=$(date +%s)
# emscripten's JS optimizer needs Debian's acorn; the compile sees fmt and nlohmann only (copied
# on their own: all of /usr/include would put the host's glibc headers in front of emscripten's).
export NODE_PATH=/usr/share/nodejs
mkdir -p "$out/deps/include"
for lib in fmt nlohmann; do  # copied with their times (cp -a): a rebuild recompiles only what changed
  if ! diff -rq "/usr/include/$lib" "$out/deps/include/$lib" >/dev/null 2>&1; then
    rm -rf "$out/deps/include/$lib"
    cp -a "/usr/include/$lib" "$out/deps/include/$lib"
  fi
done
emcmake cmake -S web -B "$out/cmake" -DCMAKE_BUILD_TYPE=Release -DACTMEM_WEB_DEPS="$out/deps/include" >/dev/null
cmake --build "$out/cmake" -j "${ACTMEM_WEB_JOBS:-1}"
if [ ! -f web/node_modules/chart.js/dist/chart.umd.js ] || [ web/package-lock.json -nt web/node_modules/.package-lock.json ]; then
  (cd web && npm ci --no-audit --no-fund --loglevel=error)
fi
site=$out/site
rm -rf "$site"
mkdir -p "$site"
cp web/index.html web/app.js web/style.css "$site/"
cp "$out/cmake/actmem_web.js" "$out/cmake/actmem_web.wasm" "$site/"
cp web/node_modules/chart.js/dist/chart.umd.js "$site/"
echo "built $site in $(( $(date +%s) - start )) s: $(du -sh "$site" | cut -f1) ($(ls "$site" | tr '\n' ' '))"
