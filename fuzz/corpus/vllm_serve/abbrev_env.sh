export VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1
vllm serve ./m --max-num-seq 64 --gpu-mem 0.8 -q fp8 --kv-cache-dtype fp8_e5m2 --pipeline-parallel-size 2 | tee log
