VLLM_USE_FLASHINFER_SAMPLER=1 python -m vllm.entrypoints.openai.api_server --model /m/llama -tp 2 --max_model_len=32k -cc.cudagraph_mode=FULL --served-model-name a b --no-enable-prefix-caching -O3
