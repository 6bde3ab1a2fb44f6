# The arguments of Megatron-LM's examples/llama/train_llama3_8b_h200_bf16.sh (NVIDIA/Megatron-LM at
# commit ae711c0f5ea50a49a568184138e1cd5f049f252c), as facts: its model, training, parallel, DDP,
# real-data and logging arguments with the script's values (TP_SIZE=1, CP_SIZE=1, 8 GPUs on 1 node,
# micro-batch 1, global batch 128, 32 layers, bf16, sequence 8192); paths as placeholders.
GPUS_PER_NODE=8
NUM_NODES=1
MODEL_ARGS=(
    --use-mcore-models --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32
    --group-query-attention --num-query-groups 8 --kv-channels 128 --seq-length 8192
    --max-position-embeddings 8192 --position-embedding-type rope --rotary-base 1000000 --rotary-percent 1.0
    --attention-dropout 0.0 --hidden-dropout 0.0 --swiglu --init-method-std 0.0134 --attention-backend fused
    --apply-layernorm-1p --untie-embeddings-and-output-weights --disable-bias-linear
)
TRAINING_ARGS=(
    --micro-batch-size 1 --global-batch-size 128 --train-samples 1953125000 --lr-decay-samples 1949218748
    --lr-warmup-samples 3906252 --lr 0.00015 --min-lr 0.00001 --decoupled-lr 5.0e-4 --decoupled-min-lr 4.5e-5
    --lr-decay-style cosine --clip-grad 1.0 --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --bf16
    --grad-reduce-in-bf16 --cross-entropy-loss-fusion --calculate-per-token-loss --manual-gc
    --empty-unused-memory-level 1 --exit-duration-in-mins 235
    --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather
)
MODEL_PARALLEL_ARGS=(--tensor-model-parallel-size 1 --context-parallel-size 1 --sequence-parallel)
DATA_ARGS=(--data-path DATA --tokenizer-type HuggingFaceTokenizer --tokenizer-model TOKENIZER --data-cache-path CACHE
    --split '99,1,0' --no-create-attention-mask-in-dataloader --no-mmap-bin-files --num-workers 1 --vocab-size 128256)
LOGGING_ARGS=(--log-interval 1 --save-interval 1000 --log-throughput --profile --profile-step-start 4
    --profile-step-end 6 --ckpt-format torch_dist --distributed-timeout-minutes 60 --save CKPT --load CKPT
    --tensorboard-dir TB --wandb-project megatron-lm-training --wandb-exp-name llama3x-8b-bf16-tp1
    --wandb-save-dir CKPT/wandb --log-params-norm --log-num-zeros-in-grad --log-timers-to-tensorboard)
python -m torch.distributed.run --nproc-per-node $GPUS_PER_NODE --nnodes $NUM_NODES --node-rank 0 \
    --master-addr localhost --master-port 6000 pretrain_gpt.py \
    ${MODEL_ARGS[@]} ${TRAINING_ARGS[@]} ${MODEL_PARALLEL_ARGS[@]} ${DATA_ARGS[@]} ${LOGGING_ARGS[@]}
