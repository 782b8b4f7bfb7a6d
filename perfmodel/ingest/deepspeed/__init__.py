"""DeepSpeed configs in: the config JSON, its batch, the launch script and DeepSpeed-Chat's flags, with its key table.

- `batch`: DeepSpeed's batch as `perfmodel import --from deepspeed` reads it: micro_batch and global_batch from the JSON's
- `chat`: DeepSpeed-Chat's training flags as `perfmodel import --from deepspeed` reads them: its step-1 main.py takes no
- `keys`: A DeepSpeed config JSON's keys as `perfmodel import --from deepspeed` reads them: what each leaf key becomes,
- `launch`: A DeepSpeed job's launch script as `perfmodel import --from deepspeed` reads it (as data, never run): the command
- `reader`: DeepSpeed in: a config JSON (train_batch_size, zero_optimization, bf16 / fp16, activation_checkpointing, ...)

It imports only `perfmodel.spec` and the rest of `perfmodel.ingest`.
"""
