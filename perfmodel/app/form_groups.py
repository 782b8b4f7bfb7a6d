"""How the page lays out a command's flags for a newcomer: the section each flag sits in, its plain label, and
whether it is folded away under "More settings" (rare). Data only; `forms.fields` attaches it to each field.

The flag itself stays in the field's tooltip (the page's title attribute), so the CLI spelling is one hover away.
A flag not listed here is shown under "More settings" with its flag as the label: a new CLI flag never vanishes
from the page, it only waits for a label here.
"""

from __future__ import annotations

# section key -> title, in the order the page shows them ("more" is the folded <details> at the end)
SECTIONS = {
    "model": "Model",
    "cluster": "Cluster",
    "batch": "Batch",
    "layout": "Layout (parallelism)",
    "memory": "Memory",
    "precision": "Precision",
    "stack": "Stack",
    "requests": "Requests",
    "search": "Search",
    "run": "Training run",
    "cost": "Cost and power",
    "more": "More settings",
}
CONFIG = "config"  # flags the config upload box gives (--from, --name): not drawn in the form itself

# flag -> (section, label, rare); rare fields are drawn in "More settings", under their section's title
FLAGS: dict[str, tuple[str, str, bool]] = {
    # what a framework config upload gives (predict / forecast --config --from --name)
    "--from": (CONFIG, "Framework of the config", False),
    "--name": (CONFIG, "Config name (a file defining several)", False),
    # model
    "--model": ("model", "Model", False),
    "--lora-rank": ("model", "LoRA fine-tune: adapter rank", True),
    "--lora-modules": ("model", "LoRA: layers adapted", True),
    "--lora-base": ("model", "LoRA: frozen base weights stored in", True),
    # cluster
    "--hardware": ("cluster", "Hardware", False),
    "--gpus": ("cluster", "GPUs", False),
    "--host": ("cluster", "Host that launches the kernels", True),
    # batch
    "--global-batch": ("batch", "Global batch (sequences per step)", False),
    "--micro-batch": ("batch", "Micro-batch (sequences per GPU)", False),
    "--seq-len": ("batch", "Sequence length (tokens)", False),
    # layout
    "--tp": ("layout", "Tensor-parallel size", False),
    "--pp": ("layout", "Pipeline-parallel stages", False),
    "--dp": ("layout", "Data-parallel size", False),
    "--cp": ("layout", "Context-parallel size", False),
    "--vpp": ("layout", "Virtual pipeline chunks per GPU", False),
    "--ep": ("layout", "Expert-parallel size (MoE)", False),
    "--sequence-parallel": ("layout", "Sequence parallelism", False),
    "--etp": ("layout", "Expert tensor-parallel size (MoE)", True),
    "--dp-replicate": ("layout", "Data-parallel replicas (hybrid sharding)", True),
    "--schedule": ("layout", "Pipeline schedule", True),
    "--first-stage-layers": ("layout", "Layers on the first pipeline stage", True),
    "--last-stage-layers": ("layout", "Layers on the last pipeline stage", True),
    "--account-for-embedding": ("layout", "Count the embedding as a pipeline layer", True),
    "--account-for-loss": ("layout", "Count the loss as a pipeline layer", True),
    "--expert-imbalance": ("layout", "Expert load imbalance (busiest / mean)", True),
    "--moe-capacity-factor": ("layout", "Expert capacity factor (token dropping)", True),
    "--moe-pad-to-capacity": ("layout", "Pad experts to capacity", True),
    "--moe-dispatcher": ("layout", "MoE token dispatcher", True),
    "--moe-overlap": ("layout", "Overlap expert-parallel communication", True),
    "--moe-dense-dispatch": ("layout", "MoE dense (one-hot) dispatch", True),
    # memory
    "--recompute": ("memory", "Activation recomputation", False),
    "--zero": ("memory", "ZeRO stage (optimizer sharding)", False),
    "--optimizer-offload": ("memory", "Offload optimizer state to host memory", False),
    "--headroom": ("memory", "Memory headroom (share kept free)", False),
    "--recompute-modules": ("memory", "Selective recompute: modules rebuilt", True),
    "--recompute-saved": ("memory", "Named recompute: tensors kept", True),
    "--recompute-offloaded": ("memory", "Named recompute: tensors held on the host", True),
    "--recompute-num-layers": ("memory", "Full recompute: layers per group", True),
    "--recompute-method": ("memory", "Full recompute: method", True),
    "--loss-chunks": ("memory", "Loss computed in chunks", True),
    # precision
    "--precision": ("precision", "Matrix-multiply precision", False),
    "--fp8-recipe": ("precision", "FP8 scaling recipe", False),
    "--grad-dtype": ("precision", "Gradient dtype", False),
    "--weight-dtype": ("precision", "Stored weights (fp32 master or bf16)", True),
    "--moment-dtype": ("precision", "Adam moments dtype", True),
    "--grad-compression": ("precision", "Gradient compression on the wire", True),
    "--powersgd-rank": ("precision", "PowerSGD rank", True),
    # stack
    "--stack": ("stack", "Software stack", False),
    "--compile": ("stack", "torch.compile", False),
    "--attention": ("stack", "Attention kernel", True),
    "--tp-comm-overlap": ("stack", "Overlap tensor-parallel communication", True),
    "--no-overlap-dp-comm": ("stack", "Do not overlap data-parallel communication", True),
    # search
    "--objective": ("search", "Rank plans by", False),
    "--only": ("search", "Only these values (field=v1,v2)", True),
    "--top": ("search", "Rows shown", False),
    # serve (perfmodel infer)
    "--input-len": ("requests", "Prompt tokens per request", False),
    "--output-len": ("requests", "Generated tokens per request", False),
    "--max-throughput": ("requests", "As many requests as fit (max throughput)", False),
    "--concurrency": ("requests", "Requests in flight", False),
    "--kv-dtype": ("precision", "KV cache dtype", False),
    "--stack-version": ("stack", "Stack release", False),
    "--attention-dp": ("layout", "Attention data-parallel groups", True),
    "--redundant-experts": ("layout", "Redundant expert slots (EPLB)", True),
    "--moe-a2a": ("layout", "MoE exchange across attention groups", True),
    "--two-batch-overlap": ("layout", "Two-batch overlap", True),
    "--prefill-dp": ("layout", "Disaggregated: prefill replicas", True),
    "--prefill-tp": ("layout", "Disaggregated: prefill tensor-parallel size", True),
    "--prefill-attention-dp": ("layout", "Disaggregated: prefill attention groups", True),
    "--prefill-ep": ("layout", "Disaggregated: prefill expert-parallel size", True),
    "--mem-fraction": ("stack", "Engine memory share", True),
    "--max-batch": ("stack", "Most sequences per step", True),
    "--max-num-tokens": ("stack", "Most tokens per step", True),
    "--chunked-prefill": ("stack", "Chunked prefill", True),
    "--speculative": ("requests", "Speculative decoding", True),
    "--draft-tokens": ("requests", "Speculative: tokens drafted per step", True),
    "--acceptance-rate": ("requests", "Speculative: acceptance rate", True),
    "--acceptance-length": ("requests", "Speculative: mean tokens per step", True),
    "--draft-vocab": ("requests", "Speculative: draft vocabulary", True),
    "--simulate": ("requests", "Also simulate a benchmark client", True),
    "--request-rate": ("requests", "Simulate: requests per second", True),
    "--requests": ("requests", "Simulate: requests sent", True),
    "--range-ratio": ("requests", "Simulate: length spread (ratio)", True),
    "--seed": ("requests", "Simulate: random seed", True),
    "--search": ("search", "Layout search: rank every layout of the GPUs", True),
    "--ttft-ms": ("search", "Layout search: most ms to first token", True),
    "--tpot-ms": ("search", "Layout search: most ms per token", True),
    "--target-rps": ("search", "Layout search: requests per second to serve", True),
    # forecast
    "--tokens": ("run", "Tokens to train", False),
    "--checkpoint": ("run", "Checkpointing", False),
    "--ramp": ("run", "Batch-size ramp (GB:STEPS,...)", True),
    "--checkpoint-interval": ("run", "Seconds between checkpoints", True),
    "--interruption-rate": ("run", "Interruptions per device-hour", True),
    "--restart-s": ("run", "Seconds to restart after an interruption", True),
    "--price": ("cost", "Price per device-hour (USD)", False),
    "--device-power": ("cost", "Device power while computing (W)", True),
    "--idle-power": ("cost", "Device power while waiting (W)", True),
    "--host-power": ("cost", "Host power per device (W)", True),
    "--comm-power-share": ("cost", "Power share while communicating", True),
    "--pue": ("cost", "Facility PUE", True),
    "--grid-intensity": ("cost", "Grid carbon intensity", True),
}

# (command, flag) -> label where a command's flag means something else than predict's
LABELS = {
    ("search", "--gpus"): "GPU counts to try (8,16,32)",
    ("infer", "--top"): "Layout search: rows shown",
    ("infer", "--precision"): "Weights and activations precision",
}
RARE = {("infer", "--top")}  # (command, flag) folded away where predict's is not


def place(command: str, flag: str) -> dict:
    """The section, label and rarity of `command`'s `flag`: from FLAGS (LABELS / RARE where the command differs),
    else "More settings" under the flag's own name."""
    section, label, rare = FLAGS.get(flag, ("more", flag, True))
    return {"section": section, "label": LABELS.get((command, flag), label),
            "rare": rare or (command, flag) in RARE}
