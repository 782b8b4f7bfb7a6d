"""The command-line flags that give one plan, shared by `perfmodel predict` and `perfmodel forecast` (and some of
them by search, import and calibrate): the flags and their names. What they give, the (model, system, resolved
plan), is read in `plan_input`."""

from __future__ import annotations

import argparse
import math
import typing

from ..spec import example
from ..spec.hardware.system import DEFAULT_HEADROOM
from ..ingest import FRAMEWORKS
from ..spec.plan.fp8_recipes import Fp8Recipe
from ..spec.plan.offload_rules import OFFLOAD_MODULES
from ..spec.plan.layout import Dispatcher, Plan, Precision
from ..spec.plan.recompute import OFFLOAD_TENSORS, RECOMPUTE_MODULES, SAVED_TENSORS, Recompute
from ..spec.stack.profile import DEFAULT_STACK, STACKS
from ..spec.stack.release import release_lines
from .argtypes import capacity_factor, integer, path, stack_name

PRECISIONS = typing.get_args(Precision)  # the plan's own list
FP8_RECIPES = typing.get_args(Fp8Recipe)
DISPATCHERS = typing.get_args(Dispatcher)
RECOMPUTES = typing.get_args(Recompute)
RECOMPUTE_METHODS = typing.get_args(Plan.model_fields["recompute_method"].annotation)
COMPILES = typing.get_args(Plan.model_fields["compile"].annotation)


def module_list(name: str, valid=RECOMPUTE_MODULES, what="module"):
    """Names of `valid` separated by commas (spaces around them are dropped, repeats kept once): Megatron-Core's
    --recompute-modules, or the names policy's --recompute-saved tensors."""
    def parse(text):
        parts = [p.strip() for p in text.split(",")]
        bad = [p for p in parts if p not in valid]
        if bad:
            raise argparse.ArgumentTypeError(f"{name} = {text!r}: {bad[0]!r} is not a {what}; valid: names "
                                             f"separated by commas, of {', '.join(valid)}")
        return list(dict.fromkeys(parts))
    return parse


def fraction(name: str, what: str):
    """A share: a finite number >= 0 and < 1 (`--headroom`)."""
    def parse(text):
        try:
            v = float(text)
        except ValueError:
            v = None
        if v is None or not math.isfinite(v) or not 0.0 <= v < 1.0:
            raise argparse.ArgumentTypeError(f"{name} = {text!r}; valid: a number >= 0 and < 1 ({what})")
        return v
    return parse


def add_plan_flags(pr: argparse.ArgumentParser) -> None:
    """The flags that give a plan (or --plan FILE): predict's, and forecast's."""
    pr.add_argument("--plan", type=path("--plan"), help="re-predict a plan file (written by search --output or "
                    "predict --save-plan); takes the place of every other input flag")
    pr.add_argument("--config", nargs="+", type=path("--config"), metavar="FILE",
                    help="price a framework's own config (with --from; as perfmodel import): takes the place of every "
                         "plan flag but --hardware, --gpus and --host, which give what it leaves to its launcher")
    pr.add_argument("--from", dest="framework", choices=list(FRAMEWORKS), help="the framework --config is written "
                                                                               "for: " + ", ".join(FRAMEWORKS))
    pr.add_argument("--name", metavar="CONFIG", help="--config: the config to read where a file defines several")
    add_given_flags(pr)
    pr.add_argument("--model", help="preset name (perfmodel models list), or path to a HF config.json or a ModelConfig YAML/JSON")
    pr.add_argument("--hardware", help="preset name (perfmodel hardware list) or path to a spec YAML")
    pr.add_argument("--host", help="price the host that launches the kernels as this one (perfmodel hardware hosts; "
                                   "or a host YAML): a cloud VM's against a DGX's, say (default: the system's own)")
    pr.add_argument("--gpus", type=integer("--gpus"))
    pr.add_argument("--tp", type=integer("--tp"))
    pr.add_argument("--pp", type=integer("--pp"))
    pr.add_argument("--dp", type=integer("--dp"), help="default: gpus / (tp*pp*cp)")
    pr.add_argument("--dp-replicate", type=integer("--dp-replicate"), metavar="R",
                    help="hybrid sharding (FSDP2 HSDP, MaxText dcn_data): ZeRO shards over dp*cp / R ranks and its "
                         "R replicas all-reduce the gradient shards; needs --zero >= 1 (default 1)")
    pr.add_argument("--cp", type=integer("--cp"), help="default 1")
    pr.add_argument("--vpp", type=integer("--vpp"), help="default 1")
    pr.add_argument("--ep", type=integer("--ep"), help="MoE expert-parallel size (default 1)")
    pr.add_argument("--etp", type=integer("--etp"), help="MoE expert tensor-parallel size (default 1)")
    pr.add_argument("--expert-imbalance", type=float, help="busiest expert's tokens / mean (default 1: balanced)")
    pr.add_argument("--moe-capacity-factor", type=capacity_factor("--moe-capacity-factor"), metavar="C",
                    help="token dropping: each expert keeps at most C x its mean share of a device's routed tokens "
                         "(Megatron-Core --moe-expert-capacity-factor); none: dropless (default, or a release's)")
    pr.add_argument("--moe-pad-to-capacity", action=argparse.BooleanOptionalAction, default=None,
                    help="with --moe-capacity-factor: pad every expert's input to its capacity (Megatron-Core "
                         "--moe-pad-expert-input-to-capacity; default off, or a release's)")
    pr.add_argument("--moe-dispatcher", choices=DISPATCHERS, help="default alltoall; flex: DeepEP / HybridEP")
    pr.add_argument("--moe-overlap", action=argparse.BooleanOptionalAction, default=None,
                    help="hide expert-parallel comm behind another micro-batch (default off; a release's recipe's)")
    pr.add_argument("--micro-batch", type=integer("--micro-batch"))
    pr.add_argument("--global-batch", type=integer("--global-batch"))
    pr.add_argument("--seq-len", type=integer("--seq-len"))
    pr.add_argument("--recompute", choices=RECOMPUTES,
                    help="activation recomputation: none (default); selective (Megatron-Core "
                         "--recompute-granularity selective, of --recompute-modules); full (whole layers); per-op "
                         "(torchtitan's per-op selective checkpointing: keeps attention and every second matmul's "
                         "outputs); names (JAX's save_only_these_names, MaxText's remat policies: keeps the layer "
                         "input and --recompute-saved)")
    pr.add_argument("--recompute-modules", type=module_list("--recompute-modules"), metavar="M1,M2",
                    help="with --recompute selective: the submodules rebuilt in the backward (Megatron-Core "
                         f"--recompute-modules), of {', '.join(RECOMPUTE_MODULES)}; default core_attn")
    pr.add_argument("--recompute-saved", type=module_list("--recompute-saved", SAVED_TENSORS, "saved tensor"),
                    metavar="T1,T2", help="with --recompute names: the layer tensors kept besides its input, of "
                    f"{', '.join(SAVED_TENSORS)} (MaxText's save_dot_except_mlp: qkv,out_proj); default none")
    pr.add_argument("--recompute-offloaded", type=module_list("--recompute-offloaded", OFFLOAD_TENSORS,
                                                              "kept tensor"), metavar="T1,T2",
                    help="with --recompute names: of the layer input and --recompute-saved, the tensors held in "
                         f"host memory (MaxText 'offload'), of {', '.join(OFFLOAD_TENSORS)}; default none")
    pr.add_argument("--activation-offload-layers", type=integer("--activation-offload-layers"), metavar="N",
                    help="Megatron-Core cpu_offloading: the first N layers hold what they save for the backward in "
                         "host memory (cpu_offloading_num_layers); pp 1, no recompute; needs a host link")
    pr.add_argument("--offload-modules", type=module_list("--offload-modules", OFFLOAD_MODULES), metavar="M1,M2",
                    help="Megatron-Core fine-grained activation offloading: what these submodules save for the "
                         f"backward held in host memory, of {', '.join(OFFLOAD_MODULES)}")
    pr.add_argument("--recompute-num-layers", type=integer("--recompute-num-layers"), metavar="N",
                    help="with --recompute full: layers per checkpointed group (uniform) or checkpointed layers "
                         "per pipeline chunk (block); Megatron-LM --recompute-num-layers (default 1: every layer)")
    pr.add_argument("--recompute-method", choices=RECOMPUTE_METHODS,
                    help="with --recompute full: Megatron-LM --recompute-method (default uniform)")
    pr.add_argument("--loss-chunks", type=integer("--loss-chunks"), metavar="N",
                    help="the LM head and loss over N chunks of a micro-batch's tokens, each chunk's logits rebuilt "
                         "in the backward (MaxText num_vocab_tiling); default 1")
    pr.add_argument("--sequence-parallel", action="store_true")
    pr.add_argument("--optimizer-offload", action="store_true",
                    help="keep the optimizer state in host memory between steps, copied to the device for the update "
                         "(MaxText optimizer_memory_host_offload); needs a system with a host link")
    pr.add_argument("--moe-dense-dispatch", action="store_true",
                    help="MoE models: MaxText's dense dispatch (sparse_matmul: false), one-hot dispatch and combine "
                         "einsums on capacity-padded buffers (--moe-capacity-factor; unset: every expert runs every "
                         "token) instead of grouped GEMMs")
    pr.add_argument("--zero", type=int, choices=[0, 1, 2, 3], help="default 0")
    pr.add_argument("--precision", choices=(*PRECISIONS, "mxfp8"),
                    help="default bf16; mxfp8: fp8 with --fp8-recipe mxfp8 (Blackwell)")
    pr.add_argument("--fp8-recipe", choices=FP8_RECIPES,
                    help="fp8's scaling: tensorwise (default; a Megatron-Bridge release on Blackwell: mxfp8), blockwise "
                         "(1x128 / 128x128), mxfp8 (Blackwell)")
    pr.add_argument("--schedule", choices=["1f1b", "interleaved", "gpipe"], help="default: interleaved if vpp > 1 else 1f1b")
    pr.add_argument("--attention", choices=["flash", "unfused"], help="default flash")
    pr.add_argument("--grad-dtype", choices=["fp32", "bf16"], help="gradient buffer and reduction dtype (default: the "
                                                                    "stack's)")
    add_state_dtype_flags(pr)
    pr.add_argument("--tp-comm-overlap", choices=["on", "off"], help="tensor-parallel all-gathers / reduce-scatters "
                    "beside the GEMMs (with sequence parallelism; default: the stack's)")
    pr.add_argument("--compile", choices=COMPILES,
                    help="torch.compile as torchtitan's [compile] components: none (default), model (each block), "
                         "model+loss (the loss too); memory only, stacks that compile (torchtitan)")
    add_compression_flags(pr, None)
    add_lora_flags(pr)
    pr.add_argument("--stack", type=stack_name(STACKS, release_lines()), metavar="STACK",
                    help=f"software stack that runs the plan (default {DEFAULT_STACK}; a release: megatron-bridge@26.08; "
                         "docs/stacks.md)")
    pr.add_argument("--no-overlap-dp-comm", action="store_true", help="data-parallel collectives do not overlap compute")
    pr.add_argument("--account-for-embedding", action="store_true",
                    help="count the embedding as a layer in the pipeline split (Megatron-LM "
                         "--account-for-embedding-in-pipeline-split)")
    pr.add_argument("--account-for-loss", action="store_true",
                    help="count the LM head and loss as a layer (Megatron-LM --account-for-loss-in-pipeline-split)")
    pr.add_argument("--first-stage-layers", type=integer("--first-stage-layers"),
                    help="layers on the first pipeline stage (Megatron-LM --decoder-first-pipeline-num-layers)")
    pr.add_argument("--last-stage-layers", type=integer("--last-stage-layers"),
                    help="layers on the last pipeline stage (Megatron-LM --decoder-last-pipeline-num-layers)")
    pr.add_argument("--headroom", type=fraction("--headroom", "share of the memory the fit test keeps free"),
                    metavar="FRACTION",
                    help="share of the allocator's room (capacity - runtime) a plan must leave free to count as "
                         f"fitting (default {DEFAULT_HEADROOM}, the model's: perfmodel.spec.hardware.system.DEFAULT_HEADROOM)")


def add_compression_flags(pr: argparse.ArgumentParser, default: str | None = "none") -> None:
    """--grad-compression and --powersgd-rank (Plan.grad_compression, cost.comm.compression): predict's and search's."""
    pr.add_argument("--grad-compression", choices=["none", "bf16", "powersgd"], default=default,
                    help="data-parallel gradients on the wire: as --grad-dtype, bf16, or PowerSGD (default none)")
    pr.add_argument("--powersgd-rank", type=integer("--powersgd-rank"), default=None if default is None else 1,
                    help="PowerSGD's rank r (default 1)")


def add_state_dtype_flags(pr: argparse.ArgumentParser) -> None:
    """--weight-dtype and --moment-dtype (Plan.weight_dtype / moment_dtype, cost.memory.states): predict's and search's."""
    pr.add_argument("--weight-dtype", choices=["fp32", "bf16"],
                    help="stored parameters: fp32 (an fp32 master exists) or bf16 (no master; MaxText weight_dtype); "
                         "default: the stack's")
    pr.add_argument("--moment-dtype", choices=["fp32", "bf16"],
                    help="Adam's m and v (MaxText mu_dtype, Megatron-Core --exp-avg-dtype); default: the stack's")


def add_lora_flags(pr: argparse.ArgumentParser) -> None:
    """--lora-rank, --lora-modules and --lora-base (Plan.lora, spec.plan.finetune): a LoRA fine-tune of a frozen base."""
    pr.add_argument("--lora-rank", type=integer("--lora-rank"), metavar="R",
                    help="fine-tune rank-R LoRA adapters on a frozen base (default: every weight trains)")
    pr.add_argument("--lora-modules", choices=["attention", "all"],
                    help="linears adapted: attention (qkv and output projections, default) or all (and the MLP)")
    pr.add_argument("--lora-base", choices=["bf16", "fp8"], help="frozen base weights stored in bf16 (default) or "
                                                                 "fp8 (Transformer Engine fp8_params)")


def add_given_flags(p: argparse.ArgumentParser) -> None:
    """The flags that give what a config's files leave out of themselves (perfmodel.ingest.given): import's,
    calibrate --config's and predict --config's."""
    p.add_argument("--script-args", metavar="'WORDS'", help="the arguments a launch script is run with ($1, $2, ...), "
                                                           "as one quoted string; without it what the script takes "
                                                           "from them is not read")
    p.add_argument("--vocab-size", type=integer("--vocab-size"), metavar="N",
                   help="the tokenizer's vocabulary, where the config names a tokenizer file whose size it does not "
                        "state (padded as the framework pads it)")


PREDICT_INPUTS = ("model", "hardware", "gpus", "tp", "pp", "micro_batch", "global_batch", "seq_len")
PLAN_FLAGS = ("model", "hardware", "gpus", "tp", "pp", "dp", "dp_replicate", "cp", "vpp", "ep", "etp",
              "expert_imbalance", "moe_capacity_factor", "moe_dispatcher", "micro_batch", "global_batch", "seq_len", "recompute",
              "recompute_modules", "recompute_saved", "recompute_offloaded", "recompute_num_layers", "recompute_method",
              "activation_offload_layers", "offload_modules", "zero", "precision", "fp8_recipe", "schedule", "attention", "grad_dtype", "weight_dtype",
              "moment_dtype", "compile", "loss_chunks", "grad_compression",
              "powersgd_rank", "stack", "first_stage_layers", "last_stage_layers", "tp_comm_overlap", "lora_rank",
              "lora_modules", "lora_base",
              "sequence_parallel", "no_overlap_dp_comm", "account_for_embedding", "account_for_loss", "moe_overlap",
              "optimizer_offload", "moe_pad_to_capacity", "moe_dense_dispatch")
VALUE_FLAGS = PLAN_FLAGS[2:PLAN_FLAGS.index("sequence_parallel")]  # the plan fields given by value


def example_flags() -> list[str]:
    """The built-in example (`spec.example`) as predict's flags."""
    out = ["--model", example.MODEL, "--hardware", example.HARDWARE]
    for k, v in example.PLAN.items():
        flag = f"--{k.replace('_', '-')}"
        out += [flag] if v is True else [flag, str(v)]
    return out


EXAMPLE = example_flags()

LAUNCH_FLAGS = ("hardware", "gpus")  # what a config leaves to its launcher
GIVEN_FLAGS = ("script_args", "vocab_size")  # what a config's files leave out of themselves (ingest.given)
