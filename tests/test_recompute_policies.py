"""The recompute policies (Plan.recompute none / selective / full / per-op, recompute_modules, recompute_num_layers,
recompute_method) through the CLI flags, the executor's activation checkpointing (execute/parallel/checkpointing.py) and
the exporters.

Executor: on CPU with tiny models, every policy trains a step to the same loss and gradients as no recompute
(bitwise here; 1e-6 allowed), parameters keep their model names (plain_name), and the policies really drop
activations: per-op keeps fewer tensors than none (saved_tensors_hooks), less activation memory after the forward
than none and more than full, and recomputes in the backward exactly the matmuls it did not save.
"""

from __future__ import annotations

import gc
import json
import weakref

import pytest

from perfmodel.cli.main import build_parser
from perfmodel.errors import InputError
from perfmodel.export.targets import export

from perfmodel.export.nearest import export_plan
from test_export import (ds_config, flag, megatron_args, megatron_not_expressed, plan_file, titan_changed,
                         titan_not_expressed, toml)
from test_export_moe import DEEPSEEK_V3, DSV3_PLAN, moe_plan_file

def call(argv: list[str]):
    """(exit code, stdout, stderr) of the CLI run in-process."""
    import contextlib
    import io

    from perfmodel.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as e:
            rc = 0 if e.code is None else e.code
    return Result(rc, out.getvalue(), err.getvalue())


class Result:
    def __init__(self, rc, out, err):
        self.rc, self.out, self.err = rc, out, err


PRED = ["predict", "--model", "gpt2-124m", "--hardware", "dgx-h100", "--gpus", "8", "--tp", "1", "--pp", "1",
        "--micro-batch", "1", "--global-batch", "8", "--seq-len", "1024", "--format", "json"]


# ---------------------------------------------------------------------------------------------------------
# CLI flags
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("extra, want", [
    (["--recompute", "per-op"], {"recompute": "per-op", "recompute_modules": None}),
    (["--recompute", "selective"], {"recompute": "selective", "recompute_modules": ["core_attn"]}),
    # resolve orders them as Megatron-Core lists them, once each
    (["--recompute", "selective", "--recompute-modules", "layernorm, mlp,core_attn,mlp"],
     {"recompute": "selective", "recompute_modules": ["core_attn", "mlp", "layernorm"]}),
    (["--recompute", "full"], {"recompute": "full", "recompute_num_layers": None, "recompute_method": "uniform"}),
    (["--recompute", "full", "--recompute-num-layers", "3", "--recompute-method", "block"],
     {"recompute": "full", "recompute_num_layers": 3, "recompute_method": "block"}),
])
def test_predict_passes_the_recompute_flags_into_the_plan(extra, want):
    r = call([*PRED, *extra])
    assert r.rc == 0, r.err
    plan = json.loads(r.out)["plan"]
    assert {k: plan[k] for k in want} == want


@pytest.mark.parametrize("extra, names", [
    (["--recompute", "partial"], ["--recompute", "partial", "per-op"]),
    (["--recompute", "selective", "--recompute-modules", "attn"], ["--recompute-modules", "attn", "core_attn"]),
    (["--recompute", "selective", "--recompute-modules", "core_attn,"], ["--recompute-modules", "core_attn,"]),
    (["--recompute", "selective", "--recompute-modules", "moe"], ["recompute_modules", "moe", "core_attn, mlp"]),
    (["--recompute-modules", "mlp"], ["recompute_modules", "recompute = none", "selective"]),
    (["--recompute", "full", "--recompute-num-layers", "0"], ["--recompute-num-layers", "0", "positive"]),
    (["--recompute", "full", "--recompute-num-layers", "13"], ["recompute_num_layers = 13", "1..12"]),
    (["--recompute", "selective", "--recompute-num-layers", "2"], ["recompute_num_layers = 2", "full"]),
    (["--recompute-method", "block"], ["recompute_method = block", "full"]),
    (["--recompute", "full", "--recompute-method", "blocks"], ["--recompute-method", "blocks", "uniform"]),
    (["--headroom", "1"], ["--headroom", "'1'", ">= 0 and < 1"]),
    (["--headroom", "-0.1"], ["--headroom", "-0.1", ">= 0 and < 1"]),
    (["--headroom", "nan"], ["--headroom", "nan"]),
])
def test_bad_recompute_and_headroom_values_are_one_line(extra, names):
    r = call([*PRED, *extra])
    lines = r.err.strip().splitlines()
    assert r.rc == 2 and len(lines) == 1 and lines[0].startswith("error:"), r.err
    for n in names:
        assert n in lines[0], (n, lines[0])


def test_headroom_is_on_the_namespace_of_predict_and_forecast():
    parser = build_parser()
    for cmd in (PRED, ["forecast", *PRED[1:-2], "--tokens", "1e9"]):
        assert parser.parse_args(cmd).headroom is None  # the model's default (spec.hardware.system.DEFAULT_HEADROOM)
        assert parser.parse_args([*cmd, "--headroom", "0.25"]).headroom == 0.25
        assert parser.parse_args([*cmd, "--headroom", "0"]).headroom == 0.0


def test_a_plan_file_takes_no_recompute_flags(tmp_path):
    path = tmp_path / "plan.json"
    assert call([*PRED, "--save-plan", str(path)]).rc == 0
    r = call(["predict", "--plan", str(path), "--recompute-num-layers", "2"])
    assert r.rc == 2 and "--recompute-num-layers" in r.err, r.err
    assert call(["predict", "--plan", str(path), "--headroom", "0.1", "--format", "json"]).rc == 0


def test_search_takes_per_op_only_when_asked():
    base = ["search", "--model", "gpt2-124m", "--hardware", "dgx-h100", "--gpus", "8", "--global-batch", "8",
            "--seq-len", "1024", "--format", "csv", "--top", "0"]
    r = call(base)
    assert r.rc == 0, r.err
    assert "per-op" not in r.out and "selective" in r.out and "full" in r.out
    r = call([*base, "--only", "recompute=per-op"])
    assert r.rc == 0, r.err
    rows = r.out.strip().splitlines()[1:]
    assert rows and all(",per-op," in row for row in rows)


# ---------------------------------------------------------------------------------------------------------
# Executor
# ---------------------------------------------------------------------------------------------------------
POLICIES = {  # name -> apply_ac(stage, *args)
    "selective": ("selective",),
    "selective-core_attn-mlp-layernorm": ("selective", ["core_attn", "mlp", "layernorm"]),
    "full": ("full",),
    "full-uniform-3": ("full", None, 3, "uniform"),
    "full-uniform-2": ("full", None, 2, "uniform"),
    "full-block-2": ("full", None, 2, "block"),
    "full-block-9": ("full", None, 9, "block"),
    "per-op": ("per-op",),
}
MOE_POLICIES = {
    "selective-moe": ("selective", ["moe"]),
    "selective-moe_act-shared_experts": ("selective", ["moe_act", "shared_experts"]),
    "selective-all": ("selective", ["core_attn", "mlp", "moe_act", "moe", "layernorm", "shared_experts"]),
    "selective-mlp-moe_act": ("selective", ["mlp", "moe_act"]),
    "full-uniform-3": ("full", None, 3, "uniform"),
    "per-op": ("per-op",),
}


def _models():
    from test_execute import GPT, LLAMA
    from test_execute_moe import MOE_GPT, MOE_LLAMA

    return {"llama": LLAMA, "gpt": GPT, "moe-llama": MOE_LLAMA, "moe-gpt": MOE_GPT}


def build(cfg, *policy):
    """One whole model (a single pipeline chunk) on CPU, checkpointed by `policy`, initialised as the executor
    does (train.initialise: by each parameter's plain name)."""
    torch = pytest.importorskip("torch")
    from perfmodel.execute.parallel.checkpointing import apply_ac
    from perfmodel.execute.transformer import Transformer
    from perfmodel.execute.train import initialise

    with torch.device("meta"):
        m = Transformer(cfg)
    apply_ac(m, *policy)
    m.to_empty(device="cpu")
    if cfg.tie_embeddings:
        m.lm_head.weight = m.embedding.tok.weight
    initialise(m, cfg, 0, torch.device("cpu"))
    if m.embedding.pos is not None:
        m.embedding.positions = torch.arange(16)
    return m


def tokens(cfg):
    torch = pytest.importorskip("torch")
    return torch.randint(0, cfg.vocab, (2, 17), generator=torch.Generator().manual_seed(1))


def loss_and_grads(cfg, *policy):
    import torch.nn.functional as F

    from perfmodel.execute.parallel.checkpointing import plain_name

    m = build(cfg, *policy)
    t = tokens(cfg)
    loss = F.cross_entropy(m(t[:, :-1]).flatten(0, 1), t[:, 1:].flatten())
    loss.backward()
    return loss.item(), {plain_name(n): p.grad for n, p in m.named_parameters()}


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models: one thread is fastest, and leaves the machine's other cores to other tests."""
    try:
        import torch
    except ImportError:
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def references():
    pytest.importorskip("torch")
    return {name: loss_and_grads(cfg, "none") for name, cfg in _models().items()}


CASES = [(m, p) for m in ("llama", "gpt") for p in POLICIES] + [(m, p) for m in ("moe-llama", "moe-gpt")
                                                                 for p in MOE_POLICIES]


@pytest.mark.parametrize("model, policy", CASES, ids=[f"{m}-{p}" for m, p in CASES])
def test_every_policy_gives_the_loss_and_gradients_of_no_recompute(references, model, policy):
    cfg = _models()[model]
    policies = MOE_POLICIES if model.startswith("moe") else POLICIES
    loss, grads = loss_and_grads(cfg, *policies[policy])
    ref_loss, ref_grads = references[model]
    assert abs(loss - ref_loss) <= 1e-6
    assert set(grads) == set(ref_grads)  # every parameter under its model name, every one with a gradient
    for name, g in ref_grads.items():
        assert grads[name] is not None and (grads[name] - g).abs().max().item() <= 1e-6, name


def _wrapped(module) -> bool:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

    return isinstance(module, CheckpointWrapper)


def test_what_each_policy_wraps():
    models = _models()
    llama, moe = models["llama"], models["moe-llama"]  # 4 layers; moe-llama: layer 0 dense, 1-3 MoE + shared
    m = build(llama, "full", None, 3, "uniform")
    assert list(m.layers) == ["0", "3"] and all(_wrapped(b) for b in m.layers.values())
    names = [n for n, _ in m.named_parameters()]
    assert "layers.0._checkpoint_wrapped_module._ac_group.2.attention.wq.weight" in names
    assert "layers.3._checkpoint_wrapped_module.attention.wq.weight" in names  # the last group: one block
    m = build(llama, "full", None, 2, "block")
    assert [_wrapped(b) for b in m.layers.values()] == [True, True, False, False]
    m = build(llama, "selective", ["core_attn", "layernorm"])
    assert all(_wrapped(b.attention.core) and _wrapped(b.norm1) and _wrapped(b.norm2) and not _wrapped(b.mlp)
               for b in m.layers.values())
    m = build(moe, "selective", ["mlp", "moe_act", "shared_experts"])
    dense, *experts = m.layers.values()
    assert _wrapped(dense.mlp) and not _wrapped(dense.attention.core)
    assert all(not _wrapped(b.mlp) and _wrapped(b.mlp.experts.act) and _wrapped(b.mlp.shared) for b in experts)
    m = build(moe, "selective", ["moe", "moe_act"])  # moe_act is inside the checkpointed MoE: not wrapped twice
    dense, *experts = m.layers.values()
    assert not _wrapped(dense.mlp)  # moe is the MoE layers' (mlp the dense ones')
    assert all(_wrapped(b.mlp) and not _wrapped(b.mlp.experts.act) for b in experts)


def test_the_executor_refuses_latent_attention_recompute_in_one_line():
    from perfmodel.execute.parallel.checkpointing import apply_ac

    pytest.importorskip("torch")
    with pytest.raises(InputError, match="mla_up_proj.*executor does not build"):
        apply_ac(build(_models()["llama"], "none"), "selective", ["core_attn", "mla_up_proj"])


def test_plain_name_drops_wrappers_and_groups():
    from perfmodel.execute.parallel.checkpointing import plain_name

    assert plain_name("layers.4._checkpoint_wrapped_module._ac_group.5.mlp.w1.weight") == "layers.5.mlp.w1.weight"
    assert plain_name("layers.2.attention.core._checkpoint_wrapped_module.x") == "layers.2.attention.core.x"
    assert plain_name("module.layers.0._checkpoint_wrapped_module._ac_group.1.norm1.weight") == \
        "module.layers.1.norm1.weight"
    assert plain_name("lm_head.weight") == "lm_head.weight"


def _forward_stats(cfg, *policy):
    """(tensors autograd saved through saved_tensors_hooks in the forward, bytes of activations alive after it:
    outputs of the forward's ops still held, weights aside), with the output still referenced."""
    torch = pytest.importorskip("torch")
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_flatten

    class Outputs(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.storages = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            self.storages += [weakref.ref(t.untyped_storage()) for t in tree_flatten(out)[0]
                              if isinstance(t, torch.Tensor)]
            return out

    m = build(cfg, *policy)
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(1) or t, lambda t: t), Outputs() as outs:
        out = m(tokens(cfg)[:, :-1])
    gc.collect()
    weights = {p.untyped_storage().data_ptr() for p in m.parameters()}
    alive = {s for s in (r() for r in outs.storages) if s is not None and s.data_ptr() not in weights}
    assert out is not None
    return len(saved), sum(s.nbytes() for s in alive)


def test_per_op_saves_fewer_tensors_than_none_and_more_than_full():
    cfg = _models()["llama"]
    saved_none, bytes_none = _forward_stats(cfg, "none")
    saved_op, bytes_op = _forward_stats(cfg, "per-op")
    saved_full, bytes_full = _forward_stats(cfg, "full")
    _, bytes_selective = _forward_stats(cfg, "selective")
    # what autograd itself saves outside the checkpointed blocks (inside them torch's checkpoint holds what it keeps)
    assert saved_op < saved_none / 4
    # the activations really held: per-op keeps the SDPA and every second matmul's outputs, full only block inputs
    assert bytes_full < bytes_op < bytes_selective < bytes_none
    assert bytes_op < 0.6 * bytes_none


def test_per_op_recomputes_exactly_the_matmuls_it_did_not_save():
    """In the backward, per-op runs no attention forward again, and of each block's seven matmuls (wq wk wv wo w1
    w3 w2) recomputes wk, wo and w3 (it saved the 1st, 3rd, 5th and 7th); full reruns the attention too."""
    torch = pytest.importorskip("torch")
    import torch.nn.functional as F
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.ops = {}

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops[func] = self.ops.get(func, 0) + 1
            return func(*args, **(kwargs or {}))

    def backward_ops(policy):
        cfg = _models()["llama"]
        m = build(cfg, policy)
        t = tokens(cfg)
        loss = F.cross_entropy(m(t[:, :-1]).flatten(0, 1), t[:, 1:].flatten())
        with Count() as c:
            loss.backward()
        return c.ops

    aten = torch.ops.aten
    sdpa = aten._scaled_dot_product_flash_attention_for_cpu.default
    none, op, full = backward_ops("none"), backward_ops("per-op"), backward_ops("full")
    assert none.get(sdpa, 0) == op.get(sdpa, 0) == 0 and full[sdpa] == 4
    assert op[aten.mm.default] - none[aten.mm.default] == 3 * 4  # 4 layers
    assert full[aten.mm.default] - none[aten.mm.default] == 6 * 4  # all but w2, whose output nothing needs


@pytest.mark.parametrize("plan, wrappers", [
    ({"recompute": "per-op"}, 4),  # the 4 blocks
    ({"recompute": "selective", "recompute_modules": ["mlp", "layernorm"]}, 12),  # 4 MLPs, 8 norms
    ({"recompute": "full", "recompute_num_layers": 2}, 2),  # 2 groups of 2 blocks
    ({"recompute": "full", "recompute_num_layers": 1, "recompute_method": "block"}, 1),  # the first block
], ids=lambda p: str(p))
def test_the_trainer_runs_the_plan_policy(plan, wrappers):
    """train.Trainer hands the plan's policy to apply_ac: two steps give no recompute's losses."""
    torch = pytest.importorskip("torch")
    from perfmodel.execute.data import Batches
    from perfmodel.execute.train import Trainer
    from test_execute import LLAMA, plan_file as exec_plan_file

    def losses(**kw):
        pf = exec_plan_file(LLAMA, gpus=1, micro_batch=4, **kw)
        trainer = Trainer(pf, torch.device("cpu"), seed=0)
        batches = Batches(LLAMA.vocab, pf.plan.global_batch, pf.plan.seq_len, seed=0)
        return trainer, [trainer.step(batches.step(i)) for i in range(2)]

    _, want = losses()
    trainer, got = losses(**plan)
    assert max(abs(a - b) for a, b in zip(got, want)) <= 1e-6
    assert sum(_wrapped(x) for x in trainer.raw[0].modules()) == wrappers


def test_policies_under_parallelism_train_as_one_process(tmp_path):
    """One 2-process launch: per-op under tensor + sequence parallelism (DTensor ops, functional reduce-scatters
    in the policy), uniform groups under FSDP2 (a group is one FSDP unit), block under a pipeline, and per-op over
    FSDP2 units nested in the blocks (the experts' own, under expert parallelism: profiler markers the recompute
    enters more often than the forward). Losses as one process's within test_execute.LOSS_TOL."""
    pytest.importorskip("torch")
    from perfmodel.execute.run_plans import run_plans
    from test_execute import LLAMA, LOSS_TOL, plan_file as exec_plan_file, reference_losses, write_all
    from test_execute_moe import MOE_LLAMA

    cases = {"tp_sp_per_op": exec_plan_file(LLAMA, gpus=2, tp=2, sequence_parallel=True, recompute="per-op"),
             "fsdp_uniform2": exec_plan_file(LLAMA, gpus=2, zero=3, recompute="full", recompute_num_layers=2),
             "pp_block1": exec_plan_file(LLAMA, gpus=2, pp=2, recompute="full", recompute_num_layers=1,
                                         recompute_method="block"),
             "moe_ep2_fsdp_per_op": exec_plan_file(MOE_LLAMA, gpus=2, ep=2, zero=3, recompute="per-op"),
             "moe_ep2_selective": exec_plan_file(MOE_LLAMA, gpus=2, ep=2, recompute="selective",
                                                 recompute_modules=["mlp", "moe_act", "shared_experts"])}
    got = run_plans(write_all(tmp_path, cases), 2, device="cpu", steps=2, warmup=1, timeout_s=600,
                    echo=lambda line: None)
    refs = {cfg.name: reference_losses(cfg) for cfg in (LLAMA, MOE_LLAMA)}
    for (name, pf), m in zip(cases.items(), got):
        want = refs[pf.model.name]
        assert max(abs(a - b) for a, b in zip(m.losses, want)) <= LOSS_TOL, (name, m.losses, want)


# ---------------------------------------------------------------------------------------------------------
# Exports
# ---------------------------------------------------------------------------------------------------------
LLAMA8 = dict(model="llama-3-8b", gpus=16, tp=2, micro_batch=2, global_batch=64, seq_len=4096)


def _megatron(**plan):
    """`perfmodel export --to megatron`: the text, its arguments, and what it notes or changed in the plan."""
    text = export_plan(plan_file(**{**LLAMA8, **plan}), "megatron")
    changed = [line.split("runs: ", 1)[1] for line in text.splitlines() if line.startswith("# Plan changed")]
    return text, megatron_args(text), megatron_not_expressed(text) + changed


def test_megatron_selective_writes_its_module_list():
    text, args, notes = _megatron(recompute="selective", recompute_modules=["layernorm", "mlp"])
    assert flag(args, "--recompute-granularity") == "selective"
    assert flag(args, "--recompute-modules") == "mlp layernorm"
    assert flag(args, "--recompute-method") is None and flag(args, "--recompute-num-layers") is None
    assert "--recompute-modules mlp layernorm (Megatron-Core TransformerConfig.recompute_modules, core_r0.12 and " \
           "later)" in text
    assert notes == []
    _, args, _ = _megatron(recompute="selective")
    assert flag(args, "--recompute-modules") == "core_attn"


def test_megatron_full_writes_method_and_layers():
    _, args, notes = _megatron(recompute="full", recompute_num_layers=4, recompute_method="block")
    assert (flag(args, "--recompute-granularity"), flag(args, "--recompute-method"),
            flag(args, "--recompute-num-layers")) == ("full", "block", "4")
    _, args, _ = _megatron(recompute="full", recompute_num_layers=2)
    assert (flag(args, "--recompute-method"), flag(args, "--recompute-num-layers")) == ("uniform", "2")
    _, args, _ = _megatron(recompute="full")
    assert (flag(args, "--recompute-method"), flag(args, "--recompute-num-layers")) == ("uniform", "1")
    assert flag(args, "--recompute-modules") is None and notes == []


def test_megatron_per_op_becomes_selective_with_a_note():
    _, args, notes = _megatron(recompute="per-op", zero=1)  # zero 1: the changed plan must fit to be exported
    assert flag(args, "--recompute-granularity") == "selective" and flag(args, "--recompute-modules") == "core_attn"
    assert [n for n in notes if n.startswith("recompute per-op -> selective [core_attn]")], notes


def test_megatron_fp8_with_norm_recompute_is_noted():
    _, _, notes = _megatron(recompute="selective", recompute_modules=["layernorm"], precision="fp8", zero=1)
    assert any(n.startswith("recompute_modules ['layernorm'] -> ['core_attn']") and "precision (fp8)" in n
               for n in notes), notes


def test_megatron_shared_experts_names_its_release():
    text = export(moe_plan_file(DEEPSEEK_V3, **{**DSV3_PLAN, "recompute": "selective",
                                                "recompute_modules": ["moe_act", "shared_experts"]}), "megatron")
    assert flag(megatron_args(text), "--recompute-modules") == "moe_act shared_experts"
    assert "shared_experts core_r0.14 and later" in text
    assert flag(megatron_args(text), "--moe-grouped-gemm") == ""  # what moe_act needs


def _titan(**plan):
    """`perfmodel export --to torchtitan --version 0.2.2`: its activation_checkpoint table, what it notes or changed
    in the plan, and the text."""
    text = export_plan(plan_file(**{**LLAMA8, **plan}), "torchtitan", "0.2.2")
    return toml(text)["activation_checkpoint"], titan_not_expressed(text) + titan_changed(text), text


@pytest.mark.parametrize("plan, ac, noted", [
    ({"recompute": "none"}, {"mode": "none"}, None),
    ({"recompute": "per-op"}, {"mode": "selective", "selective_ac_option": "op"}, None),
    ({"recompute": "selective"}, {"mode": "selective", "selective_ac_option": "op"},
     "recompute selective (core_attn) -> per-op"),
    ({"recompute": "selective", "recompute_modules": ["core_attn", "mlp"]},
     {"mode": "selective", "selective_ac_option": "op"}, "recompute selective (core_attn, mlp) -> per-op"),
    ({"recompute": "full"}, {"mode": "full"}, None),
    ({"recompute": "full", "recompute_num_layers": 4}, {"mode": "full"}, "recompute_num_layers 4 -> 1 (uniform)"),
    # 32 layers in one chunk, the first 8 recomputed: every 4th block, the same count
    ({"recompute": "full", "recompute_num_layers": 8, "recompute_method": "block"},
     {"mode": "selective", "selective_ac_option": "4"}, None),
    ({"recompute": "full", "recompute_num_layers": 5, "recompute_method": "block"}, {"mode": "full"},
     "recompute block 5 -> every block"),
    ({"recompute": "full", "recompute_num_layers": 32, "recompute_method": "block"}, {"mode": "full"}, None),
])
def test_torchtitan_activation_checkpoint(plan, ac, noted):
    got, notes, text = _titan(**plan)
    assert got == ac
    rc_notes = [n for n in notes if n.startswith("recompute")]
    if noted is None:
        assert rc_notes == [], notes
    else:
        assert len(rc_notes) == 1 and rc_notes[0].startswith(noted), notes
    if plan.get("recompute_num_layers") == 4:
        assert "not 4 consecutive blocks as one" in rc_notes[0]


def test_torchtitan_block_recompute_per_pipeline_chunk():
    # 32 layers over pp 4: chunks of 8, the first 2 recomputed = every 4th
    got, notes, _ = _titan(**{**LLAMA8, "gpus": 16, "tp": 2, "pp": 4, "micro_batch": 1, "recompute": "full",
                              "recompute_num_layers": 2, "recompute_method": "block"})
    assert got == {"mode": "selective", "selective_ac_option": "4"}
    assert not [n for n in notes if n.startswith("recompute")]


@pytest.mark.parametrize("plan, start, section", [
    ({"recompute": "per-op"}, "recompute=per-op", False),
    ({"recompute": "selective", "recompute_modules": ["mlp"]}, "recompute=selective", False),
    ({"recompute": "full", "recompute_num_layers": 2}, "recompute=full with recompute_method=uniform", True),
    ({"recompute": "full", "recompute_num_layers": 2, "recompute_method": "block"},
     "recompute=full with recompute_method=block", True),
    ({"recompute": "full"}, "recompute=full: the activation_checkpointing section", True),
])
def test_deepspeed_notes_every_policy(plan, start, section):
    cfg = ds_config(plan_file(**{**LLAMA8, **plan}))
    assert ("activation_checkpointing" in cfg) == section
    hits = [n for n in cfg["_perfmodel_not_expressed"] if n.startswith(start)]
    assert len(hits) == 1, cfg["_perfmodel_not_expressed"]
    if plan.get("recompute_modules"):
        assert "recompute_modules mlp" in hits[0]
