# The arguments of Megatron-LM's examples/gpt3/train_gpt3_175b_distributed.sh (NVIDIA/Megatron-LM at
# commit 157006d6d9bf4f55c0d4d7dacbd2b65e7bd84dc9), as facts: the same flags and values, paths
# left as the script's positional parameters. One node of 8 GPUs, as the script launches it.
GPUS_PER_NODE=8
NUM_NODES=1
torchrun --nproc_per_node $GPUS_PER_NODE --nnodes $NUM_NODES --master_addr localhost --master_port 6000 pretrain_gpt.py \
  --num-layers 96 --hidden-size 12288 --num-attention-heads 96 --seq-length 2048 --max-position-embeddings 2048 \
  --attention-backend auto \
  --micro-batch-size 1 --global-batch-size 1536 --rampup-batch-size 16 16 5859375 --train-iters 500000 \
  --weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --init-method-std 0.006 --clip-grad 1.0 --fp16 \
  --lr 6.0e-5 --lr-decay-style cosine --min-lr 6.0e-6 --lr-warmup-fraction .001 --lr-decay-iters 430000 \
  --tensor-model-parallel-size 8 --pipeline-model-parallel-size 16 \
  --data-path $5 --vocab-file $3 --merge-file $4 --split 949,50,1 \
  --log-interval 100 --save-interval 10000 --eval-interval 1000 --save $1 --load $1 --eval-iters 10 \
  --tensorboard-dir $2
