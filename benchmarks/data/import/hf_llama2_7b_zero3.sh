# A Hugging Face Trainer launch of Llama-2-7B with hf_zero3_offload_auto.json (this project's)
deepspeed --num_gpus 8 run_clm.py --model_name_or_path meta-llama/Llama-2-7b-hf --per_device_train_batch_size 2 \
    --gradient_accumulation_steps 8 --bf16 True --block_size 4096 --output_dir out \
    --deepspeed hf_zero3_offload_auto.json
