"""torch.autocast's casts around every linear, on a stack that trains fp32 parameters under it (`Stack.autocast_linears`)."""

from __future__ import annotations

from .kernels import Device, Op, elementwise_op


AUTOCAST_BYTES = 6.0  # an fp32 <-> bf16/fp16 cast reads 4 and writes 2 bytes per element (2 and 4 back)


def autocast_op(dev: Device, name: str, tokens, n, k, rec) -> list[Op]:
    """The casts torch.autocast adds to a linear of local shape (n out, k in) over `tokens` rows, per micro-batch, on
    a stack that trains fp32 parameters under it (`Stack.autocast_linears`; a GPU plan in bf16 or fp16): the weight
    and bias to the compute dtype in the forward and their gradients back in the backward, and the input, where a
    norm produced it in fp32, once per nn.Linear that reads it (the first norm's `qkv` readers, the second's
    `mlp_in` ones: doubled for a gated MLP's gate and up, the final norm's LM head once) and its gradient back.
    Each cast moves AUTOCAST_BYTES per element (cost.compute.memory_bound_time); bytes.

    Source: torch.autocast's CUDA op list casts a linear's inputs to the lower dtype (PyTorch docs, "Automatic Mixed
    Precision package", ops that autocast to float16; layer_norm to float32), and its cast cache keeps a weight's
    cast only inside one autocast region; measured in the executor's traces on the lent H200: aten::_to_copy under
    aten::linear and ToCopyBackward0, 7.9 ms of an 82 ms GPT-2 355M step (benchmarks/results/traces)."""
    readers = dev.stack.autocast_linears
    if not readers or dev.plan.precision not in ("bf16", "fp16") or dev.system.accelerator.torch_device != "cuda":
        return []
    m = dev.model
    biased = m.linear_bias == "all" or (m.linear_bias == "qkv" and name == "qkv")
    weights = n * k + n * (biased and name != "lm_head")
    casts = {"qkv": readers.get("qkv", 0), "mlp_in": readers.get("mlp_in", 0) * (2 if m.gated else 1),
             "lm_head": 1}.get(name, 0)
    elements = weights + casts * tokens * k
    return [elementwise_op(dev, f"{name}.autocast", elements, AUTOCAST_BYTES, AUTOCAST_BYTES, rec)]
