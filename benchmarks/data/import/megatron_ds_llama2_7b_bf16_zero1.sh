# A Megatron-DeepSpeed launch of Llama-2-7B's shape with universal_checkpointing_bf16_zero1.json (this project's)
deepspeed --num_nodes 1 --num_gpus 2 pretrain_gpt.py --tensor-model-parallel-size 2 --pipeline-model-parallel-size 1 \
    --num-layers 32 --hidden-size 4096 --ffn-hidden-size 11008 --num-attention-heads 32 --seq-length 4096 \
    --max-position-embeddings 4096 --vocab-size 32000 --swiglu --normalization RMSNorm --disable-bias-linear \
    --untie-embeddings-and-output-weights --use-rotary-position-embeddings --bf16 \
    --deepspeed --deepspeed_config universal_checkpointing_bf16_zero1.json
