"""How many host calls of each kind a training step makes, per operator, counted in each stack's own model code.

    python -m benchmarks.tools.host_counts [--out call_counts.json] [--txt call_counts.txt] [--compile] [--only S1,S2]

perfmodel prices the host (CPU) time of a training step as counts x per-call costs: the host's seconds per call by
kind (perfmodel.calibrate.host.calls), the stack's calls per operator by kind (the stack profiles,
hardware_specs/stacks/NAME.yaml). This script makes the counts: for each operator of perfmodel's operator table
(perfmodel.spec.model.operators.GRAPH_OPS) and each pass, the calls of each kind one transformer layer (and the
embedding and the head) makes, counted by running the stack's real model code on this CPU with tiny tensors (hidden
64, 2 layers, 2 x 16 tokens), or, for stacks that cannot run here (llm.c, Megatron-DeepSpeed, nanotron,
llm-foundry), read from their source and written down with file@commit citations (READ_ONLY). ~40 s on 2 cores (+30 s
with --compile).

Kinds (what one call of each costs is the host's, measured elsewhere):
  eager_op        a Python-level torch call that dispatched at least one aten op that is neither a view nor an
                  allocation (a kernel on a GPU); plus, under autocast, each cast autocast inserts (an aten._to_copy of
                  one of the call's own tensor arguments inside a call that is not itself a conversion)
  view_op         a Python-level torch call that dispatched only views (view, reshape of a viewable tensor, transpose,
                  split, permute, t, expand, chunk, unsqueeze ...), allocations or record_function bookkeeping; the
                  __call__ of a module that is not a torch.nn leaf (Block, Attention, MLP, HF's Conv1D and
                  LlamaRMSNorm ...: their own ops are counted one by one); a leaf module call that dispatched no kernel
                  (nn.Dropout(p=0), Identity)
  module_call     the call of a torch.nn leaf module (an instance of a torch.nn.modules class or a subclass, without
                  children: Linear, LayerNorm, RMSNorm, Embedding, Dropout, GELU ...): its __call__ and the ops inside,
                  which are not counted again (autocast's casts inside it are: eager_op)
  fused_module    a fused framework module's call (Transformer Engine, apex; Megatron's linear autograd Function)
  autograd_node   a node the autograd engine runs in backward (AccumulateGrad included), from the autograd graph
  nccl_call       a c10d collective dispatched (c10d.* / _c10d_functional.* ops)
  compiled_entry, compiled_kernel: a torch.compile'd region entered / a kernel it launches
  kernel_launch   llm.c's cudaLaunchKernel / cuBLASLt / cuDNN / cudaMemcpy calls
Not priced, in "_diagnostics": meta (torch calls that dispatched nothing: x.shape, x.size(), x.dim(), a no-op
.contiguous(), .to() to the same dtype ... ~0.1 us each, NOT view_op), aten_kernels (non-view aten ops dispatched,
inside modules too; in backward the nodes' kernels: a CPU count, below a GPU's: see _sanity), autocast_casts (in
eager_op already), inner_calls (torch calls inside leaf / fused modules), cuda_autocast_would_cast.

How it counts (class Counter):
  * torch.overrides.TorchFunctionMode sees every Python-level torch call; its handler runs the call under a
    TorchDispatchMode that records the aten ops it dispatched (below autograd and autocast: a CompositeImplicit op shows
    the ops it decomposes into, autocast's casts show as aten._to_copy). View: OpOverload.is_view (or aten._unsafe_view,
    detach, alias); allocation: empty*, lift_fresh, resize_, set_; the profiler namespace is bookkeeping. A call is
    eager_op if it dispatched a kernel, view_op if it dispatched only those, meta if nothing. Calls nested in a call are
    not seen (a mode is off inside its own handler): a Python function such as F.cross_entropy is one call.
  * global module forward pre-hooks and forward hooks (torch.nn.modules.module.register_module_forward_pre_hook /
    register_module_forward_hook) count module calls and drive the attribution: each stack's RULES map its module names
    (under the block: the name relative to it) to (operator, operator in force after the module returns[, operator its
    body starts in]); a call belongs to the operator in force when it is made. So `x + attn(...)` after the out
    projection is residual1, the split/view/transpose/SDPA after the qkv projection is attention, F.gelu after c_fc is
    activation (the tables: NANOGPT_RULES, PLAIN_RULES, HF_GPT2_RULES, HF_LLAMA_RULES, TITAN_RULES, MEG_RULES).
  * backward: when the loop calls Tensor.backward (intercepted), the autograd graph is walked from the loss
    (next_functions); each node is attributed to the operator whose forward window created it by its sequence number
    (Node._sequence_nr(): a thread-local counter every node takes at creation, read at each change of operator by
    creating a throw-away node); AccumulateGrad nodes (no sequence number) go to the operator of their earliest
    consumer (a tied embedding's to the embedding). A pre-hook on every node sets the operator while the engine runs
    it (its kernels and a Python backward's torch calls are attributed: the hook pushes a fresh function mode for the
    node) and checks that every walked node ran.
  * per layer: each layer's calls are attributed to it (the block's window); layer operators are the mean over the
    layers (checked equal layer to layer: "_uneven_layers" lists any that are not). The block's own call and whatever
    runs between blocks is "_layer"; model-level work that is none of the operators (the root's call, HF's rotary
    table, torchtitan's block mask) is "_model" ("detail": per-layer operators' work done once at model level).
  * GPU dispatch where a CPU differs, emulated so that the counts are a GPU run's: nn.RMSNorm / F.rms_norm is
    CompositeImplicit on CPU (pow, mean, add, rsqrt, mul, mul: 6 nodes) but aten::_fused_rms_norm on CUDA (torch >= 2.8:
    _fused_rms_norm_cuda_dispatch.h; one kernel, one FusedRmsNormBackward0 node); F.scaled_dot_product_attention falls
    back to the math path on CPU when dropout > 0 (HF GPT-2) while CUDA runs flash / memory-efficient attention (one
    kernel, one node; its output laid out [b, s, h, d] so a following transpose(1, 2).contiguous() copies nothing):
    both run as one-node autograd.Functions after CUDA autocast's casts of their inputs. Autocast runs as CPU autocast
    (bf16): torch._C._dispatch_dump shows where CUDA's and CPU's autocast lists differ (layer_norm, rms_norm, softmax,
    log_softmax, pow, sum ... fp32 on CUDA only; cross_entropy_loss fp32 on CPU only, CUDA casts at log_softmax: one
    cast either way); none of those sees a bf16 input in these models ("cuda_autocast_would_cast" would say).
    torch.compile'd pieces of a stack (torchtitan's flex attention, Megatron's jit_fuser fusions) are emulated: one
    compiled_entry and their kernels (FLEX_KERNELS, MEG_COMPILED) each way, one node; Transformer Engine's modules in
    Megatron's TE spec likewise (one fused_module, one node: te_linear, te_attention, te_norm).

Stacks run here:
  plain-torch     perfmodel/execute/transformer.py built and stepped by perfmodel/execute/train.py's Trainer for a
                  one-process plan (Trainer.step counted whole: "_step" is the loop's own calls), bf16 autocast as on
                  CUDA; GPT-2 (main) and Llama ("_variants"."llama")
  nanogpt         benchmarks/probes/host_launch.py's GPT (nanoGPT's model.py), bf16 autocast; --compile:
                  torch.compile'd, Inductor's kernels per region read from its output code ("_compiled")
  hf-transformers GPT2LMHeadModel (main), LlamaForCausalLM (_variants.llama), SDPA attention, bf16 autocast
  torchtitan      torchtitan 0.3.0's Llama3 (fused wqkv, ComplexRoPE, flex attention), no autocast
  megatron-core   megatron-core 0.16.1 GPTModel on a one-rank gloo group: the TE spec emulated (main, te_llama) and
                  the local spec run as is (local, local_no_fusion, local_llama)
Also: AdamW step (fused / foreach / for-loop), clip_grad_norm_ (foreach), zero_grad(set_to_none) per tensor and per
step (the line through 8 and 64 tensors); FSDP2 per hook (fsdp2_worker: fully_shard on a 2-rank mesh of torch's fake
process group in a subprocess: on a one-rank mesh FSDP2 skips its all-gather and reduce-scatter); this CPU's
view_op / eager_op / meta cost ratios; the sanity check: counts x the H100 VM's per-call costs against the measured
nanoGPT twin (benchmarks/results/host/h100-third-*.json). --gpu-check FILE (on a CUDA machine): the same counts without
emulation, compared with the CPU's, and the host's view_op / eager_op / meta seconds per call
(benchmarks/results/host/h100-host_counts-gpu_check.json: nanoGPT and plain-torch GPT-2 / Llama identical but for one
autocast cast in nanoGPT's loss, see there).

Output: the table (stdout, --txt) and --out JSON: {stack: {op: {"forward": {kind: n}, "backward": {kind: n}},
"_layer", "_model", "_step", "_optimizer", "_fsdp2", "_variants", "_diagnostics", "_samples" (what was counted, by
call name), "_source"}, "_sanity", "_cpu_ratios"}. Layer operators per layer (means over layers), others per step;
one micro-batch.

Where each part is: `counter` the counting (Counter, the GPU emulations, summarize); `stacks/` one module per stack:
for the stacks counted here their rules and how their code is built and run, for the stacks read from source their
counts as cited data; `optimizer` and `fsdp2` what torch's optimizer step and FSDP2's hooks call; `checks` the
sanity check and --gpu-check; `__main__` the run, the table and the JSON.
"""
