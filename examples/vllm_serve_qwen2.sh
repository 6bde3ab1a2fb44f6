#!/bin/sh
# A `vllm serve` launch as a user writes it (vLLM 0.19); `actmem serve --from` reads it as written.
# The model is given as its config.json (actmem does not download models; a hub id is refused).
export VLLM_LOGGING_LEVEL=INFO
vllm serve ../tests/data/configs/qwen2-0.5b.json \
  --tensor-parallel-size 1 \
  --max-model-len 16384 \
  --gpu-memory-utilization 0.90 \
  --max-num-seqs 256 \
  --enable-prefix-caching \
  --port 8000
