"""The model a Megatron-LM argument list trains: its shape arguments (dense, mixture-of-experts, latent attention,
multi-token prediction) with Megatron-LM's defaults for those left out, the vocabulary the tokenizer gives padded
as Megatron pads it, and the preset it is where one has exactly that shape (`megatron.reader` reads the rest)."""

from __future__ import annotations

import ast
import math
from pathlib import Path

from pydantic import ValidationError

from ...errors import InputError
from ...spec.model.config import MLAConfig, ModelConfig, MoEConfig
from ...spec.model.catalogue import list_models, load_model
from ..ledger import Ledger
from ...spec.model.tokenizers import tokenizer_vocab
from ..given import GIVEN, GIVEN_SOURCE, VOCAB_FLAG, used
from .keys import DROPOUT, MLA_DEFAULTS, VOCAB_DIVISOR

MODEL_ARGS = {
    "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--group-query-attention",
    "--num-query-groups", "--kv-channels", "--max-position-embeddings", "--position-embedding-type", "--swiglu",
    "--normalization", "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--add-qkv-bias",
    "--attention-dropout", "--hidden-dropout", "--vocab-size", "--make-vocab-size-divisible-by", "--num-experts",
    "--moe-router-topk", "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size", "--moe-layer-freq",
    "--moe-router-score-function", "--multi-latent-attention", "--q-lora-rank", "--kv-lora-rank", "--qk-head-dim",
    "--qk-pos-emb-head-dim", "--v-head-dim", "--mtp-num-layers"}
MOE_ONLY = ("--moe-router-topk", "--moe-ffn-hidden-size", "--moe-shared-expert-intermediate-size", "--moe-layer-freq",
            "--moe-router-score-function", "--moe-token-dispatcher-type", "--moe-expert-capacity-factor",
            "--expert-model-parallel-size", "--expert-tensor-parallel-size")
MLA_ONLY = ("--q-lora-rank", "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim")
POSITION = {"learned_absolute": "learned", "rope": "rope", "yarn": "rope", "mrope": "rope", "none": "rope"}
NORM = {"LayerNorm": "layernorm", "RMSNorm": "rmsnorm"}
# the fields compared when naming a preset (the rest, name and provenance, are not the shape)
NOT_SHAPE = {"name", "source", "mtp_acceptance", "fp8_weight_blocks"}


def number(key: str, value, kind=int):
    try:
        return kind(str(value))
    except ValueError:
        raise InputError(f"Megatron-LM argument {key} = {value!r} is not a{'n integer' if kind is int else ' number'}; "
                         f"valid: a {'whole ' if kind is int else ''}number") from None


def default_ffn(hidden: int, swiglu: bool) -> int:
    """The MLP width Megatron-LM (megatron/training/arguments.py:1327-1329 at d98e8a64) and Megatron-DeepSpeed
    (megatron/arguments.py:288-296 at 4efb479d) give a model whose --ffn-hidden-size is not stated: 4 x hidden, or
    with --swiglu two thirds of that rounded down to a multiple of 64 (the same parameter count in two matrices)."""
    return int((4 * hidden * 2 / 3) / 64) * 64 if swiglu else 4 * hidden


def layer_pattern(expr: str, n_layers: int) -> tuple[int, int]:
    """(first_dense_layers, layer_freq) of --moe-layer-freq: an integer N (Megatron makes layers 0, N, 2N, ... MoE,
    which is perfmodel's pattern only for N = 1) or a list expression of 0/1 per layer ('([0]*3+[1]*58)'), which
    must be leading dense layers then every layer_freq-th layer (spec.model.config.MoEConfig)."""
    if expr.strip().isdigit():
        if int(expr) == 1:
            return 0, 1
        raise InputError(f"--moe-layer-freq {expr}: Megatron-LM makes layers 0, {expr}, {2 * int(expr)}, ... MoE "
                         "layers, which perfmodel's MoE pattern (leading dense layers, then every layer_freq-th) does "
                         "not express; valid: 1, or a list such as ([0]*3+[1]*58)")
    try:
        bits = list_expression(ast.parse(expr.strip(), mode="eval").body)
    except (SyntaxError, ValueError):
        raise InputError(f"--moe-layer-freq {expr!r} is not a list expression perfmodel reads; valid: an integer "
                         "or lists of 0/1 joined by + and repeated by * (e.g. ([0]*3+[1]*58))") from None
    if len(bits) != n_layers or set(bits) - {0, 1}:
        raise InputError(f"--moe-layer-freq {expr!r} gives {len(bits)} entries; valid: one 0 or 1 for each of the "
                         f"{n_layers} layers")
    first = bits.index(1) if 1 in bits else n_layers
    for freq in range(1, n_layers + 1):
        if bits == [int(i >= first and (i + 1) % freq == 0) for i in range(n_layers)]:
            return first, freq
    raise InputError(f"--moe-layer-freq {expr!r}: not leading dense layers then every k-th layer, the MoE pattern "
                     "perfmodel prices; valid: e.g. ([0]*3+[1]*58)")


def list_expression(node: ast.AST) -> list[int]:
    """A list of small integers written with list literals, + and * by an integer (read, never evaluated)."""
    if isinstance(node, ast.List):
        out = [e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, int)]
        if len(out) != len(node.elts):
            raise ValueError("not integers")
        return out
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return list_expression(node.left) + list_expression(node.right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        lst, k = (node.left, node.right) if not isinstance(node.left, ast.Constant) else (node.right, node.left)
        if isinstance(k, ast.Constant) and isinstance(k.value, int) and 0 <= k.value <= 100_000:
            return list_expression(lst) * k.value
    raise ValueError("not a list expression")


VOCAB_GIVEN = f"{VOCAB_FLAG} (perfmodel's flag)"  # the ledger's key for a vocabulary the user gives


def vocabulary(opts: dict, became: dict, why: dict, stated: set[str] | None = None) -> tuple[int, int]:
    """(the tokenizer's vocabulary, the padded one the model trains): --vocab-size, else what the tokenizer names
    (spec.model.tokenizers: TikTokenizer's default size, a --tokenizer-model file or Hugging Face id, a --tokenizer-type,
    a GPT-2 vocab and merge file), else the user's --vocab-size flag (ingest.given); padded to a multiple of
    --make-vocab-size-divisible-by (128) x tp (megatron/core/tokenizers/utils/build_tokenizer.py:138)."""
    kind, model = opts.get("--tokenizer-type"), opts.get("--tokenizer-model")
    if "--vocab-size" in opts:
        raw, key = number("--vocab-size", opts["--vocab-size"]), "--vocab-size"
    else:
        names = [(kind, "--tokenizer-type")] if kind == "TikTokenizer" else []  # its size is the type's default
        names += [(model, "--tokenizer-model"), (kind, "--tokenizer-type")]
        stated = set(opts) if stated is None else stated
        if kind is None and "--vocab-file" in stated and "--merge-file" in stated:
            names.append(("GPT2BPETokenizer", "--vocab-file"))
        found = next(((tokenizer_vocab(n), k) for n, k in names if n and tokenizer_vocab(n)), None)
        if found is None and GIVEN.get().vocab_size:  # the user's flag: the tokenizer file's size
            found = (GIVEN.get().vocab_size, f"{VOCAB_FLAG} on {GIVEN_SOURCE}"), VOCAB_GIVEN
            used(VOCAB_FLAG)
        if found is None:
            raise InputError(f"{VOCAB_FLAG} is needed: the tokenizer ({kind or 'none named'}"
                             f"{', ' + model if model else ''}) does not name a vocabulary perfmodel knows; valid: "
                             f"{VOCAB_FLAG} N, the tokenizer's size (or --vocab-size N among the script's arguments)")
        (raw, source), key = found
        for k in ("--tokenizer-type", "--tokenizer-model", "--vocab-file", "--merge-file"):
            if k in opts:
                became[k] = {}
                why[k] = f"the tokenizer's {raw} tokens: {source}"
    divisor = number("--make-vocab-size-divisible-by", opts.get("--make-vocab-size-divisible-by", VOCAB_DIVISOR))
    tp = number("--tensor-model-parallel-size", opts.get("--tensor-model-parallel-size", 1))
    multiple = max(divisor, 1) * max(tp, 1)
    padded = math.ceil(raw / multiple) * multiple
    became[key] = {"model__vocab": padded}
    why[key] = (f"{raw} padded by Megatron-LM to a multiple of {divisor} x tp {tp}" if padded != raw else "")
    if "--make-vocab-size-divisible-by" in opts:
        became["--make-vocab-size-divisible-by"] = {}
        why["--make-vocab-size-divisible-by"] = f"pads the vocabulary to {padded}"
    return raw, padded


def build_model(args, opts: dict, led: Ledger, paths: list[Path], stated: set[str] | None = None
                ) -> tuple[ModelConfig, set[str]]:
    """The model of the arguments, every model argument's fate recorded in `led` (in the order given); `stated`:
    every argument the files name, those whose value is not read among them (a GPT-2 --vocab-file and --merge-file
    name the tokenizer whatever their paths)."""
    for key in ("--num-layers", "--hidden-size", "--num-attention-heads"):
        if key not in opts:
            raise InputError(f"megatron config: {key} is needed (Megatron-LM has no default); valid: {key} N")
    g = {k: opts.get(k) for k in MODEL_ARGS}
    became: dict[str, dict] = {}
    why: dict[str, str] = {}
    n, h, heads = (number(k, g[k]) for k in ("--num-layers", "--hidden-size", "--num-attention-heads"))
    became |= {"--num-layers": {"model__n_layers": n}, "--hidden-size": {"model__hidden": h},
               "--num-attention-heads": {"model__n_heads": heads}}
    swiglu = "--swiglu" in opts
    ffn = number("--ffn-hidden-size", g["--ffn-hidden-size"]) if g["--ffn-hidden-size"] else default_ffn(h, swiglu)
    became["--ffn-hidden-size"] = {"model__ffn_hidden": ffn}
    kv = heads
    if "--group-query-attention" in opts:
        kv = number("--num-query-groups", g["--num-query-groups"] or 1)
        became |= {"--group-query-attention": {}, "--num-query-groups": {"model__n_kv_heads": kv}}
    mla = None
    head_dim = number("--kv-channels", g["--kv-channels"]) if g["--kv-channels"] else None
    became["--kv-channels"] = {"model__head_dim": head_dim}
    if "--multi-latent-attention" in opts:
        d = {k: number(k, g[k]) if g[k] is not None else MLA_DEFAULTS[k] for k in MLA_DEFAULTS}
        mla = MLAConfig(q_lora_rank=d["--q-lora-rank"], kv_lora_rank=d["--kv-lora-rank"],
                        qk_nope_head_dim=d["--qk-head-dim"], qk_rope_head_dim=d["--qk-pos-emb-head-dim"],
                        v_head_dim=d["--v-head-dim"])
        head_dim = mla.qk_head_dim
        became |= {"--multi-latent-attention": {"model__head_dim": head_dim}, "--q-lora-rank": {},
                   "--kv-lora-rank": {}, "--qk-head-dim": {}, "--qk-pos-emb-head-dim": {}, "--v-head-dim": {}}
        why["--multi-latent-attention"] = (f"model.mla = {mla.model_dump()}; head_dim is the query/key width "
                                           "qk_head_dim + qk_pos_emb_head_dim")
        became.pop("--kv-channels")
        why["--kv-channels"] = "with --multi-latent-attention the heads' widths are --qk-head-dim's and --v-head-dim's"
        why["--qk-layernorm"] = "with latent attention the model counts the latents' norms"
        became["--qk-layernorm"] = {}
    position = POSITION.get(g["--position-embedding-type"] or "learned_absolute")
    if position is None:
        raise InputError(f"--position-embedding-type {g['--position-embedding-type']!r}; valid: "
                         f"{', '.join(POSITION)}")
    became["--position-embedding-type"] = {"model__position": position}
    seq = number("--seq-length", opts.get("--seq-length", 1))
    max_seq = number("--max-position-embeddings", g["--max-position-embeddings"]) if g[
        "--max-position-embeddings"] else seq
    became["--max-position-embeddings"] = {"model__max_seq_len": max_seq}
    norm = NORM.get(g["--normalization"] or "LayerNorm")
    if norm is None:
        raise InputError(f"--normalization {g['--normalization']!r}; valid: LayerNorm, RMSNorm")
    became |= {"--normalization": {"model__norm": norm}, "--swiglu": {"model__mlp": "swiglu"},
               "--untie-embeddings-and-output-weights": {"model__tie_embeddings": False}}
    bias = ("qkv" if "--add-qkv-bias" in opts else "none") if "--disable-bias-linear" in opts else "all"
    became |= {"--disable-bias-linear": {"model__linear_bias": bias}, "--add-qkv-bias": {"model__linear_bias": bias}}
    dropout = number("--hidden-dropout", g["--hidden-dropout"], float) if g["--hidden-dropout"] else (
        number("--attention-dropout", g["--attention-dropout"], float) if g["--attention-dropout"] else DROPOUT)
    became["--hidden-dropout"] = {"model__dropout": dropout}
    if g["--attention-dropout"] and number("--attention-dropout", g["--attention-dropout"], float) != dropout:
        why["--attention-dropout"] = "the model has one dropout probability, --hidden-dropout's"
    else:
        became["--attention-dropout"] = {"model__dropout": dropout}
    moe = None
    if g["--num-experts"]:
        first, freq = layer_pattern(g["--moe-layer-freq"] or "1", n)
        e_ffn = number("--moe-ffn-hidden-size", g["--moe-ffn-hidden-size"]) if g["--moe-ffn-hidden-size"] else ffn
        shared = number("--moe-shared-expert-intermediate-size", g["--moe-shared-expert-intermediate-size"]) if g[
            "--moe-shared-expert-intermediate-size"] else None
        n_shared = (shared // e_ffn if shared and shared % e_ffn == 0 else 1) if shared else 0
        scoring = g["--moe-router-score-function"] or "softmax"
        if scoring not in ("softmax", "sigmoid"):
            raise InputError(f"--moe-router-score-function {scoring!r}; valid: softmax, sigmoid")
        moe = MoEConfig(n_experts=number("--num-experts", g["--num-experts"]),
                        top_k=number("--moe-router-topk", g["--moe-router-topk"] or 2), expert_ffn_hidden=e_ffn,
                        n_shared_experts=n_shared, shared_ffn_hidden=shared, first_dense_layers=first,
                        layer_freq=freq, router_scoring=scoring)
        became |= {"--num-experts": {"model__moe": moe.model_dump()}, "--moe-router-topk": {},
                   "--moe-ffn-hidden-size": {}, "--moe-shared-expert-intermediate-size": {}, "--moe-layer-freq": {},
                   "--moe-router-score-function": {}}
    for group, flag, what in ((MOE_ONLY, "--num-experts", "a dense model"),
                              (MLA_ONLY, "--multi-latent-attention", "attention without latents")):
        if flag not in opts:
            why |= {k: f"takes effect only with {flag}: {what}" for k in group}
    if "--group-query-attention" not in opts:
        why["--num-query-groups"] = "takes effect only with --group-query-attention"
    mtp = number("--mtp-num-layers", g["--mtp-num-layers"]) if g["--mtp-num-layers"] else 0
    became["--mtp-num-layers"] = {"model__mtp_layers": mtp}
    raw, vocab = vocabulary(opts, became, why, stated)
    fields = dict(n_layers=n, hidden=h, n_heads=heads, n_kv_heads=kv, head_dim=head_dim, ffn_hidden=ffn, vocab=vocab,
                  max_seq_len=max_seq, mlp="swiglu" if swiglu else "gelu", norm=norm, position=position,
                  tie_embeddings="--untie-embeddings-and-output-weights" not in opts, linear_bias=bias,
                  dropout=dropout, moe=moe, mla=mla, mtp_layers=mtp)
    stem = paths[0].parent.name if paths[0].name == "model_config.yaml" else paths[0].stem
    try:
        model = ModelConfig(name=stem, source=f"perfmodel import --from megatron {paths[0].name}", **fields)
    except (ValidationError, ValueError) as err:
        msg = err.errors()[0]["msg"] if isinstance(err, ValidationError) else str(err)
        raise InputError(f"megatron config: the model arguments do not make a model: {msg}") from None
    model = preset_of(model, raw)
    if VOCAB_GIVEN in became:
        args = [*args, (VOCAB_GIVEN, raw, GIVEN_SOURCE)]
    for k, v, src in args:
        if k in became:
            led.set(k, "true" if v is None else v, src, why.get(k, ""), **{f: x for f, x in became[k].items()
                                                                           if x is not None})
        elif k in why:
            led.skip(k, "true" if v is None else v, src, why[k])
    return model, set(became) | set(why)


def preset_of(model: ModelConfig, raw_vocab: int) -> ModelConfig:
    """The preset with exactly this shape (its vocabulary the tokenizer's, before Megatron's padding; positions
    compared only where learned, since rotary ones have no parameters), else `model`."""
    def shape(m: ModelConfig, vocab: int) -> dict:
        d = m.model_dump(exclude=NOT_SHAPE)
        d["vocab"] = vocab
        if m.position != "learned":
            d.pop("max_seq_len")
        return d

    want = shape(model, raw_vocab)
    for name in list_models():
        preset = load_model(name)
        if shape(preset, preset.vocab) == want:
            return preset.model_copy(update={"vocab": model.vocab}) if preset.vocab != model.vocab else preset
    return model
