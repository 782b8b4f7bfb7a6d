"""torchtitan 0.3.0's Python config: a module whose function `perfmodel_plan` returns torchtitan/trainer.py
Trainer.Config, loaded by torchtitan/config/manager.py ConfigManager (`--module perfmodel_plan --config
perfmodel_plan`: the module is imported by its dotted name, the function called, tyro applies CLI overrides and
Trainer.Config.__post_init__ validates). Model, parallelism, training and activation checkpointing are config
objects: ModelSpec from the family's model_registry (torchtitan/models/<family>/__init__.py), ParallelismConfig
and TrainingConfig (torchtitan/config/configs.py), FullAC / SelectiveAC (torchtitan/distributed/
activation_checkpoint.py); fp8 is the Float8LinearConverter passed to model_registry (components/quantization/
float8.py)."""

from __future__ import annotations

from ...spec.plan.file import PlanFile
from ..plan_facts import not_expressed_comments, prediction, summary

FUNCTION = "perfmodel_plan"  # the config function; the file is saved as perfmodel_plan.py
_AC = {"none": "None", "full": "FullAC.Config()", "op": "SelectiveAC.Config()"}


def render(pf: PlanFile, s, changes: list[str]) -> str:
    """The Python module text of Settings `s` (perfmodel.export.torchtitan.config.settings)."""
    head = [f'"""torchtitan 0.3.0 config module (torchtitan/trainer.py Trainer.Config) for: {summary(pf)}',
            "",
            f"{prediction(pf)}",
            f"Launch: save as {FUNCTION}.py on PYTHONPATH, then torchrun --nproc-per-node {s.per_node} --nnodes "
            f"{s.nodes} --node-rank $NODE_RANK --rdzv-endpoint $MASTER_ADDR:29500 -m torchtitan.train --module "
            f"{FUNCTION} --config {FUNCTION}",
            "Not part of the plan (add your own): optimizer, lr_scheduler, dataloader, hf_assets_path, checkpoint, "
            + ("" if s.compile else "compile, ") + 'training.steps."""',
            *[f"# Plan changed for torchtitan 0.3.0 (then re-predicted): {c}" for c in changes],
            *[f"# {c}" for c in s.comments + _comments(pf, s)],
            *not_expressed_comments("torchtitan 0.3.0", s.notes),
            ""]
    return "\n".join(head + _imports(s) + _flavor(pf, s) + _function(pf, s)) + "\n"


def _comments(pf: PlanFile, s) -> list[str]:
    out = []
    if s.fp8:
        out.append("fp8: Float8LinearConverter in model_registry(converters=...) (torchtitan 0.3.0; 0.2.x: "
                   "converters = [\"quantize.linear.float8\"]); all-gathers stay bf16 as in the plan")
    if _cuda_graphs_refused(pf):
        out.append("disable_cuda_graphs = True: Trainer.Config refuses CUDA graphs with pipeline parallelism and "
                   "with the standard expert-parallel token dispatcher")
    return out


def _cuda_graphs_refused(pf: PlanFile) -> bool:
    """Trainer.Config.__post_init__ refuses CUDA graphs (on by default) with pipeline parallelism and with the
    standard expert-parallel token dispatcher."""
    return pf.plan.pp > 1 or pf.plan.ep > 1


def _imports(s) -> list[str]:
    lines = ["import dataclasses", ""] if s.custom_shape else []
    lines += ["from torchtitan.components.loss import "
              f"{'ChunkedLossWrapper, ' if s.loss_chunks > 1 else ''}CrossEntropyLoss"]
    if s.fp8:
        lines.append("from torchtitan.components.quantization import Float8LinearConverter")
    lines += [f"from torchtitan.config import {'CompileConfig, ' if s.compile else ''}ParallelismConfig, TrainingConfig"]
    if s.ac in ("full", "op"):
        lines.append(f"from torchtitan.distributed.activation_checkpoint import "
                     f"{'FullAC' if s.ac == 'full' else 'SelectiveAC'}")
    lines += [f"from torchtitan.models import {s.name}",
              "from torchtitan.models.common.config_utils import decoder_vocab_size",
              "from torchtitan.trainer import Trainer", ""]
    return lines


def _flavor(pf: PlanFile, s) -> list[str]:
    """A flavor with the plan's sizes, built as torchtitan's own llama3 flavors are (models/llama3/__init__.py:
    _8b and siblings; _build_llama3_layers and _output_linear_init are that module's helpers)."""
    if not s.custom_shape:
        return []
    m = pf.model
    return ["",
            "def _perfmodel_flavor(attn_backend: str, tp_gemm_backend: str = \"default\"):",
            f'    """The plan\'s model sizes on llama3 flavor {s.flavor}\'s layout (init, RoPE scaling)."""',
            f"    base = llama3.llama3_configs[{s.flavor!r}](attn_backend=attn_backend, "
            "tp_gemm_backend=tp_gemm_backend)",
            f"    dim, vocab = {m.hidden}, {m.vocab}",
            f"    rope = dataclasses.replace(base.layers[0].attention.rope, dim={m.head_dim})",
            "    return dataclasses.replace(",
            "        base, dim=dim, vocab_size=vocab,",
            "        tok_embeddings=dataclasses.replace(base.tok_embeddings, num_embeddings=vocab, embedding_dim=dim),",
            "        norm=dataclasses.replace(base.norm, normalized_shape=dim),",
            "        lm_head=dataclasses.replace(base.lm_head, in_features=dim, out_features=vocab,",
            "                                    param_init=llama3._output_linear_init(dim)),",
            f"        layers=llama3._build_llama3_layers(n_layers={m.n_layers}, dim=dim, n_heads={m.n_heads}, "
            f"n_kv_heads={m.n_kv_heads}, hidden_dim={m.ffn_hidden},",
            "                                           rope=rope, attn_backend=attn_backend, "
            "tp_gemm_backend=tp_gemm_backend))",
            "",
            "",
            'llama3.llama3_configs["perfmodel"] = _perfmodel_flavor',
            ""]


def _function(pf: PlanFile, s) -> list[str]:
    p = pf.plan
    flavor = "perfmodel" if s.custom_shape else s.flavor
    converters = ", converters=[Float8LinearConverter.Config()]" if s.fp8 else ""
    training = dict(s.training)
    if _cuda_graphs_refused(pf):
        training["disable_cuda_graphs"] = True
    parallelism = dict(s.parallelism)
    if p.tp > 1:
        parallelism["enable_sequence_parallel"] = p.sequence_parallel
    return ["",
            f"def {FUNCTION}() -> Trainer.Config:",
            f"    model_spec = {s.name}.model_registry({flavor!r}{converters})",
            "    return Trainer.Config(",
            "        model_spec=model_spec,",
            *_loss(s.loss_chunks),
            *_call("training", "TrainingConfig", training),
            *_call("parallelism", "ParallelismConfig", parallelism),
            f"        activation_checkpoint={_AC[s.ac] if s.ac in _AC else 'FullAC.Config()'},",
            *([f"        compile=CompileConfig(enable=True, components={s.compile!r}),"] if s.compile else []),
            "    )"]


def _loss(chunks: int) -> list[str]:
    """The loss: the LM head and loss over `chunks` chunks of the tokens (torchtitan 0.3.0 components/loss.py
    ChunkedLossWrapper, whose num_chunks defaults to 8, so it is always written), or in one piece."""
    ce = "CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(model_spec))"
    if chunks == 1:
        return [f"        loss={ce},"]
    return ["        loss=ChunkedLossWrapper.Config(", f"            num_chunks={chunks}, loss_fn={ce}),"]


def _call(key: str, cls: str, values: dict) -> list[str]:
    lines = [f"        {key}={cls}("]
    for k, v in values.items():
        if isinstance(v, list) and v and isinstance(v[0], list):
            lines += [f"            {k}=[", *[f"                {part!r}," for part in v], "            ],"]
        else:
            lines.append(f"            {k}={v!r},")
    return lines + ["        ),"]
