"""The kernels of one operator on one device, per micro-batch: FLOPs, bytes and seconds.

`cost.compute.operator_table` says which kernels each operator runs on its local shard; this module prices them on a
`Device` (the rates a plan and a system fix): weight GEMMs (and their fp8/fp4 casts), memory-bound elementwise
kernels, the attention core, the ZeRO-3 buffer copies.

Backward of a GEMM C[m,n] = A[m,k] B[k,n] is two GEMMs of the same FLOPs: dA = dC B^T (m, k, n) and
dB = A^T dC (k, n, m). Fused attention backward does 2.5x the forward FLOPs (FlashAttention-2: five
matmuls against two; Dao 2023, Sec. 3.1.2).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...spec.hardware.system import System
from ...spec.model.config import ModelConfig
from ...spec.plan.layout import Plan
from ...spec.stack.profile import Stack, load_stack
from ...spec.hardware.kernel_tables import AttentionGrid, GemmGrid, attention_grid, gemm_grid, table_dtypes
from .grouped_gemm import grouped_passes
from .kernel_time import flash_attention_time, gemm_time, gemm_traffic_bytes, memory_bound_time
from .kernel_lookup import attention_table_rate, gemm_table_time
from ..power import priced_clock
from ...spec.model.global_attention import attention_parts
from .attention_kinds import attention_head_width, indexer_flops, indexer_rate, mean_keys, model_mean_keys, per_shape
from ..layouts import Layouts, among

ACT_BYTES = 2  # activations and their gradients are bf16 throughout
# Bytes moved per element (forward, backward) by the memory-bound kernels, bf16 tensors:
ELEMENTWISE_BYTES = {
    "norm": (4, 6),  # read x, write y; backward reads x and dy, writes dx
    "rope": (4, 4),  # read, write (q and k)
    "swiglu": (6, 10),  # silu(gate) * up: read 2, write 1; backward reads gate, up, dy, writes 2 grads
    "gelu": (4, 6),  # read, write; backward reads x and dy, writes dx
    "position_embedding": (6, 6),  # add the position row: read 2, write 1
    "embedding_dropout": (5, 5),  # read, write, 1 B mask
    "cross_entropy": (10, 6),  # bf16 logits in, fp32 exponentials (max/sum passes); backward reads, writes bf16
}


def residual_bytes(dropout: bool) -> tuple[float, float]:
    """Residual add fused with dropout: read branch + residual, write the sum (+1 B mask), both directions."""
    return (6 + dropout, 6 + dropout)


GEMM_INPUT_BYTES = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "fp4": 0.5, "int8": 1.0}
# Scale bytes per quantized element: NVFP4 one E4M3 scale per 16 values (NVIDIA, "Pretraining LLMs with NVFP4",
# 2025, Sec. 2; Transformer Engine's NVFP4BlockScaling); fp8 tensorwise and delayed scaling one fp32 per tensor
# (nothing per element)
NARROW_SCALE_BYTES = {"fp4": 1.0 / 16, "int8": 0.0}
# ... per fp8 recipe (Plan.fp8_recipe), activations and weights: MXFP8 one E8M0 byte per 32 values along the
# reduction, for both (OCP Microscaling Formats v1.0, Sec. 5.3; Transformer Engine MXFP8BlockScaling); blockwise one
# fp32 per 1x128 activation block and per 128x128 weight block (DeepSeek-V3 report, Sec. 3.3.1; Transformer
# Engine Float8BlockScaling)
FP8_SCALE_BYTES = {"tensorwise": (0.0, 0.0), "blockwise": (4.0 / 128, 4.0 / 128**2), "mxfp8": (1.0 / 32, 1.0 / 32)}


def narrow_bytes(precision: str, fp8_recipe: str | None = None, weights: bool = False) -> float:
    """Bytes per element of a quantized GEMM operand with its scales: GEMM_INPUT_BYTES + NARROW_SCALE_BYTES, under
    fp8 its recipe's (FP8_SCALE_BYTES, tensorwise unless given; an activation's, or a weight's where `weights`)."""
    scale = FP8_SCALE_BYTES[fp8_recipe or "tensorwise"][weights] if precision == "fp8" else \
        NARROW_SCALE_BYTES.get(precision, 0.0)
    return GEMM_INPUT_BYTES[precision] + scale


def saved_input_bytes(lay: Layouts) -> float:
    """Bytes per element of a layer GEMM's input as saved for its backward: under fp8/fp4 on a stack that saves
    the quantized copy (`Stack.narrow_saved_inputs`: Transformer Engine's Linear / LayerNormLinear / GroupedLinear
    keep only the columnwise quantized input the weight-gradient GEMM reads, `update_usage(rowwise_usage=False)`),
    that copy with its scales (`narrow_bytes`); else bf16's 2 B."""
    if GEMM_INPUT_BYTES[lay.precision] < 2 and load_stack(lay.stack).narrow_saved_inputs:
        return narrow_bytes(lay.precision, lay.fp8_recipe)
    return 2.0


DATASHEET = "datasheet"  # an op priced from the spec's peak rates and efficiencies (cost.compute.kernel_time), not a table

Values = np.ndarray | float  # one value per plan (or per configuration), or one shared by all


@dataclass
class Op:
    """One operator of a micro-batch on one device. Seconds and FLOPs are per micro-batch."""

    name: str
    kind: str  # gemm | attention | memory
    fwd_s: Values
    bwd_s: Values
    fwd_flops: Values = 0.0  # executed FLOPs (causal attention skips masked blocks)
    bwd_flops: Values = 0.0
    recompute: tuple[str, ...] = ()  # recompute modes that re-run this op's forward in the backward pass
    formula: str = ""
    active: Values = True  # False where a plan does not run this op (e.g. ZeRO-3 copies without ZeRO-3)
    share: float = 1.0  # launches per run: a mean layer's share of an op only some layers run (`scaled`)
    priced_by: str = DATASHEET  # what priced it: DATASHEET, or a measured table's label ('table h100_sxm/gemm bf16')
    outside: Values = False  # True where a shape lay outside the table's grid (extrapolated: kernel_lookup)
    partial: tuple[tuple[str, float], ...] = ()  # (mode, share): a mode in `recompute` that re-runs only that share

    def scaled(self, w: float) -> Op:
        """This op counted `w` times (a mean layer's share of an op only some layers run)."""
        return Op(self.name, self.kind, self.fwd_s * w, self.bwd_s * w, self.fwd_flops * w, self.bwd_flops * w,
                  self.recompute, self.formula + (f" x {w:.3g}" if w != 1 else ""), self.active, self.share * w,
                  self.priced_by, self.outside, self.partial)

    def recompute_s(self, mode):
        """Forward seconds re-run in the backward under recompute `mode` (a string or an array of them): the
        whole forward, or the `partial` share of it where the mode re-runs part of the op (torchtitan's per-op
        policy recomputes wk of a fused qkv, w3 of a fused [w1; w3])."""
        share = np.ones_like(np.asarray(self.fwd_s, float))
        for mode_, part in self.partial:
            share = np.where(among(mode, (mode_,)), part, share)
        return np.where(among(mode, self.recompute), self.fwd_s * share, 0.0)


@dataclass
class Device:
    """What plans and a system fix for every kernel: the rates they run at. `plan` is a `Plan` or `Layouts` (the
    kernels read its precision, attention kind and, for fp8 weight casts, its micro-batches and ZeRO stage)."""

    model: ModelConfig
    system: System
    plan: Plan | Layouts
    stack: Stack = field(init=False)  # the plan's software stack
    fraction: float = field(init=False)  # of the tables' rates its compute-bound kernels are priced at (below)
    bf16_peak: float = field(init=False)  # sustained bf16 peak (attention)
    mem_bw: float = field(init=False)
    opt_bw: float = field(init=False)

    def __post_init__(self):
        sysm = self.system
        self.stack = load_stack(self.plan.stack)
        # sustained_fraction, at the clock a compute-bound loop keeps under the part's power limit where it has a
        # power model: the step's own clock is found from there (cost.power, cost.step), its windows near it
        self.fraction = sysm.efficiency.sustained_fraction * priced_clock(sysm.accelerator.power)
        self.bf16_peak = self.sustained_peak("bf16")
        self.mem_bw = sysm.accelerator.hbm_bandwidth * sysm.efficiency.memory_bandwidth
        opt = sysm.efficiency.optimizer_bandwidth
        self.opt_bw = self.mem_bw if opt is None else sysm.accelerator.hbm_bandwidth * opt

    def sustained_peak(self, dtype: str) -> float:
        """Dense peak FLOP/s of `dtype` times the fraction a training step sustains (`fraction`)."""
        return self.system.accelerator.peak_flops(dtype) * self.fraction

    def gemm_table(self, precision: str) -> GemmGrid | None:
        """The measured GEMM table that prices `precision` on this part (`Accelerator.kernel_tables`), or None
        where the part has none or it measured neither that dtype nor a stand-in (a spec's own table without
        fp8, say): the datasheet.

        fp16 reads the bf16 table where the part's datasheet gives both the same dense rate (every NVIDIA part
        since Ampere): the same tensor-core datapath on 2-byte operands, which no inference collector times apart.
        """
        table = self.system.accelerator.kernel_tables.get("gemm")
        if table is None:
            return None
        dtypes, acc = table_dtypes(table), self.system.accelerator
        if precision not in dtypes and precision == "fp16" and "bf16" in dtypes \
                and acc.peak_tflops.get("fp16") == acc.peak_tflops.get("bf16"):
            precision = "bf16"
        return gemm_grid(table, precision) if precision in dtypes else None

    def attention_table(self) -> AttentionGrid | None:
        """The measured attention table that prices this stack's flash attention on this part, or None (the
        spec's attention_max): a table of FlashAttention-2 prices every stack (each at its attention_speed, a
        ratio to that kernel), a table of the part's native kernel only the stacks that run one
        (`Stack.attention_native`); FlashAttention-2 on Hopper is not the kernel a native table timed."""
        acc = self.system.accelerator
        table = acc.kernel_tables.get("attention")
        if table is None or (acc.attention_table_kernel == "native" and not self.stack.attention_native):
            return None
        return attention_grid(table)

    def gemm_priced(self, m, n, k, batch=1, precision=None):
        """(seconds, what priced it, outside-the-table mask) for `batch` GEMMs C[m,n] = A[m,k] B[k,n].

        From the part's measured table where it has one for the precision (cost.compute.kernel_lookup.gemm_table_time),
        divided by the sustained fraction (`fraction`) as the datasheet rate is multiplied by it (a table times a kernel alone, and
        a step keeps that share of it), and floored by the traffic of all `batch` operands at `mem_bw`
        (`cost.compute.kernel_time.gemm_traffic_bytes`: a grouped GEMM's separate weights, which the table's one GEMM does not
        read; memory-bound, so without sustained_fraction, as on the datasheet path). Elsewhere
        `cost.compute.kernel_time.gemm_time` on the datasheet (`datasheet_gemm`).
        """
        prec = precision or self.plan.precision
        grid = self.gemm_table(prec)
        if grid is None:
            return self.datasheet_gemm(m, n, k, batch, prec), DATASHEET, False
        t, outside = gemm_table_time(grid, m, n, k, batch)
        floor = self.gemm_traffic_floor(m, n, k, batch, prec)
        label = grid.label + ("" if grid.dtype == prec else f" (for {prec})")
        return np.maximum(t / self.fraction, floor), label, outside

    def gemm_traffic_floor(self, m, n, k, batch, precision: str):
        """Seconds to move `batch` GEMMs' operands (`gemm_traffic_bytes`) at `mem_bw`: a table GEMM's least price."""
        return memory_bound_time(gemm_traffic_bytes(m, n, k, GEMM_INPUT_BYTES[precision], ACT_BYTES, batch),
                                 self.mem_bw)

    def gemm(self, m, n, k, batch=1, precision=None):
        """Seconds for `batch` GEMMs (m, n, k): `gemm_priced` without saying what priced them."""
        return self.gemm_priced(m, n, k, batch, precision)[0]

    def datasheet_gemm(self, m, n, k, batch, precision: str):
        """`cost.compute.kernel_time.gemm_time` at this part's datasheet peak and efficiencies (no measured table)."""
        eff = self.system.efficiency
        return gemm_time(m, n, k, self.sustained_peak(precision), eff.matmul_max[precision], eff.matmul_tile[0],
                         eff.matmul_tile[1], self.system.accelerator.compute_units, self.mem_bw,
                         in_bytes=GEMM_INPUT_BYTES[precision], out_bytes=ACT_BYTES, batch=batch)

    def memory(self, nbytes):
        return memory_bound_time(nbytes, self.mem_bw)

    def optimizer(self, nbytes):
        """The optimizer step moving `nbytes` (`cost.memory.states.adam_step_bytes` per parameter it updates, a fused
        Adam's traffic) times the stack's implementation's traffic over the fused one (`Stack.optimizer_passes`)."""
        return memory_bound_time(nbytes * self.stack.optimizer_passes(), self.opt_bw)


ALIGN_BYTES = 16  # cuBLAS's vectorised (and Hopper's TMA) kernels need 16-byte-aligned leading dimensions


def unaligned(n, k, precision: str):
    """Where a GEMM of n out and k in features (a linear layer's; the token count m is no leading dimension of
    its three GEMMs) has either not a multiple of 16 bytes of `precision`: cuBLAS then has only its alignment-1
    kernels (NVIDIA cuBLAS docs, "Tensor Core Usage": leading dimensions a multiple of 16 bytes; GPT-2's
    vocabulary of 50257 is the common case, which is why nanoGPT and llm.c pad it to 50304). Bool per plan."""
    elems = ALIGN_BYTES / GEMM_INPUT_BYTES[precision]
    return (np.mod(np.round(np.asarray(n, float)), elems) != 0) | (np.mod(np.round(np.asarray(k, float)), elems) != 0)


def gemm_op(dev: Device, name: str, m, n, k, batch, precision: str, recompute, formula: str,
            weight_grad: bool = True, grouped: bool = False) -> Op:
    """`batch` GEMMs C[m,n] = A[m,k] B[k,n] with their backward: dA = dC B^T (m, k, n) and dB = A^T dC (k, n, m),
    the same FLOPs each (module docstring); a frozen weight (not `weight_grad`: spec.plan.finetune) skips dB. Priced by
    `Device.gemm_priced`, which the op names; `grouped` (a device's local experts in one grouped kernel) with a
    2-byte precision, each pass is the measured `cost.compute.grouped_gemm.grouped_slowdown` times what it was measured
    against, one dense GEMM of all batch*m rows (the weight gradient over batch*m), floored by the traffic of the
    batch separate weights. A 2-byte GEMM with
    a leading dimension off 16 bytes (`unaligned`) runs no faster than the part's measured alignment-1 rates
    (Accelerator.unaligned_matmul_tflops: forward, input and weight gradient; ~7x below the aligned kernels on
    H100, the GEMM-alignment benchmark)."""
    flops = 2.0 * m * n * k * batch
    (fwd, by, out_f), (da, _, out_a), (db, _, out_b) = (dev.gemm_priced(a, b, c, batch, precision)
                                                        for a, b, c in ((m, n, k), (m, k, n), (k, n, m)))
    rates = dev.system.accelerator.unaligned_matmul_tflops
    prec = precision or dev.plan.precision
    if rates and GEMM_INPUT_BYTES[prec] == 2:
        off = unaligned(n, k, prec)
        if np.any(off):
            slow = {o: flops / (r * 1e12) for o, r in rates.items()}
            fwd = np.where(off, np.maximum(fwd, slow.get("forward", 0.0)), fwd)
            da = np.where(off, np.maximum(da, slow.get("input_grad", 0.0)), da)
            db = np.where(off, np.maximum(db, slow.get("weight_grad", 0.0)), db)
            by += ", alignment-1 kernels where n or k is off 16 B"
    curve = dev.system.accelerator.grouped_gemm_slowdown
    if grouped and curve is not None and GEMM_INPUT_BYTES[prec] == 2:
        fwd, da, db = grouped_passes(dev, curve, (fwd, da, db), m, n, k, batch, precision, GEMM_INPUT_BYTES[prec],
                                     ACT_BYTES)
        by += ", grouped-GEMM slowdown by tokens per expert over the dense GEMM of their rows (measured)"
    return Op(name, "gemm", fwd, da + db * weight_grad, flops, (1 + weight_grad) * flops, recompute, formula,
              priced_by=by, outside=out_f | out_a | (out_b & weight_grad))


def linear_op(dev: Device, name: str, m, n, k, recompute=("full",), precision: str | None = None,
              groups=1) -> list[Op]:
    """A weight GEMM (tokens m, out features n, in features k) and, in fp8/fp4/int8, the casts of its operands;
    `groups` such GEMMs of equal shape run as one grouped GEMM (a device's local experts, each on its m routed
    tokens: Megatron-Core --moe-grouped-gemm), priced as a batched GEMM (`Device.gemm_priced`). Under LoRA
    (`Plan.lora`) the weight is frozen (no weight gradient), an adapted one gets its `adapter_ops`, and a base
    stored in fp8 casts no weight.

    Casting reads bf16 and writes the narrow type: the input m*k in the forward and the output gradient m*n in
    the backward every micro-batch; the weight k*n once per step, amortised over the micro-batches
    (Transformer Engine quantises weights on the first micro-batch and caches them), except under ZeRO-3,
    which gathers bf16 weights afresh for every micro-batch. A GEMM priced from a measured table already holds
    the cast of its activation operand (the fp8 and fp4 tables time dynamic activation quantisation with the
    GEMM: hardware_specs/kernels/README.md), the input's forward and the output gradient's in the backward
    lookups, so only the weight's is added.
    """
    prec, lora = precision or dev.plan.precision, getattr(dev.plan, "lora", None)
    formula = f"2*{_s(m)}*{_s(n)}*{_s(k)}" + ("" if np.all(np.asarray(groups) == 1) else f"*{_s(groups)} groups")
    ops = [gemm_op(dev, name, m, n, k, groups, prec, recompute, formula, weight_grad=lora is None,
                   grouped=bool(np.any(np.asarray(groups) > 1)))]
    if lora is not None and name in lora.targets:
        ops += adapter_ops(dev, name, m, n, k, lora.rank, recompute)
    narrow = GEMM_INPUT_BYTES[prec]
    if narrow < 2:
        per = ACT_BYTES + narrow
        regathered = (dev.plan.zero == 3) & (dev.plan.zero_shard > 1)
        stored_narrow = lora is not None and lora.base_weights == "fp8"  # fp8_params: nothing to cast
        weights = (not stored_narrow) * k * n * per / np.where(regathered, 1, dev.plan.num_microbatches)
        timed = ops[0].priced_by != DATASHEET  # the table's time holds the activation casts
        ops.append(Op(f"{name}.cast", "memory", dev.memory((m * k * per * (not timed) + weights) * groups),
                      dev.memory(m * n * per * groups * (not timed)), recompute=recompute,
                      formula=("quantise the weight to " if timed else "quantise operands to ") + prec))
    return ops


def adapter_ops(dev: Device, name: str, m, n, k, rank: int, recompute) -> list[Op]:
    """A LoRA adapter beside the frozen GEMM (m, n, k): x A^T (m, r, k) then (x A^T) B^T (m, n, r), bf16, trained
    (full backward), r unsplit and n, k as the frozen GEMM's local shard (Hu et al. 2021, Sec. 4.1: h = W x + B A x;
    spec.plan.finetune)."""
    return [gemm_op(dev, f"{name}.lora_a", m, rank, k, 1, "bf16", recompute, f"2*{_s(m)}*{rank}*{_s(k)}"),
            gemm_op(dev, f"{name}.lora_b", m, n, rank, 1, "bf16", recompute, f"2*{_s(m)}*{_s(n)}*{rank}")]


def elementwise_op(dev: Device, name: str, elements, fwd_bytes, bwd_bytes, recompute=("full",)) -> Op:
    """A memory-bound op over `elements` values moving fwd_bytes / bwd_bytes per element."""
    return Op(name, "memory", dev.memory(elements * fwd_bytes), dev.memory(elements * bwd_bytes),
              recompute=recompute, formula=f"{_s(elements)} elems x {_b(fwd_bytes)}/{_b(bwd_bytes)} B")


FLASH_BWD_FACTOR = 2.5  # fused attention backward: 5 matmuls to the forward's 2 (FlashAttention-2 convention)
FLASH_BWD_RATE = 0.63 / 0.73  # backward FLOP/s over forward FLOP/s of one fused kernel: FlashAttention-2 reaches
# up to 73% of A100's peak in the forward and 63% in the backward (Dao 2023, Sec. 4.1); the measured tables time
# the forward only, so the backward is the forward's rate times this until a backward is measured


def flash_attention_flops(tokens, seq_len, window, head_dim, heads):
    """(forward, backward) FLOPs of a causal fused attention kernel: 2 matmuls (QK^T, PV) x 2 FLOPs per
    multiply-add over the unmasked (query, key) pairs, 4 * tokens * mean_keys * head_dim * heads; the backward
    FLASH_BWD_FACTOR times that."""
    fwd = 4.0 * tokens * mean_keys(seq_len, window) * head_dim * heads
    return fwd, FLASH_BWD_FACTOR * fwd


# Unfused attention's scale, mask and softmax as eager PyTorch runs them (nanoGPT's model.py before SDPA, HF's
# "eager" attention): q k^T * scale, masked_fill, softmax in fp32 under autocast, the cast back for @ v, and their
# backward, as bytes per score element at the part's memory rate. Measured on the lent H100 (b 8, h 12-16, t
# 1024-2048, d 64: the forward 1.67-3.26 ms for 101-201 M scores, 47-48 B per score at 2.95 TB/s with the two small
# GEMMs, 43 without them as this module prices them; forward and backward 116-119 B, so 57 B in the backward
# without its GEMMs; the GEMM-alignment benchmark's recorded result).
EAGER_SOFTMAX_BYTES = (43.0, 57.0)


def softmax_bytes(eager: bool) -> tuple[float, float]:
    """Bytes per attention score of the unfused path's softmax, forward and backward (dropout's mask adds 5
    each): Megatron-LM's fused scale-mask-softmax kernel reads 2 and writes 2 B, and its backward reads y and dy
    and writes dx (4, 6; Korthikanti et al. 2022, Sec. 4.1's kernel); eager PyTorch ops (`eager`) what the lent
    H100 measured (EAGER_SOFTMAX_BYTES). Bytes per element."""
    return EAGER_SOFTMAX_BYTES if eager else (4.0, 6.0)


def attention_ops(dev: Device, tokens, heads, q_len, sequences, m=None) -> list[Op]:
    """Attention core: fused (flash) kernel, or unfused QK^T, scale-mask-softmax (+dropout), AV.

    On the device's share: `tokens` queries in `sequences` sequences of `q_len` queries each, `heads` heads, every
    query attending over the whole sequence (its keys and values gathered by context parallelism). Global layers
    with a head shape of their own (`spec.model.global_attention`): each shape's ops (model `m`) on its share of the layers.
    """
    if m is None:
        return per_shape(lambda part: attention_ops(dev, tokens, heads, q_len, sequences, part), attention_parts(dev.model))
    p = dev.plan
    if p.attention == "flash":
        # keys averaged over windowed and full layers; the per-head width of QK^T and PV averaged (MLA: 192, 128;
        # sparse MLA on its latent: 576, 512)
        head_dim = attention_head_width(m)
        fwd = 4.0 * tokens * model_mean_keys(m, p.seq_len) * head_dim * heads
        fwd_flops, bwd_flops = fwd, FLASH_BWD_FACTOR * fwd
        seq = q_len
        eff = dev.system.efficiency
        grid = dev.attention_table()
        index = indexer_ops(dev, tokens)
        if grid is not None:
            return [attention_table_op(dev, grid, fwd_flops, head_dim, q_len, sequences * heads)] + index
        rate = eff.attention_max * dev.stack.attention_speed  # the stack's kernel against the spec's FA2
        t = lambda fl: flash_attention_time(fl, seq, dev.bf16_peak, rate, eff.attention_half_seq)
        return [Op("attention", "attention", t(fwd_flops), t(bwd_flops), fwd_flops, bwd_flops,
                   ("full", "selective"), "4*T*keys*head_dim*heads (causal), bwd 2.5x")] + index
    # Unfused (pre-FlashAttention Megatron): full s x s scores per head, no causal skipping.
    sq, sk, hd = q_len, p.seq_len, m.head_dim
    batch = sequences * heads
    scores = sq * sk * batch
    drop = m.dropout > 0
    fwd_b, bwd_b = softmax_bytes(dev.stack.eager_attention and getattr(p, "compile", "none") == "none")
    ops = [
        gemm_op(dev, "attn_scores", sq, sk, hd, batch, "bf16", ("full", "selective"), "QK^T per head"),
        elementwise_op(dev, "attn_softmax", scores, fwd_b + (5 if drop else 0), bwd_b + (5 if drop else 0),
                       ("full", "selective")),
        gemm_op(dev, "attn_context", sq, hd, sk, batch, "bf16", ("full", "selective"), "softmax(QK^T) V per head"),
    ]
    return ops


def indexer_ops(dev: Device, tokens) -> list[Op]:
    """Sparse attention's indexer over the sequence (`indexer_flops`, every earlier key), as the fused attention
    kernel is priced (attention_max of the part's FP8 rate; the backward two matmuls to the forward's one); none
    without sparse attention."""
    if dev.model.sparse_attention is None:
        return []
    fwd = indexer_flops(dev.model, tokens, mean_keys(dev.plan.seq_len, None))
    rate = indexer_rate(dev)
    return [Op("indexer", "attention", fwd / rate, 2 * fwd / rate, fwd, 2 * fwd, ("full", "selective"),
               "2*T*keys*index_heads*index_head_dim (causal, FP8), bwd 2x")]


def attention_table_op(dev: Device, grid: AttentionGrid, fwd_flops, head_dim, q_len, work) -> Op:
    """The fused attention kernel priced from a measured forward table (`cost.compute.kernel_lookup.attention_table_rate`
    at the device's queries per sequence and sequences x heads), at the stack's attention_speed and divided by
    the device's sustained fraction as the table GEMMs are (`Device.fraction`); the backward's FLASH_BWD_FACTOR x
    the FLOPs at `backward_rate`
    x the forward's rate."""
    rate, outside = attention_table_rate(grid, head_dim, q_len, work)
    rate = rate * dev.stack.attention_speed * dev.fraction
    bwd_flops, bwd_rate = FLASH_BWD_FACTOR * fwd_flops, backward_rate(dev.system.accelerator)
    return Op("attention", "attention", fwd_flops / rate, bwd_flops / (rate * bwd_rate), fwd_flops,
              bwd_flops, ("full", "selective"), f"4*T*keys*head_dim*heads (causal), bwd {FLASH_BWD_FACTOR:g}x at {bwd_rate:.2f}x the rate",
              priced_by=grid.label, outside=outside)


def backward_rate(acc) -> float:
    """Fused attention's backward FLOP/s over its forward FLOP/s on `acc`: its attention table's measured ratio
    (`Accelerator.attention_backward_rate`), else FlashAttention-2's FLASH_BWD_RATE (Dao 2023, Sec. 4.1)."""
    return acc.attention_backward_rate or FLASH_BWD_RATE


def zero3_copy_op(dev: Device, params, grad_bytes: float, active=True) -> Op:
    """Buffer copies around ZeRO-3 collectives for `params` weights of one unit, per micro-batch.

    After each all-gather (forward, and again in the backward) the gathered bf16 weights are copied out of the
    flat communication buffer (read 2 + write 2 B each); before the reduce-scatter the gradients are copied
    (and cast) into one (read 2 + write grad_bytes). PyTorch FSDP2 `foreach_all_gather_copy_out` and
    `foreach_reduce` copy-in; DeepSpeed ZeRO-3 flattens the same way.
    """
    on = np.asarray(active, float)
    return Op("zero3_copies", "memory", on * dev.memory(params * 4.0), on * dev.memory(params * (4.0 + 2.0 + grad_bytes)),
              formula=f"{_s(params)} params x 4 / {6 + grad_bytes:g} B", active=active)


def _b(x) -> str:
    """Bytes per element as the formula shows them: 4, 6, or 2 + 8/tp evaluated (e.g. 3.0)."""
    x = np.ravel(x)[0] if np.ndim(x) else x
    return str(x) if len(str(x)) <= 5 else f"{x:.3g}"


def _s(x) -> str:
    x = float(np.ravel(x)[0])
    return f"{x:.0f}" if x == int(x) else f"{x:.1f}"
