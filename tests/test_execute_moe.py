"""Mixture-of-experts in the executor: MoE layers (execute.transformer.MoE) and expert parallelism
(execute.parallel.expert) train as one process does: losses over the first steps equal a single-process run of
the same seed within test_execute.LOSS_TOL, on CPU with gloo, with tiny models.

Plans of one process count share a torchrun launch (module-scoped fixtures), as in tests/test_execute.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # CI installs torch (README test command); the core install does not

from perfmodel.errors import InputError  # noqa: E402
from perfmodel.execute.run_plans import run_plans  # noqa: E402
from perfmodel.spec.model.config import ModelConfig, MoEConfig  # noqa: E402
from perfmodel.spec.plan.layout import Plan, resolve  # noqa: E402

from test_execute import CPU, LLAMA, STEPS, _check, plan_file, write_all  # noqa: E402

# Layer 0 dense, layers 1-3 MoE: 4 SwiGLU experts of width 32, top-2 of softmax scores, one shared expert.
MOE_LLAMA = ModelConfig(name="tiny-moe-llama", n_layers=4, hidden=64, n_heads=4, n_kv_heads=2, ffn_hidden=128,
                        vocab=512, max_seq_len=64, mlp="swiglu", norm="rmsnorm", position="rope",
                        moe=MoEConfig(n_experts=4, top_k=2, expert_ffn_hidden=32, n_shared_experts=1,
                                      first_dense_layers=1))
# Layers 1 and 3 MoE: 4 GeLU experts with biases, top-2 of sigmoid scores (renormalised), a router bias, tied
# embeddings and learned positions.
MOE_GPT = ModelConfig(name="tiny-moe-gpt", n_layers=4, hidden=64, n_heads=4, ffn_hidden=256, vocab=512,
                      max_seq_len=64, mlp="gelu", norm="layernorm", position="learned", tie_embeddings=True,
                      linear_bias="all", moe=MoEConfig(n_experts=4, top_k=2, expert_ffn_hidden=64, layer_freq=2,
                                                       router_scoring="sigmoid", router_bias=True,
                                                       expert_bias=True))
MODELS = {m.name: m for m in (MOE_LLAMA, MOE_GPT)}

TWO = {  # ep folded over the 2 data-parallel (or context-parallel) ranks: edp = 1
    "ep2": lambda: plan_file(MOE_LLAMA, gpus=2, ep=2),
    "ep2_accumulate": lambda: plan_file(MOE_LLAMA, gpus=2, ep=2, micro_batch=1),  # DDP no_sync, 4 micro-batches
    "ep2_gpt": lambda: plan_file(MOE_GPT, gpus=2, ep=2),
    "ep2_cp2": lambda: plan_file(MOE_LLAMA, gpus=2, cp=2, ep=2),
    "ep2_recompute_full": lambda: plan_file(MOE_LLAMA, gpus=2, ep=2, recompute="full"),
    "ep2_zero1": lambda: plan_file(MOE_GPT, gpus=2, ep=2, zero=1),
    "moe_dp2_no_ep": lambda: plan_file(MOE_LLAMA, gpus=2),  # experts replicated, reduced with the dense weights
}
FOUR = {
    "ep2_dp4": lambda: plan_file(MOE_LLAMA, gpus=4, ep=2),  # edp = 2
    "ep4_dp4": lambda: plan_file(MOE_GPT, gpus=4, ep=4, micro_batch=1),  # one expert per rank
    "ep2_pp2": lambda: plan_file(MOE_LLAMA, gpus=4, pp=2, ep=2),  # 1F1B, flat all-reduce of dense gradients
    "ep2_pp2_gpt_tied": lambda: plan_file(MOE_GPT, gpus=4, pp=2, ep=2, micro_batch=1),
    # layers 0 and 2 (both dense) on pipeline rank 0, MoE layers 1 and 3 on rank 1
    "ep2_pp2_interleaved_gpt": lambda: plan_file(MOE_GPT, gpus=4, pp=2, vpp=2, ep=2),
    "ep2_dp4_zero1": lambda: plan_file(MOE_LLAMA, gpus=4, ep=2, zero=1),  # experts' ZeRO-1 over edp
    "ep2_dp4_fsdp": lambda: plan_file(MOE_LLAMA, gpus=4, ep=2, zero=3),  # experts' FSDP2 over edp
    "ep4_dp4_fsdp": lambda: plan_file(MOE_GPT, gpus=4, ep=4, zero=2),  # experts' FSDP2 over an edp of 1
}


def reference_losses(model: ModelConfig) -> list[float]:
    """The same model, seed and data on one process (in this process: no torchrun, no process group)."""
    from perfmodel.execute.data import Batches
    from perfmodel.execute.train import Trainer

    pf = plan_file(model, gpus=1, micro_batch=8)
    trainer = Trainer(pf, torch.device("cpu"), seed=0)
    batches = Batches(model.vocab, pf.plan.global_batch, pf.plan.seq_len, seed=0)
    return [trainer.step(batches.step(i)) for i in range(STEPS)]


@pytest.fixture(scope="module")
def references():
    return {name: reference_losses(m) for name, m in MODELS.items()}


def _run(tmp_path_factory, cases, nproc):
    tmp = tmp_path_factory.mktemp(f"moe{nproc}")
    paths = write_all(tmp, {name: make() for name, make in cases.items()})
    ms = run_plans(paths, nproc, device="cpu", steps=STEPS, warmup=1, timeout_s=600)
    return dict(zip(cases, ms))


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    return _run(tmp_path_factory, TWO, 2)


@pytest.fixture(scope="module")
def four(tmp_path_factory):
    return _run(tmp_path_factory, FOUR, 4)


@pytest.mark.parametrize("name", list(TWO))
def test_two_process_moe_layouts_match_one_process(two, references, name):
    _check(two[name], references)


@pytest.mark.parametrize("name", list(FOUR))
def test_four_process_moe_layouts_match_one_process(four, references, name):
    _check(four[name], references)


def test_moe_losses_move(references):
    """The equality above is not vacuous: training changes the loss step to step, for both models."""
    for ref in references.values():
        assert len(set(round(v, 6) for v in ref)) == STEPS


# -- the model on one process -----------------------------------------------------------------------------
def _built(cfg: ModelConfig):
    from perfmodel.execute.transformer import Transformer, initial_value

    torch.manual_seed(0)
    model = Transformer(cfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(initial_value(name, tuple(p.shape), cfg, 0, "cpu"))
    return model


@pytest.mark.parametrize("cfg", [MOE_LLAMA, MOE_GPT], ids=lambda c: c.name)
def test_moe_model_has_the_configs_parameters_and_layers(cfg):
    from perfmodel.execute.transformer import MoE

    model = _built(cfg)
    assert sum(p.numel() for p in model.parameters()) == cfg.n_params()
    moe = [i for i, b in model.layers.items() if isinstance(b.mlp, MoE)]
    assert len(moe) == cfg.moe_layers() and moe == (["1", "2", "3"] if cfg is MOE_LLAMA else ["1", "3"])


def test_routing_counts_sum_to_tokens_times_top_k():
    from perfmodel.execute.transformer import MoE

    model = _built(MOE_LLAMA)
    tokens = torch.randint(0, MOE_LLAMA.vocab, (3, 16), generator=torch.Generator().manual_seed(1))
    model(tokens)
    for block in list(model.layers.values())[1:]:
        moe: MoE = block.mlp
        assert moe.counts.shape == (4,) and int(moe.counts.sum()) == 3 * 16 * 2
        x = torch.randn(48, 64, generator=torch.Generator().manual_seed(2))
        weights, ids = moe.route(x)
        assert all(len(set(row)) == 2 for row in ids.tolist())  # top-k picks distinct experts
        assert bool((weights > 0).all()) and bool((weights.sum(-1) <= 1 + 1e-6).all())


def test_expert_shards_draw_the_rows_of_the_whole_weight():
    from perfmodel.execute.transformer import initial_value

    name = "layers.1.mlp.experts.w1"
    whole = initial_value(name, (4, 32, 64), MOE_LLAMA, 0, "cpu")
    assert torch.equal(initial_value(name, (2, 32, 64), MOE_LLAMA, 0, "cpu", first_expert=2), whole[2:])
    assert not torch.equal(whole[0], whole[1])


DISPATCH = textwrap.dedent("""
    import json, os, sys
    import torch, torch.distributed as dist
    from perfmodel.execute.parallel.expert import apply_ep, expert_mesh
    from perfmodel.execute.transformer import MoE
    from perfmodel.spec.model.config import ModelConfig

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    cfg = ModelConfig(**json.loads(sys.argv[1]))
    torch.manual_seed(0)
    whole = MoE(cfg)  # the same weights on every rank
    for p in whole.parameters():
        torch.nn.init.normal_(p, std=0.1)
    mesh = expert_mesh("cpu", 1, world, world)
    moe = MoE(cfg)
    first = apply_ep(moe, mesh["ep"])
    n = cfg.moe.n_experts // world
    with torch.no_grad():
        for name, p in moe.named_parameters():
            src = dict(whole.named_parameters())[name]
            p.copy_(src[first[name]: first[name] + n] if name in first else src)
    x = torch.randn(5 + 3 * rank, cfg.hidden, generator=torch.Generator().manual_seed(rank))  # uneven per rank
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = moe(xa), whole(xb)
    (ya * ya).sum().backward()
    (yb * yb).sum().backward()
    ya, yb = ya.detach(), yb.detach()
    got = moe.dispatcher.received  # [sources, local experts] tokens this rank's experts received
    sent = torch.tensor(moe.counts.tolist())
    total_sent, total_got = sent.clone(), got.sum(0).clone()
    dist.all_reduce(total_sent)
    dist.all_reduce(total_got)  # (rank r's entries: its experts)
    full_got = [torch.zeros_like(got.sum(0)) for _ in range(world)]
    dist.all_gather(full_got, got.sum(0).contiguous())
    whole_w1 = whole.experts.w1.grad.clone()
    dist.all_reduce(whole_w1)  # an expert's gradient under ep: the sum over the tokens of every rank
    with open(f"{sys.argv[2]}/rank{rank}.json", "w") as f:  # a file per rank: torchrun interleaves stdout
        f.write(json.dumps({
        "rank": rank, "tokens": x.shape[0], "sent": sent.tolist(), "received": got.tolist(),
        "sent_all": total_sent.tolist(), "received_by_expert": torch.cat(full_got).tolist(),
        "out_diff": float((ya - yb).abs().max()), "x_grad_diff": float((xa.grad - xb.grad).abs().max()),
        "router_grad_diff": float((moe.router.weight.grad - whole.router.weight.grad).abs().max()),
        "w1_grad_diff": float((moe.experts.w1.grad - whole_w1[rank * n:(rank + 1) * n]).abs().max())}))
    dist.barrier()
    os._exit(0)  # gloo after all-to-alls: destroy_process_group now and then aborts a rank (TORCH_NOTES)
""")


def test_dispatch_counts_and_outputs_match_local_experts(tmp_path):
    """Two ranks, uneven token counts: what each rank sends sums to its tokens x top_k, each rank's experts
    receive what was sent to them, and outputs and input, router and expert gradients equal those of a rank
    that holds every expert (an expert's gradient summed over both ranks' tokens)."""
    script = tmp_path / "dispatch.py"
    script.write_text(DISPATCH)
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          str(script), MOE_GPT.model_dump_json(), str(tmp_path)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    assert len(rows) == 2
    for r in rows:
        assert sum(r["sent"]) == r["tokens"] * 2
        assert max(r["out_diff"], r["x_grad_diff"], r["router_grad_diff"], r["w1_grad_diff"]) < 1e-5, r  # fp32 sums
    for r in rows:  # what rank s sent to this rank's experts (2 of 4 each) is what this rank received from s
        for s in rows:
            mine = s["sent"][2 * r["rank"]: 2 * r["rank"] + 2]
            assert r["received"][s["rank"]] == mine
    assert rows[0]["received_by_expert"] == rows[0]["sent_all"]


GRADIENTS = textwrap.dedent("""
    import sys
    import torch, torch.distributed as dist
    from torch.distributed.tensor import DTensor
    from perfmodel.execute.parallel.checkpointing import plain_name
    from perfmodel.execute.data import Batches
    from perfmodel.execute.train import Trainer
    from perfmodel.spec.plan.file import load_plan_file

    dist.init_process_group("gloo")
    torch.set_num_threads(1)
    out = {}
    for path in sys.argv[2:]:
        pf = load_plan_file(path)
        trainer = Trainer(pf, torch.device("cpu"), seed=0)
        grads = {}

        class Record:  # in place of the optimizer: keep the gradients the step hands it, whole
            def step(self):
                for m in trainer.raw:
                    for name, p in m.named_parameters():
                        g = p.grad.full_tensor() if isinstance(p.grad, DTensor) else p.grad
                        if ".experts." in name:  # this rank's experts: gather the ep group's
                            group = trainer.experts_ep_group
                            parts = [torch.empty_like(g) for _ in range(dist.get_world_size(group))]
                            dist.all_gather(parts, g.contiguous(), group=group)
                            g = torch.cat(parts)
                        grads[plain_name(name)] = g.clone()

            def zero_grad(self, set_to_none=True):
                pass

        trainer.experts_ep_group = next(m.dispatcher.group for m in trainer.raw[0].modules()
                                        if getattr(m, "dispatcher", None) is not None)
        trainer.optimizer = Record()
        trainer.step(Batches(pf.model.vocab, pf.plan.global_batch, pf.plan.seq_len, seed=0).step(0))
        every = [None] * dist.get_world_size()
        dist.all_gather_object(every, grads)
        out[path] = {k: v for d in every for k, v in d.items()}
    if dist.get_rank() == 0:
        torch.save(out, sys.argv[1])
    dist.barrier()
    dist.destroy_process_group()
""")


def reference_gradients(model: ModelConfig) -> dict:
    """Every parameter's gradient after the first step's backward, on one process."""
    from perfmodel.execute.data import Batches
    from perfmodel.execute.train import Trainer

    pf = plan_file(model, gpus=1, micro_batch=8)
    trainer = Trainer(pf, torch.device("cpu"), seed=0)
    grads = {}

    class Record:
        def step(self):
            grads.update({n: p.grad.clone() for n, p in trainer.raw[0].named_parameters()})

        def zero_grad(self, set_to_none=True):
            pass

    trainer.optimizer = Record()
    trainer.step(Batches(model.vocab, pf.plan.global_batch, pf.plan.seq_len, seed=0).step(0))
    return grads


def test_expert_and_dense_gradients_equal_one_process(tmp_path):
    """The loss equality above cannot see a gradient off by a constant factor (AdamW normalises it away):
    every gradient the optimizer receives equals one process's, experts gathered over ep, with ep 2 x edp 2
    under DDP, under FSDP2 (experts sharded over edp) and under a pipeline (the flat all-reduce)."""
    cases = {"ddp": plan_file(MOE_LLAMA, gpus=4, ep=2), "fsdp": plan_file(MOE_LLAMA, gpus=4, ep=2, zero=3),
             "pp": plan_file(MOE_LLAMA, gpus=4, pp=2, ep=2)}
    paths = write_all(tmp_path, cases)
    script, saved = tmp_path / "gradients.py", tmp_path / "gradients.pt"
    script.write_text(GRADIENTS)
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "4",
                          str(script), str(saved), *map(str, paths)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    ref = reference_gradients(MOE_LLAMA)
    got = torch.load(saved)
    for path in paths:
        grads = got[str(path)]
        assert sorted(grads) == sorted(ref), path
        for name, g in grads.items():
            err = float((g - ref[name]).abs().max() / ref[name].abs().max().clamp_min(1e-12))
            assert err < 1e-4, (path.name, name, err)


# -- refused before launch --------------------------------------------------------------------------------
def _write_unchecked(pf, path: Path) -> Path:
    path.write_text(pf.model_dump_json(indent=2))
    return path


def test_a_dense_model_with_ep_is_refused(tmp_path):
    with pytest.raises(InputError, match=r"ep=2, etp=1: tiny-llama is a dense model \(no experts\); valid: ep=1"):
        resolve(Plan(gpus=2, ep=2, micro_batch=2, seq_len=32, global_batch=8), LLAMA, CPU)
    pf = plan_file(LLAMA, gpus=2)
    pf = pf.model_copy(update={"plan": pf.plan.model_copy(update={"ep": 2})})  # as a hand edit would
    with pytest.raises(InputError, match=r"dense model .*valid: ep=1, etp=1"):
        run_plans([_write_unchecked(pf, tmp_path / "dense_ep.json")], 2, device="cpu")


@pytest.mark.parametrize("kw, message", [
    (dict(gpus=2, etp=2), r"etp = 2 is not run by the executor .*valid: etp = 1, with ep up to dp\*cp = 2"),
    (dict(gpus=2, tp=2, ep=2, sequence_parallel=True), r"tp = 2 with the MoE model tiny-moe-llama is not run by the executor .*valid: "
                               r"tp = 1"),
])
def test_moe_layouts_the_executor_does_not_run_are_refused(tmp_path, kw, message):
    path = write_all(tmp_path, {"p": plan_file(MOE_LLAMA, **kw)})[0]
    with pytest.raises(InputError, match=message):
        run_plans([path], 2, device="cpu")


@pytest.mark.parametrize("update, message", [
    (dict(mla=dict(kv_lora_rank=16, qk_nope_head_dim=8, qk_rope_head_dim=8, v_head_dim=8)),
     r"multi-head latent attention \(mla\), which the executor does not build; valid: .*mla: null"),
    (dict(mtp_layers=1), r"mtp_layers = 1, which the executor does not build; valid: mtp_layers = 0"),
])
def test_model_features_the_executor_does_not_build_are_refused(tmp_path, update, message):
    pf = plan_file(MOE_LLAMA, gpus=2, ep=2)
    model = ModelConfig.model_validate({**pf.model.model_dump(), **update})
    with pytest.raises(InputError, match=message):
        run_plans([_write_unchecked(pf.model_copy(update={"model": model}), tmp_path / "f.json")], 2, device="cpu")


def test_the_allgather_dispatcher_is_noted():
    from perfmodel.execute.worker import plan_departures

    plan = resolve(Plan(gpus=2, ep=2, micro_batch=2, seq_len=32, global_batch=8, moe_dispatcher="allgather"),
                   MOE_LLAMA, CPU)
    assert any("(moe_dispatcher=allgather)" in n for n in plan_departures(plan, "ddp"))
    assert any("(moe_dispatcher=flex)" in n for n in plan_departures(plan.model_copy(update={"moe_dispatcher": "flex"}), "ddp"))
    assert not plan_departures(plan.model_copy(update={"moe_dispatcher": "alltoall"}), "ddp")
