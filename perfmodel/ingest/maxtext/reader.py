"""`perfmodel import --from maxtext`: MaxText's layered config read as data (base.yml, a model's YAML, a recipe's
key=value overrides in a shell script, a Kubernetes / xpk manifest or a Python benchmark recipe), the inverse of
perfmodel.export.maxtext.config: the model (model_name's perfmodel preset, checked against the decoder block's shape keys,
else the model they build: maxtext.model), the mesh (maxtext.axes), batch, remat policy, dtypes, MoE dispatch and
the TPU slice; every other key named as not priced.

Layers apply in the order the files are passed; a later layer overrides an earlier one, and within a command line
the last of a key's words wins (OmegaConf.from_cli). A model YAML key a later layer changes without
override_model_config (MaxText's own refusal, configs/pyconfig.py validate_no_keys_overridden_twice) is refused. Keys no file states take base.yml's value at
maxtext.keys.COMMIT (DEFAULTS); pass your base.yml first to read your version's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import InputError
from ...spec.model.config import ModelConfig
from ...spec.model.catalogue import load_model, preset_for_name
from ..ledger import Imported, Ledger, text_of
from .axes import OTHER_AXES, PLAN_AXES, complete, plan_fields, totals
from .files import Layer, recipe_layer, shell_layer, yaml_layer
from .settings import moe, precision, remat
from .keys import COMMIT, DEFAULTS, SHAPE, gke_devices, parameter_scales, slice_devices, unpriced
from .model import BLOCKS, MOE, UNCOUNTED, block_shape, differences, mlp_kind

__all__ = ["Config", "complete", "plan_fields", "read"]
_BASE = f"base.yml at maxtext {COMMIT[:8]}"


class Config:
    """The merged layers: each key's final value and source, what was overridden, and the keys read so far."""

    def __init__(self, layers: list[Layer], led: Ledger) -> None:
        self.led, self.final, self.done = led, {}, set()
        for layer in layers:
            seen: dict[str, Any] = {}
            for k, v in layer.items:  # a key twice on one command line: the last wins (OmegaConf.from_cli's
                if k in seen:  # merge_with_dotlist updates the config word by word)
                    led.skip(k, seen[k], layer.source, f"overridden by {k} = {text_of(v)} later in the same layer")
                seen[k] = v
            for k, v in seen.items():
                if k in self.final:
                    old, src, kind = self.final[k]
                    if kind == "model" and layer.kind == "overrides" and old != v and not seen.get(
                            "override_model_config", self.value("override_model_config")):
                        raise InputError(f"maxtext config contradicts itself: the model YAML ({src}) sets {k} = "
                                         f"{text_of(old)} but {layer.source} sets {k} = {text_of(v)}; MaxText refuses "
                                         "this (pyconfig validate_no_keys_overridden_twice); valid: one value, or "
                                         "override_model_config=true")
                    led.skip(k, old, src, f"overridden by {k} = {text_of(v)} ({layer.source})")
                self.final[k] = (v, layer.source, layer.kind)

    def value(self, key: str):
        return self.final[key][0] if key in self.final else DEFAULTS.get(key)

    def stated(self, key: str, kinds=("base", "config", "model", "overrides")) -> bool:
        return key in self.final and self.final[key][2] in kinds

    def put(self, key: str, why: str = "", **fields) -> None:
        """Record `key` (stated, else base.yml's default) as setting `fields`."""
        self.done.add(key)
        if key in self.final:
            v, src, _ = self.final[key]
            self.led.set(key, v, src, why, **fields)
        elif fields:
            self.led.default(key, DEFAULTS.get(key), (why + "; " if why else "") + _BASE, **fields)

    def skip(self, key: str, why: str) -> None:
        if key in self.final and key not in self.done:
            v, src, kind = self.final[key]
            self.led.skip(key, v, src, why)
        self.done.add(key)

    def number(self, key: str, kind=(int, float)):
        v = self.value(key)
        if isinstance(v, bool) or not isinstance(v, kind):
            where = self.final[key][1] if key in self.final else _BASE
            raise InputError(f"{key} = {text_of(v)} ({where}) is not a number; valid: a "
                             f"{'whole number' if kind is int else 'number'}")
        return v


def layers_of(paths: list[Path], name: str | None) -> tuple[list[Layer], str | None]:
    """Each file's layers in the order passed; a Python recipe module is chosen by --name or a launch script's
    --model_name."""
    out: list[tuple[int, Layer]] = []
    pending = []
    for i, p in enumerate(paths):
        suffix = p.suffix.lower()
        if suffix in (".yml", ".yaml"):
            out += [(i, ly) for ly in yaml_layer(p)]
        elif suffix == ".py":
            pending.append((i, p))
        else:
            out += [(i, ly) for ly in shell_layer(p)]
    chosen = None
    for i, p in pending:
        recipe = name or next((ly.launch["recipe"][0] for _, ly in out if "recipe" in ly.launch), None)
        layer, chosen = recipe_layer(p, recipe)
        out.append((i, layer))
    out.sort(key=lambda x: x[0])
    return [ly for _, ly in out], chosen


def read(paths: list[Path], name: str | None) -> Imported:
    layers, chosen = layers_of(paths, name)
    led = Ledger("maxtext")
    cfg = Config(layers, led)
    for ly in layers:
        for k, v in ly.launch.get("others", []):
            led.skip(k, v, ly.source, "the benchmark runner's XLA flags and Pathways settings: not priced")
    model = model_of(cfg)
    led.default("stack", "maxtext", "MaxText's stack profile (perfmodel stacks list)", plan__stack="maxtext")
    seq = cfg.number("max_target_length", int)
    cfg.put("max_target_length", plan__seq_len=seq)
    deferred = mesh(cfg, layers, model)
    precision(cfg)
    remat(cfg, model)
    moe(cfg, model)
    loose = [("num_vocab_tiling", "loss_chunks", int), ("optimizer_memory_host_offload", "optimizer_offload", bool)]
    for key, field, kind in loose:
        v = cfg.value(key)
        if not isinstance(v, kind):
            raise InputError(f"{key} = {text_of(v)}: valid: a {'whole number' if kind is int else 'true or false'}")
        cfg.put(key, **{f"plan__{field}": v})
    attn = cfg.value("attention")
    if attn not in ("autoselected", "flash", "dot_product", "cudnn_flash_te", "cudnn_flash_jax"):
        raise InputError(f"attention = {attn!r}: valid: autoselected, flash, dot_product, cudnn_flash_te")
    cfg.put("attention", plan__attention="unfused" if attn == "dot_product" else "flash")
    opt = cfg.value("opt_type")
    if opt == "adamw":
        cfg.put("opt_type", why="AdamW: the optimizer perfmodel prices (two moments)")
    cfg.skip("opt_type", f"opt_type = {opt} is not priced: perfmodel prices AdamW's two moments per parameter")
    if cfg.stated("(config file)"):
        passed = any(ly.kind == "base" for ly in layers)
        cfg.skip("(config file)", "the config the command line layers on" + (
            ": passed as a file" if passed else f": not passed, so keys no file states take {_BASE}'s values"))
    for k, (v, src, kind) in cfg.final.items():
        if k not in cfg.done:
            why = unpriced(k)
            cfg.led.skip(k, v, src, f"base.yml's default; {why}" if kind == "base" else why)
    return led.imported(paths, model, chosen or name, deferred)


def model_of(cfg: Config) -> ModelConfig:
    """model_name's perfmodel preset (preset_for_name: gemma3-27b -> gemma-3-27b), checked against the model YAML's
    shape where one is passed (its differences win: the YAML is what MaxText runs) or against each shape key a later
    layer changes; else the model the decoder block's keys build (maxtext.model)."""
    name = str(cfg.value("model_name"))
    preset = preset_for_name(name, "maxtext") if name != "default" else None
    mtp = cfg.number("mtp_num_layers", int)
    from_yaml = any(cfg.stated(k, ("model",)) for k in SHAPE)
    if preset is None:
        if name != "default" and not from_yaml:
            raise InputError(f"model_name = {name} has no perfmodel preset and no model YAML (configs/models/{name}.yml)"
                             " is among the files; valid: pass that YAML after base.yml, or a model_name with a preset "
                             "(perfmodel models list)")
        return build(cfg, name, mtp)
    m = load_model(preset)
    cfg.put("model_name", f"perfmodel preset {preset}", model__name=preset)
    scale = cfg.value("global_parameter_scale")
    if scale != 1:
        raise InputError(f"global_parameter_scale = {scale} with model_name = {name}: perfmodel reads a scale "
                         "only on base.yml's default model; valid: 1")
    cfg.put("global_parameter_scale", f"1: preset {preset}'s own size, not scaled")
    if from_yaml and cfg.value("decoder_block") in BLOCKS:
        m = against_yaml(cfg, m, preset)
    else:
        m = against_keys(cfg, m, preset, name)
    update: dict[str, Any] = {}
    drop = dropout(cfg)
    if m.dropout != drop:
        update["dropout"] = drop
    if m.mtp_layers != mtp:
        update["mtp_layers"] = mtp
    cfg.put("mtp_num_layers", "MaxText trains multi-token prediction modules only when this is set",
            model__mtp_layers=mtp)
    return m.model_copy(update=update) if update else m


def against_yaml(cfg: Config, m: ModelConfig, preset: str) -> ModelConfig:
    """The preset, with what the model YAML's decoder block builds where it differs (each key says which)."""
    s = block_shape(cfg, {})
    built = ModelConfig.parse({"name": preset, "max_seq_len": m.max_seq_len, **s.nested()},
                              where=f"decoder_block {cfg.value('decoder_block')}'s shape")
    diff = differences(m, built, s.fields)
    for key, fields in s.keys.items():
        tops = sorted({f.split(".")[0] for f in fields} & diff.keys())
        why = "; ".join(f"preset {preset} has {f} {text_of(diff[f][0])}" for f in tops) or f"agrees with preset {preset}"
        cfg.put(key, why, **{f"model__{f.replace('.', '__')}": s.fields[f] for f in fields})
    for key, why in UNCOUNTED.items():
        if cfg.stated(key, ("model", "config", "overrides")):
            cfg.skip(key, why)
    dense(cfg, s)
    return ModelConfig(**{**m.model_dump(), **built.model_dump(include=set(diff))}) if diff else m


def against_keys(cfg: Config, m: ModelConfig, preset: str, name: str) -> ModelConfig:
    """The preset with each shape key a file states over it (no model YAML, or a block perfmodel does not read)."""
    update: dict[str, Any] = {}
    for key, field in SHAPE.items():
        if not cfg.stated(key):
            continue
        if cfg.stated(key, ("base",)):
            cfg.skip(key, f"base.yml's default model shape, replaced by model_name {name}'s (perfmodel preset "
                          f"{preset})")
            continue
        want, have = shape_value(cfg, key, field), preset_value(m, field)
        if want == have:
            cfg.put(key, f"agrees with preset {preset}", **{f"model__{field.replace('.', '__')}": want})
        elif have is None and want in (1, 0, -1):
            cfg.put(key, f"unused by preset {preset}")
        elif "." in field and have is None:
            raise InputError(f"{key} = {text_of(cfg.value(key))} adds {field.split('.')[0]} to preset {preset}, "
                             f"which has none; valid: a model_name without a preset and its model YAML")
        else:
            update[field] = want
            cfg.put(key, f"preset {preset} has {have}", **{f"model__{field.replace('.', '__')}": want})
    for sub in ("moe", "mla"):
        part = {f.split(".")[1]: v for f, v in update.items() if f.startswith(sub + ".")}
        if part:
            update = {f: v for f, v in update.items() if not f.startswith(sub + ".")}
            update[sub] = getattr(m, sub).model_copy(update=part)
    cfg.skip("decoder_block", f"{name}'s decoder block: preset {preset} states its layers")
    return m.model_copy(update=update) if update else m


def dense(cfg: Config, s) -> None:
    """A dense model's MoE keys: unused (MaxText builds no MoE block with num_experts 1)."""
    if "moe.n_experts" not in s.fields:
        for k in MOE:
            cfg.skip(k, "a dense model (num_experts 1): unused")


def dropout(cfg: Config) -> float:
    """dropout_rate where enable_dropout (base.yml: true, rate 0.0)."""
    drop = float(cfg.number("dropout_rate")) if cfg.value("enable_dropout") else 0.0
    cfg.put("dropout_rate", model__dropout=drop)
    cfg.put("enable_dropout", model__dropout=drop)
    return drop


def shape_value(cfg: Config, key: str, field: str):
    v = cfg.value(key)
    if key == "mlp_activations":
        return mlp_kind(v)
    if field == "tie_embeddings":
        return bool(v)
    return v


def preset_value(m: ModelConfig, field: str):
    if "." in field:
        sub, name = field.split(".")
        part = getattr(m, sub)
        return None if part is None else getattr(part, name)
    return getattr(m, field)


def build(cfg: Config, name: str, mtp: int) -> ModelConfig:
    """A ModelConfig from the decoder block's shape keys (maxtext.model), base_* scaled by global_parameter_scale
    (types.py get_individual_scales)."""
    emb, heads, mlp_s, layers = parameter_scales(cfg.value("global_parameter_scale"))
    cfg.put("global_parameter_scale", f"x2^{emb} width, x2^{heads} heads and MLP, x2^{layers} layers")
    scale = {"base_emb_dim": emb, "base_num_query_heads": heads, "base_num_kv_heads": heads, "base_mlp_dim": mlp_s,
             "base_moe_mlp_dim": mlp_s, "base_num_decoder_layers": layers}
    s = block_shape(cfg, scale)
    for key, fields in s.keys.items():
        cfg.put(key, **{f"model__{f.replace('.', '__')}": s.fields[f] for f in fields})
    for key, why in UNCOUNTED.items():
        if cfg.stated(key, ("model", "config", "overrides")):
            cfg.skip(key, why)
    dense(cfg, s)
    drop = dropout(cfg)
    cfg.put("mtp_num_layers", model__mtp_layers=mtp)
    seq = cfg.number("max_target_length", int)
    return ModelConfig.parse({**s.nested(), "name": name if name != "default" else "maxtext-default",
                              "max_seq_len": seq, "dropout": drop, "mtp_layers": mtp,
                              "source": f"MaxText config ({', '.join(sorted({src for _, src, _ in cfg.final.values()}))})"},
                             where=f"decoder_block {cfg.value('decoder_block')}'s shape")


def launch(cfg: Config, layers: list[Layer]) -> tuple[int | None, int | None]:
    """(devices, slices) the launch states: compile_topology, a manifest's node selectors, xpk / benchmark_runner
    flags, num_slices; each sets launch.hardware / launch.gpus (two disagreeing are refused by the ledger)."""
    led, per, slices = cfg.led, None, None
    for key in ("num_slices", "compile_topology_num_slices"):
        v = cfg.value(key)
        if isinstance(v, int) and v > 0:
            cfg.put(key, f"{v} slices")
            slices = v
    topo = cfg.value("compile_topology")
    if topo:
        hw, per = slice_devices(str(topo), "compile_topology")
        cfg.put("compile_topology", f"{per} devices a slice", launch__hardware=hw)
    if cfg.value("internal_compile") and cfg.number("internal_compile_num_devices", int) > 0:
        n = cfg.value("internal_compile_num_devices")
        cfg.put("internal_compile_num_devices", launch__gpus=n)
        cfg.put("internal_compile")
    for ly in layers:
        facts = ly.launch
        if "slice" in facts:
            (name, where) = facts["slice"]
            hw, per = slice_devices(str(name), where.split(": ")[-1])
            led.set(where.split(": ")[-1], name, ly.source, f"{per} devices a slice", launch__hardware=hw)
        if "accelerator" in facts:
            topology = facts.get("topology", (None, ""))[0]
            hw, n = gke_devices(facts["accelerator"][0], topology, "cloud.google.com/gke-tpu-accelerator")
            led.set("cloud.google.com/gke-tpu-accelerator", facts["accelerator"][0], ly.source, launch__hardware=hw)
            if n:
                per = n
                led.set("cloud.google.com/gke-tpu-topology", topology, ly.source, f"{n} devices a slice")
        if "slices" in facts:
            v, where = facts["slices"]
            if not isinstance(v, int) or v < 1:
                raise InputError(f"{where} = {v!r}: valid: a whole number of slices")
            led.set(where.split(": ")[-1], v, ly.source, f"{v} slices")
            if slices is not None and slices != v:
                raise InputError(f"maxtext config contradicts itself: {slices} slices but {where} = {v}; valid: one")
            slices = v
        if "recipe" in facts:
            led.set("--model_name", facts["recipe"][0], ly.source, "the recipe chosen in the Python module")
    if per is not None:
        slices = slices or 1
        led.set("(slice x slices)", f"{per} x {slices}", "the launch", launch__gpus=per * slices)
        return per * slices, slices
    return led.get("launch.gpus"), slices


def mesh(cfg: Config, layers: list[Layer], model: ModelConfig) -> dict:
    """The ici_* / dcn_* degrees and the batch keys as plan fields now, or `deferred` for complete()."""
    count, slices = launch(cfg, layers)
    ici = {a: cfg.value(f"ici_{a}_parallelism") for a in PLAN_AXES + OTHER_AXES}
    dcn = {a: cfg.value(f"dcn_{a}_parallelism") for a in PLAN_AXES + OTHER_AXES}
    batch = {"pdbs": cfg.number("per_device_batch_size"), "gas": cfg.number("gradient_accumulation_steps", int),
             "nmb": cfg.number("num_pipeline_microbatches", int), "shard_opt": bool(cfg.value(
                 "shard_optimizer_over_data")), "layers": model.n_layers,
             "nlps": cfg.number("num_layers_per_pipeline_stage", int), "repeats": cfg.number("num_pipeline_repeats",
                                                                                             int)}
    if cfg.value("pipeline_parallel_layers") not in (-1, model.n_layers):
        raise InputError(f"pipeline_parallel_layers = {cfg.value('pipeline_parallel_layers')}: a partial pipeline "
                         "(the rest of the layers data-parallel over the stage axis) is not priced; valid: -1")
    for a in OTHER_AXES:
        for scope, degrees in (("ici", ici), ("dcn", dcn)):
            if degrees[a] != 1:
                raise InputError(f"{scope}_{a}_parallelism = {degrees[a]}: MaxText's {a} axis is not priced by "
                                 "perfmodel (no plan degree splits that way); valid: 1")
            cfg.skip(f"{scope}_{a}_parallelism", "degree 1: the axis is unused")
    t = totals({a: ici[a] for a in PLAN_AXES}, {a: dcn[a] for a in PLAN_AXES}, count, slices)
    fields = plan_fields(t, batch) if t else {}
    deferred = {} if t else {"ici": {a: ici[a] for a in PLAN_AXES}, "dcn": {a: dcn[a] for a in PLAN_AXES},
                             "slices": slices, "batch": batch}
    later = "" if t else "completed with the device count (--gpus, or the launch's slice)"
    for scope, degrees in (("ici", ici), ("dcn", dcn)):
        for a in PLAN_AXES:
            why = f"{a} axis" + (" = the rest" if degrees[a] == -1 else "") + (f"; {later}" if later else "")
            cfg.put(f"{scope}_{a}_parallelism", why,
                    **{f"plan__{f}": fields[f] for f in AXIS_FIELDS[a] if f in fields})
    cfg.put("per_device_batch_size", later or f"global_batch = devices x {batch['pdbs']:g} x "
            f"{batch['gas']} accumulation steps", **{f"plan__{f}": fields[f] for f in ("micro_batch", "global_batch")
                                                     if f in fields})
    cfg.put("gradient_accumulation_steps", "micro-batches a step", **(
        {"plan__global_batch": fields["global_batch"]} if fields else {}))
    cfg.put("shard_optimizer_over_data", "ZeRO-1 where no fsdp axis shards", **(
        {"plan__zero": fields["zero"]} if fields else {}))
    for k in ("num_pipeline_microbatches", "num_layers_per_pipeline_stage", "num_pipeline_repeats",
              "pipeline_parallel_layers"):
        cfg.put(k, "the pipeline's micro-batches and layers" if (fields.get("pp") or 1) > 1 else "no pipeline")
    if fields:
        cfg.led.set("(mesh)", f"{fields['gpus']} devices", "the ici_* x dcn_* degrees", launch__gpus=fields["gpus"])
    return deferred


AXIS_FIELDS = {"data": ("dp", "dp_replicate"), "fsdp": ("dp", "zero", "dp_replicate"),
               "fsdp_transpose": ("dp", "zero"), "expert": ("ep", "dp"), "tensor": ("tp", "sequence_parallel"),
               "tensor_sequence": ("tp", "sequence_parallel"), "context": ("cp",), "pipeline": ("pp", "schedule")}

