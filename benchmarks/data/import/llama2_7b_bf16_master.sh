# A training script launch of Llama-2-7B with bf16_master_zero3.json (this project's)
deepspeed --num_gpus 8 train.py --model_name meta-llama/Llama-2-7b-hf --seq_length 4096 \
    --deepspeed_config bf16_master_zero3.json
