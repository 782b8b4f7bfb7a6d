"""Each stack's part: for the stacks counted here, the rules that map its module names to operators and how its
code is built and stepped (nanogpt, plain_torch, hf_transformers, torchtitan, megatron_core); for the stacks read from
their source, the counts as cited data (llmc, deepspeed, nanotron, composer_fsdp1)."""


def op(fwd: dict | None = None, bwd: dict | None = None, note: str = "") -> dict:
    d = {"forward": fwd or {}, "backward": bwd or {}}
    if note:
        d["note"] = note
    return d

