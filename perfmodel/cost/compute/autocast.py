"""torch.autocast around fp32 parameters (`Stack.autocast_linears`): the bytes of the casts around every linear, of
the fp32 residual stream it leaves between them, and of eager PyTorch's separate bias-gradient reduction.

Figures only: the operator table (cost.compute.operator_table.kernels) asks for them and builds the kernels, so
the dependency goes one way, from the table to this module."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .kernels import Device


AUTOCAST_BYTES = 6.0  # an fp32 <-> bf16/fp16 cast reads 4 and writes 2 bytes per element (2 and 4 back)
JOIN_BYTES = 12.0  # autograd sums two fp32 gradients of one tensor: reads 4 + 4, writes 4 bytes per element
# (forward, backward) bytes per element of the memory-bound ops on the fp32 stream that eager autocast leaves between
# linears (`stream_bytes`), against cost.compute.kernels.ELEMENTWISE_BYTES' and residual_bytes' bf16 ones:
STREAM_BYTES = {
    # layer_norm is on autocast's fp32 list: reads x and writes y in fp32; backward reads x and dy, writes dx
    "norm": (8.0, 12.0),
    # fp32 stream + the linear's bf16 output -> fp32 (read 4 + 2, write 4); backward casts dy to the branch's bf16
    # (AUTOCAST_BYTES) and autograd joins the skip's and the norm's fp32 gradients of the stream (JOIN_BYTES)
    "residual": (10.0, AUTOCAST_BYTES + JOIN_BYTES),
    # cross_entropy is on the fp32 list: the bf16 logits cast up (6) and log_softmax in fp32 (read 4, write 4);
    # backward reads the saved output and dy, writes dx in fp32 (12) and casts it down for the LM head (6)
    "cross_entropy": (AUTOCAST_BYTES + 8.0, 12.0 + AUTOCAST_BYTES),
}


def autocast_on(dev: Device) -> bool:
    """Whether the plan trains fp32 parameters under torch.autocast: a stack with `autocast_linears`, a bf16/fp16
    plan, a CUDA device (autocast on CPU is the executor's bf16 parameters, no casts)."""
    return (bool(dev.stack.autocast_linears) and dev.plan.precision in ("bf16", "fp16")
            and dev.system.accelerator.torch_device == "cuda")


def fp32_stream(dev: Device) -> bool:
    """Whether the residual stream between the linears is fp32 and its ops run as separate eager kernels: autocast
    (`autocast_on`) in an eager plan. Under torch.compile Inductor fuses each cast into its neighbour's kernel."""
    return autocast_on(dev) and getattr(dev.plan, "compile", "none") == "none"


def stream_bytes(dev: Device, kind: str, bf16: tuple[float, float], mask: float = 0.0) -> tuple[float, float]:
    """(forward, backward) bytes per element of a norm, residual add or loss: STREAM_BYTES' fp32 figures (+ `mask`,
    a dropout's 1-byte mask, each way) on an eager autocast plan (`fp32_stream`), else the `bf16` ones given.

    Source: torch.autocast's CUDA op lists (PyTorch docs, "Automatic Mixed Precision package": layer_norm, log_softmax
    and cross_entropy autocast to float32; add runs in the widest input type), and the executor's traces on the
    lent H200 (benchmarks/results/traces/gpu-single-h200/gpt2-355m-mb8): vectorized_layer_norm_kernel<float>,
    CUDAFunctor_add<float> on [8, 1024, 1024] in both passes, a bf16->fp32 copy of the [8192, 50257] logits before
    cunn_SoftMaxForward<float> and one back after its backward."""
    if not fp32_stream(dev):
        return bf16
    fwd, bwd = STREAM_BYTES[kind]
    return fwd + mask, bwd + mask


def cast_bytes(dev: Device, name: str, tokens, n, k) -> tuple | None:
    """(elements, forward bytes, backward bytes per element) of the casts torch.autocast adds to a linear of local
    shape (n out, k in) over `tokens` rows, per micro-batch, on a stack that trains fp32 parameters under it
    (`autocast_on`; None elsewhere): the weight and bias to the compute dtype in the forward and their gradients
    back in the backward, and the input, where a norm produced it in fp32, once per nn.Linear that reads it (the
    first norm's `qkv` readers, the second's `mlp_in` ones: doubled for a gated MLP's gate and up, the final norm's
    LM head once) and its gradient back, where autograd then joins the readers' fp32 gradients (readers - 1 sums of
    JOIN_BYTES). Under torch.compile (`fp32_stream` false) the input casts fuse into the norm's kernel and only the
    weights' remain. Under LoRA (Plan.lora) the base weights and biases are frozen: cast forward, no gradient to
    cast back. Each cast moves AUTOCAST_BYTES per element (cost.compute.kernel_time.memory_bound_time).

    Source: torch.autocast's CUDA op list casts a linear's inputs to the lower dtype (PyTorch docs, "Automatic Mixed
    Precision package", ops that autocast to float16; layer_norm to float32), and its cast cache keeps a weight's
    cast only inside one autocast region; measured in the executor's traces on the lent H200: aten::_to_copy under
    aten::linear and ToCopyBackward0, 7.9 ms of an 82 ms GPT-2 355M step, and 96 fp32 aten::add_ of [8, 1024, 1024]
    (four per layer: q, k, v's gradients joined twice, and the two streams) in its backward
    (benchmarks/results/traces)."""
    if not autocast_on(dev):
        return None
    readers, m = dev.stack.autocast_linears, dev.model
    weights = n * k + n * m.linear_has_bias(name)
    casts = {"qkv": readers.get("qkv", 0), "mlp_in": readers.get("mlp_in", 0) * (2 if m.gated else 1),
             "lm_head": 1}.get(name, 0) * fp32_stream(dev)
    inputs = casts * tokens * k
    joins = max(casts - 1, 0) * tokens * k
    fwd = AUTOCAST_BYTES * (weights + inputs)
    trained = getattr(dev.plan, "lora", None) is None
    bwd = AUTOCAST_BYTES * (weights * trained + inputs) + JOIN_BYTES * joins
    return weights + inputs, fwd / (weights + inputs), bwd / (weights + inputs)


def bias_grad_bytes(dev: Device, name: str, tokens, n) -> tuple | None:
    """(elements, forward bytes, backward bytes per element) of the bias gradient as its own reduction over the
    tokens (`Stack.bias_grad_reduction`: eager PyTorch's nn.Linear, whose addmm backward leaves the broadcast bias's
    gradient to autograd's sum_to, aten::sum): it reads the output gradient once, 2 bytes per element of tokens x n;
    backward only. None under LoRA, whose base biases are frozen (execute/lora.py), and where the GEMM's epilogue
    computes it (cuBLASLt's BGRADB in Transformer Engine and Megatron-LM).

    Source: PyTorch tools/autograd/derivatives.yaml (addmm: self's gradient is grad, reduced to the bias's shape by
    sum_to); measured: 120 aten::sum of bf16 [8192, 1024] and 24 of [8192, 4096] per GPT-2 355M step, 2.8 of its
    82 ms, in the executor's trace on the lent H200 (benchmarks/results/traces/gpu-single-h200/gpt2-355m-mb8)."""
    frozen = getattr(dev.plan, "lora", None) is not None
    if frozen or not (dev.stack.bias_grad_reduction and dev.model.linear_has_bias(name)):
        return None
    return tokens * n, 0.0, 2.0
