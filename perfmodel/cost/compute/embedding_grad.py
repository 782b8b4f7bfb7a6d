"""The embedding's weight gradient as PyTorch's dense embedding backward builds it, and where Megatron-LM adds it to
its fp32 main gradient: a pass over the whole local vocab x hidden table each micro-batch, not over the looked-up
rows alone."""

from __future__ import annotations

from ..comm.compression import GRAD_BYTES
from .kernels import ACT_BYTES, Device, Op, Values, elementwise_op

ZEROED_BYTES = ACT_BYTES  # the dense gradient takes the bf16 weight's dtype (grad.options())


def dense_embedding_grad_bytes(grad_bytes: float) -> float:
    """HBM bytes per element of the local vocab x hidden table that one micro-batch's embedding backward moves
    beyond the scatter of its tokens' rows, where the stack accumulates into a main gradient
    (`Stack.dense_embedding_grad`):
      torch's dense embedding backward (F.embedding with sparse=False, which Megatron-LM's VocabParallelEmbedding
        calls: megatron/core/tensor_parallel/layers.py:281 at NVIDIA/Megatron-LM@23e00ed0) allocates its result
        as `at::zeros({num_weights, grad.size(-1)}, grad.options())` (pytorch aten/src/ATen/native/cuda/
        EmbeddingBackwardKernel.cu, embedding_backward_cuda_kernel): a bf16 write of the table, 2;
      Megatron-LM's DDP hook then adds it to the main gradient, `param.main_grad.add_(param.grad.data)`
        (megatron/core/distributed/distributed_data_parallel.py:523 at 23e00ed0): a read of the bf16 gradient (2)
        and a read and write of the main gradient (2 x grad_bytes; fp32: 8).
    12 bytes an element with fp32 main gradients."""
    return ZEROED_BYTES + ACT_BYTES + 2.0 * grad_bytes


def embedding_ops(dev: Device, token_elements: Values, vocab_split: Values, table_elements: Values) -> list[Op]:
    """The embedding's kernels per micro-batch: the lookup reads its tokens' rows (4 B per element of
    `token_elements`, the tokens x local hidden) and its backward reads their gradient and updates their rows
    (2 + 8 / `vocab_split`); where the stack builds the dense gradient and the embedding trains (not under LoRA),
    the pass of `dense_embedding_grad_bytes` over the device's `table_elements` (its vocab shard x hidden)."""
    rows = elementwise_op(dev, "embedding", token_elements, 4, 2 + 8 / vocab_split, ())
    if not dev.stack.dense_embedding_grad or getattr(dev.plan, "lora", None) is not None:
        return [rows]
    return [rows, elementwise_op(dev, "embedding_dense_grad", table_elements, 0.0,
                                 dense_embedding_grad_bytes(GRAD_BYTES[dev.plan.grad_dtype]), ())]
