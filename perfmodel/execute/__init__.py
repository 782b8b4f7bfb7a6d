"""Plan files run for real with torch.distributed and measured: the executor of `perfmodel execute` and `perfmodel
validate` (docs/plans.md).

The parent process checks the plans and launches one torchrun; each rank builds the model on the meta device and
applies the plan in small steps over a named DeviceMesh, as torchtitan does.

- `run_plans`: check training plan files and launch them; `serve_plans`: the same for serving plans.
- `launch`: torchrun, its elastic agent and the processes of a launch; a failed rank as one line.
- `worker`: the torchrun entry point on each rank; `train`: one plan built and trained there.
- `transformer`: the model trained: GPT-2 and Llama architectures in plain PyTorch.
- `parallel`: one module per parallelism: tensor, pipeline, context, expert, data, activation checkpointing.
- `lora`: LoRA fine-tuning on that model.
- `inference`: a serving plan's prefill and decode with a KV cache, on one rank.
- `data`: seeded synthetic tokens, or a local text file.
- `memory_probe`: one rank's memory in the views the cost model predicts; `host`: what /proc says of the host.
- `tracing`: Kineto traces of a plan's steps, for `perfmodel calibrate --from-trace`.
- `checkpoint`: checkpoint directories and manifests; save and resume.
- `faults`: failures a test plans and the workers meet.

It may import only `errors`, `types`, `files` and `spec` (perfmodel.layers): plan files in, measurements out,
nothing of the cost model or the search. torch is imported inside the workers.
"""
