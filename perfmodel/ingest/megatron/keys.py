"""Megatron-LM's arguments as `perfmodel import --from megatron` reads them: the defaults of those the model and the
plan take, and the reason each argument the cost model has no use for is not priced (the vocabularies of the
tokenizers a script may name instead of --vocab-size are perfmodel.spec.model.tokenizers').

Defaults are Megatron-LM's (megatron/training/arguments.py at NVIDIA/Megatron-LM commit d98e8a64, and
megatron/core/transformer/transformer_config.py TransformerConfig for the fields its arguments set): line numbers
below are of that arguments.py.
"""

from __future__ import annotations

# -- defaults of the arguments perfmodel prices ---------------------------------------------------------------
# --attention-dropout / --hidden-dropout: TransformerConfig.attention_dropout = hidden_dropout = 0.1
DROPOUT = 0.1
# --make-vocab-size-divisible-by: default=128 (arguments.py:2441); the tokenizer's vocabulary is padded to a
# multiple of this x tp (megatron/core/tokenizers/utils/build_tokenizer.py:138)
VOCAB_DIVISOR = 128
# --moe-token-dispatcher-type: TransformerConfig.moe_token_dispatcher_type = "allgather"
MOE_DISPATCHER = "allgather"
# --kv-lora-rank 32, --qk-head-dim 128, --qk-pos-emb-head-dim 64, --v-head-dim 128, --q-lora-rank None
# (arguments.py:3548-3556)
MLA_DEFAULTS = {"--q-lora-rank": None, "--kv-lora-rank": 32, "--qk-head-dim": 128, "--qk-pos-emb-head-dim": 64,
                "--v-head-dim": 128}

# -- arguments not priced, by reason ----------------------------------------------------------------------------
REASONS = {
    "data": "data and tokenizer files: do not change step time or memory",
    "optimizer": "optimizer hyperparameter or learning-rate schedule: does not change step time or memory",
    "logging": "logging, profiling or timing: perfmodel prices the step, not what it reports",
    "checkpoint": "checkpointing: runs between steps (or beside them), not priced",
    "eval": "evaluation: runs between training steps, not priced",
    "length": "how long training runs: perfmodel prices one step",
    "numerics": "a numeric setting of the model (initialisation, rotary base, epsilon): same shapes, same cost",
    "fusion": "a kernel fusion choice: perfmodel prices megatron-core's kernels as its stack profile has them",
    "routing": "a MoE routing or load-balancing setting of training: perfmodel prices routing balance by "
               "plan.expert_imbalance, not by these",
    "runtime": "a process-group, runtime or determinism setting: does not change the priced step",
    "launch": "where the launcher meets its peers: does not change the step",
    "model-impl": "which implementation builds the model (megatron-core with Transformer Engine is what perfmodel "
                  "prices)",
    "fp8-detail": "an FP8 scaling detail: perfmodel prices FP8 GEMMs by plan.fp8_recipe alone",
    "memory-hint": "an allocator or garbage-collection hint: perfmodel prices memory as allocated, not these",
    "graphs-detail": "a CUDA-graph detail: perfmodel prices graphs by plan.cuda_graphs alone",
    "fsdp-detail": "a Megatron-FSDP / data-parallel buffer or communication detail: perfmodel prices the gathers "
                   "and reductions by plan.zero and plan.grad_dtype",
    "dispatch-detail": "the flex dispatcher's communication library (DeepEP, HybridEP): perfmodel prices the "
                       "token dispatch by plan.moe_dispatcher",
}
NOT_PRICED = {
    "data": ("--data-path", "--split", "--vocab-file", "--merge-file", "--tokenizer-model", "--data-cache-path",
             "--mock-data", "--num-workers", "--tokenizer-type", "--tiktoken-pattern", "--no-create-attention-mask-in-dataloader",
             "--no-mmap-bin-files", "--train-data-path", "--valid-data-path", "--test-data-path",
             "--data-args-path", "--per-split-data-args-path", "--reset-position-ids", "--reset-attention-mask",
             "--eod-mask-loss", "--object-storage-cache-path", "--dataloader-type", "--mid-level-dataset-surplus"),
    "optimizer": ("--lr", "--min-lr", "--lr-decay-style", "--lr-decay-iters", "--lr-decay-samples",
                  "--lr-warmup-fraction", "--lr-warmup-iters", "--lr-warmup-samples", "--lr-warmup-init",
                  "--weight-decay", "--start-weight-decay", "--end-weight-decay", "--weight-decay-incr-style",
                  "--adam-beta1", "--adam-beta2", "--adam-eps", "--clip-grad", "--decoupled-lr",
                  "--decoupled-min-lr", "--loss-scale", "--initial-loss-scale", "--min-loss-scale",
                  "--loss-scale-window", "--hysteresis", "--sgd-momentum", "--seed", "--calculate-per-token-loss",
                  "--rampup-batch-size", "--check-for-nan-in-loss-and-grad", "--mtp-loss-scaling-factor", "--override-opt_param-scheduler",
                  "--use-checkpoint-opt_param-scheduler"),
    "logging": ("--log-interval", "--tensorboard-dir", "--log-params-norm", "--log-num-zeros-in-grad",
                "--log-validation-ppl-to-tensorboard", "--log-timers-to-tensorboard", "--log-memory-to-tensorboard",
                "--log-throughput", "--timing-log-level", "--logging-level", "--profile", "--profile-step-start",
                "--profile-step-end", "--profile-ranks", "--use-pytorch-profiler", "--wandb-project",
                "--wandb-exp-name", "--wandb-save-dir", "--log-loss-scale-to-tensorboard", "--tensorboard-queue-size",
                "--log-world-size-to-tensorboard", "--wandb-entity", "--log-progress", "--log-energy", "--timing-log-option",
                "--tensorboard-log-interval", "--log-straggler", "--record-memory-history", "--memory-snapshot-path"),
    "checkpoint": ("--save", "--load", "--save-interval", "--save-retain-interval", "--ckpt-format", "--async-save",
                   "--use-persistent-ckpt-worker", "--dist-ckpt-strictness", "--dist-ckpt-optim-fully-reshardable",
                   "--no-save-optim", "--no-save-rng", "--no-load-optim", "--no-load-rng", "--finetune",
                   "--pretrained-checkpoint", "--ckpt-fully-parallel-load", "--ckpt-fully-parallel-save",
                   "--auto-detect-ckpt-format", "--ckpt-assume-constant-structure", "--non-persistent-save-interval",
                   "--non-persistent-ckpt-type", "--exit-on-missing-checkpoint", "--use-dist-ckpt",
                   "--ckpt-convert-format", "--ckpt-convert-save"),
    "eval": ("--eval-iters", "--eval-interval", "--skip-train", "--test-mode", "--full-validation"),
    "length": ("--train-iters", "--train-samples", "--exit-duration-in-mins", "--exit-interval", "--exit-signal-handler"),
    "numerics": ("--rotary-base", "--rotary-percent", "--rotary-interleaved", "--rotary-scaling-factor",
                 "--use-rope-scaling", "--rope-scaling-factor", "--mscale", "--mscale-all-dim", "--norm-epsilon",
                 "--apply-layernorm-1p", "--init-method-std", "--attention-softmax-in-fp32", "--apply-query-key-layer-scaling",
                 "--qk-layernorm", "--no-rope-fusion", "--rope-type", "--original-max-position-embeddings",
                 "--beta-fast", "--beta-slow", "--apply-residual-connection-post-layernorm", "--fp32-residual-connection",
                 "--openai-gelu", "--squared-relu", "--no-position-embedding", "--layernorm-zero-centered-gamma"),
    "fusion": ("--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl", "--no-gradient-accumulation-fusion",
               "--no-masked-softmax-fusion", "--no-bias-gelu-fusion", "--no-bias-swiglu-fusion",
               "--no-bias-dropout-fusion", "--no-persist-layer-norm", "--moe-permute-fusion", "--moe-grouped-gemm",
               "--use-flash-attn", "--moe-router-fusion", "--fused-single-qkv-rope", "--use-fused-weighted-squared-relu"),
    "routing": ("--moe-router-load-balancing-type", "--moe-aux-loss-coeff", "--moe-z-loss-coeff",
                "--moe-router-topk-scaling-factor", "--moe-router-num-groups", "--moe-router-group-topk",
                "--moe-router-pre-softmax", "--moe-router-dtype", "--moe-router-enable-expert-bias",
                "--moe-router-bias-update-rate", "--moe-input-jitter-eps", "--moe-per-layer-logging",
                "--moe-token-drop-policy", "--moe-router-padding-for-fp8", "--moe-router-padding-for-quantization"),
    "runtime": ("--distributed-backend", "--distributed-timeout-minutes", "--deterministic-mode",
                "--no-check-for-nan-in-loss-and-grad", "--ddp-average-in-collective", "--local-rank",
                "--use-cpu-initialization", "--no-async-tensor-model-parallel-allreduce", "--num-distributed-optimizer-instances",
                "--check-weight-hash-across-dp-replicas-interval", "--ddp-bucket-size", "--ddp-num-buckets",
                "--enable-ft-package", "--calc-ft-timeouts", "--use-ring-exchange-p2p", "--overlap-p2p-communication",
                "--no-overlap-p2p-communication", "--decoder-seq-length", "--use-tp-pp-dp-mapping",
                "--high-priority-stream-groups", "--nccl-communicator-config-path", "--result-rejected-tracker-filename",
                "--rerun-mode", "--tp-comm-bootstrap-backend", "--delay-wgrad-compute", "--enable-experimental",
                "--init-model-with-meta-device"),
    "model-impl": ("--use-mcore-models", "--transformer-impl", "--use-legacy-models", "--spec", "--use-te",
                   "--heterogeneous-layers-config-path"),
    "fp8-detail": ("--fp8-amax-history-len", "--fp8-amax-compute-algo", "--fp8-margin", "--fp8-interval",
                   "--fp8-wgrad", "--no-fp8-wgrad", "--first-last-layers-bf16",
                   "--num-layers-at-start-in-bf16", "--num-layers-at-end-in-bf16", "--te-rng-tracker",
                   "--inference-rng-tracker", "--fp8-recipe-file", "--reuse-grad-buf-for-mxfp8-param-ag"),
    "memory-hint": ("--manual-gc", "--manual-gc-interval", "--manual-gc-eval", "--empty-unused-memory-level",
                    "--no-manual-gc-eval"),
    "graphs-detail": ("--cuda-graph-warmup-steps", "--external-cuda-graph", "--cuda-graph-retain-backward-graph"),
    "fsdp-detail": ("--fsdp-double-buffer", "--use-nccl-ub", "--disable-symmetric-registration",
                    "--megatron-fsdp-grad-comm-dtype", "--suggested-communication-unit-size"),
    "dispatch-detail": ("--moe-flex-dispatcher-backend", "--moe-enable-deepep"),
}
NOT_PRICED_WHY = {arg: REASONS[group] for group, args in NOT_PRICED.items() for arg in args}
# arguments that take several words (nargs='+' / '*')
NARGS = {"--recompute-modules", "--cuda-graph-scope", "--data-path", "--train-data-path", "--valid-data-path",
         "--test-data-path", "--profile-ranks", "--offload-modules", "--split"}
UNKNOWN = "not an argument perfmodel knows; it may change what runs"

# the arguments Megatron-LM cannot run without (a value not read is refused naming them)
NEEDED = ("--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length", "--micro-batch-size")
# a hybrid (Mamba) model's arguments (arguments.py at d98e8a64; --hybrid-attention-ratio / -mlp-ratio at 09ca1d20)
HYBRID = ("--hybrid-layer-pattern", "--hybrid-override-pattern", "--hybrid-attention-ratio", "--hybrid-mlp-ratio",
          "--is-hybrid-model")

# torchrun's own options: the two that give the device count, and the rest
LAUNCH_COUNT = {"--nproc-per-node", "--nproc_per_node", "--nnodes"}
ENV_WHY = "an environment variable of the run: not priced"
HARNESS_WHY = "the functional-test harness's own setting (test kind, launcher, metrics): not a training setting"
FALSE_WHY = "false: the functional-test harness passes no flag, so Megatron-LM's default holds"

# cuda graphs: --cuda-graph-impl / --cuda-graph-scope values -> plan.cuda_graphs (spec.stack.release.GraphScope);
# None: per-layer or per-module graphs (Megatron-Core's CudaGraphManager, Transformer Engine's
# make_graphed_callables), which no stack profile counts the replays of (HostProfile.graphed_layer): priced eager, as
# the megatron-bridge release lines price TE module graphs (hardware_specs/stacks/releases/megatron-bridge.yaml);
# the GPU work is the same kernels, the host's launches are what the graphs save
GRAPH_IMPL = {"none": "none", "local": None, "transformer_engine": None, "full_iteration": "step"}
GRAPHS_EAGER_WHY = ("per-layer / per-module CUDA graphs: no stack profile counts their replays (HostProfile."
                    "graphed_layer), so the layers' launches are priced eager, as the release lines price Transformer "
                    "Engine module graphs; the kernels are the same, what the graphs save is host time")
# --fp8-recipe -> plan.fp8_recipe (delayed and current scaling both scale per tensor)
FP8_RECIPE = {"delayed": "tensorwise", "tensorwise": "tensorwise", "blockwise": "blockwise", "mxfp8": "mxfp8"}
# --attention-backend -> plan.attention (auto lets Transformer Engine pick a fused kernel)
ATTENTION = {"flash": "flash", "fused": "flash", "auto": "flash", "unfused": "unfused", "local": "unfused"}
# --data-parallel-sharding-strategy (Megatron-FSDP) -> plan.zero
FSDP_ZERO = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}
