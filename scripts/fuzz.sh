#!/usr/bin/env bash
# Runs every libFuzzer target of the sanitize build (cmake --preset sanitize) for SECONDS each (10),
# from its seeds: the repository's real files of its formats and fuzz/corpus/<target>/ (copied to
# build-sanitize/corpus/<target>/, where new inputs accumulate). Prints each target's executions and
# executions per second; a crash stops with the input saved as build-sanitize/fuzz-crashes/crash-<sha1> (reproduce: ./build-sanitize/<target>_fuzzer FILE).
#   bash scripts/fuzz.sh            10 s per target (CI)
#   bash scripts/fuzz.sh 600 -jobs=2  a long run; extra arguments go to libFuzzer
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-10}
shift || true
build=${ACTMEM_FUZZ_BUILD:-build-sanitize}  # another sanitize build directory, if given
mkdir -p "$build/fuzz-crashes"
for target in config hf_config megatron_args deepspeed torchtitan hf_yaml vllm_serve allocator_trace; do
  bin=$build/${target}_fuzzer
  [ -x "$bin" ] || { echo "fuzz: $bin is not built (cmake --build --preset sanitize)"; exit 2; }
  corpus=$build/corpus/$target
  mkdir -p "$corpus"
  # Seeds: the repository's real files of the target's formats (one copy of each file: examples/ and
  # tests/data/configs are the tests' inputs too), plus fuzz/corpus/<target>/ for what is only here.
  case $target in
    config)        seeds=(tests/data/configs/*.json fuzz/corpus/hf_config/* examples/megatron_*.sh
                          examples/deepspeed_*.json examples/torchtitan_*.toml) ;;
    hf_config)     seeds=(tests/data/configs/*.json fuzz/corpus/hf_config/*) ;;
    megatron_args) seeds=(examples/megatron_*.sh fuzz/corpus/megatron_args/*) ;;
    deepspeed)     seeds=(examples/deepspeed_*.json examples/ds_*.json) ;;
    torchtitan)    seeds=(examples/torchtitan_*.toml) ;;
    hf_yaml)       seeds=(examples/*.yml examples/*.yaml) ;;
    vllm_serve)    seeds=(examples/vllm_*.sh fuzz/corpus/vllm_serve/*) ;;
    allocator_trace) seeds=(fuzz/corpus/allocator_trace/*) ;;
  esac
  cp -n "${seeds[@]}" "$corpus/"
  log=$build/fuzz-$target.log
  if ! "$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
       -artifact_prefix="$build/fuzz-crashes/" "$@" "$corpus" >"$log" 2>&1; then
    tail -40 "$log"
    echo "fuzz: $target failed; the input is in $build/fuzz-crashes/"
    exit 1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  echo "fuzz: $target: ${runs:-?} executions in ${seconds} s ($(( ${runs:-0} / seconds ))/s), 0 crashes"
done
