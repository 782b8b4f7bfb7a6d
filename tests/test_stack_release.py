"""Release lines (spec.stack.release): `--stack megatron-bridge@VERSION` fills a MoE plan's unset fields from the
release's recipe; the user's own fields win; the graphed step prices no host launches inside it."""

import pytest

from perfmodel.cli.main import main
from perfmodel.cost.layouts import Layouts
from perfmodel.cost.host.launch_queue import host_rates, layer_calls
from perfmodel.errors import InputError
from perfmodel.spec.stack.frameworks import stack_for_framework
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.plan.layout import Plan, resolve
from perfmodel.spec.stack.profile import load_stack
from perfmodel.spec.stack.release import load_line, profile_of, release_lines, release_recipe

QWEN = dict(gpus=8, ep=8, micro_batch=8, global_batch=512, seq_len=4096, precision="fp8")


def plan_on(stack, system="gb300-nvl72", model="qwen3-30b-a3b", **kw):
    return resolve(Plan(**{**QWEN, **kw}, stack=stack), load_model(model), load_hardware(system))


def test_the_line_lists_the_containers_and_the_bare_name_is_the_newest():
    line = load_line("megatron-bridge")
    assert [r.version for r in line.releases] == ["25.09", "25.11", "26.02", "26.02.01", "26.04", "26.04.01",
                                                  "26.06", "26.06.01", "26.08"]
    assert line.release(None).version == "26.08"
    assert profile_of("megatron-bridge@25.11") == "megatron-core"
    assert load_stack("megatron-bridge@26.08") is load_stack("megatron-core")
    # every recipe cites its file; the last one of each release is Megatron-Core's own defaults
    for r in line.releases:
        assert all(x.source for x in r.recipes)
        assert (r.recipes[-1].moe_dispatcher, r.recipes[-1].moe_overlap, r.recipes[-1].cuda_graphs) == \
            ("alltoall", False, "none")


def test_a_release_fills_what_the_plan_leaves_unset():
    # 26.08 Qwen3 MXFP8 on GB300: HybridEP, EP overlap, full-iteration graphs (perf_recipes/qwen/common.py)
    p = plan_on("megatron-bridge@26.08")
    assert (p.moe_dispatcher, p.moe_overlap, p.cuda_graphs, p.recompute) == ("flex", True, "step", "none")
    # 26.04: HybridEP, no overlap, no full-iteration graphs; 25.09: alltoall
    p = plan_on("megatron-bridge@26.04")
    assert (p.moe_dispatcher, p.moe_overlap, p.cuda_graphs) == ("flex", False, "none")
    assert plan_on("megatron-bridge@25.09").moe_dispatcher == "alltoall"
    # GPT-OSS bf16 on H100 in 26.04: selective recompute of layernorm and moe_act
    p = plan_on("megatron-bridge@26.04", "dgx-h100", "gpt-oss-120b", precision="bf16", pp=4, gpus=64)
    assert p.recompute == "selective" and sorted(p.recompute_modules) == ["layernorm", "moe_act"]


def test_the_users_fields_win_and_overlap_needs_a_layout_that_runs_it():
    p = plan_on("megatron-bridge@26.08", moe_dispatcher="alltoall", moe_overlap=False, cuda_graphs="none")
    assert (p.moe_dispatcher, p.moe_overlap, p.cuda_graphs) == ("alltoall", False, "none")
    # pp > 1 without virtual stages: Megatron-Core runs no EP overlap there, so the recipe's is dropped
    p = plan_on("megatron-bridge@26.08", pp=2, gpus=16)
    assert p.moe_overlap is False and p.moe_dispatcher == "flex"
    # a dense model keeps the plan's (the recipes are MoE recipes)
    d = resolve(Plan(gpus=8, micro_batch=1, global_batch=8, seq_len=2048, stack="megatron-bridge@26.08"),
                load_model("llama-3-8b"), load_hardware("dgx-h100"))
    assert (d.moe_dispatcher, d.moe_overlap, d.cuda_graphs) == ("alltoall", False, None)


def test_a_model_without_a_recipe_gets_megatron_cores_defaults():
    release, r = release_recipe("megatron-bridge@26.08", "mixtral-8x22b", "GB300", "fp8")
    assert release.version == "26.08" and (r.moe_dispatcher, r.moe_overlap, r.cuda_graphs) == ("alltoall", False, "none")
    assert release_recipe("megatron-core", "qwen3-30b-a3b", "GB300", "fp8") is None


def test_full_iteration_graphs_launch_nothing_inside_the_step():
    model, system = load_model("qwen3-30b-a3b"), load_hardware("gb300-nvl72")
    eager, graphed = plan_on("megatron-bridge@26.04"), plan_on("megatron-bridge@26.08")
    stack = load_stack("megatron-core")
    r_e = host_rates(system, stack, Layouts.from_plan(eager), model)
    r_g = host_rates(system, stack, Layouts.from_plan(graphed), model)
    assert max(r_e.op_f.values()) > 0 and set(r_g.op_f.values()) == {0.0} and set(r_g.op_b.values()) == {0.0}
    # one replay per micro-batch and pass; HybridEP's eager dispatch reads its token count on the host, the graphed
    # step's does not (megatron/core/transformer/moe/fused_a2a.py)
    assert r_g.micro_batch_f == pytest.approx(system.host_cpu.calls.graph_replay_s + r_e.micro_batch_f)
    assert r_e.moe_sync_s > 0 and r_g.moe_sync_s == 0.0
    assert layer_calls(stack, model, "none", "step") == ({}, {})
    # alltoall synchronises in its forward unless the whole step is one graph
    a2a = Layouts.from_plan(plan_on("megatron-bridge@26.08", moe_dispatcher="alltoall", cuda_graphs="none"))
    a2a_g = Layouts.from_plan(plan_on("megatron-bridge@26.08", moe_dispatcher="alltoall"))
    assert host_rates(system, stack, a2a, model).moe_sync_s > 0 and host_rates(system, stack, a2a_g, model).moe_sync_s == 0


def test_bad_releases_and_graph_scopes_are_refused():
    with pytest.raises(InputError, match=r"megatron-bridge@27.01: no such release; valid: megatron-bridge@25.09"):
        plan_on("megatron-bridge@27.01")
    with pytest.raises(InputError, match="cuda_graphs = layer with stack = 'megatron-core'"):
        plan_on("megatron-core", cuda_graphs="layer")


@pytest.mark.parametrize("cell,stack", [
    ("NeMo 26.04.01 container (Megatron-Bridge / Megatron-Core)", "megatron-bridge@26.04.01"),
    ("NeMo 26.08 container (Megatron-Bridge / Megatron-Core)", "megatron-bridge@26.08"),
    ("NeMo 26.03 container", "megatron-bridge@26.02.01"),  # no such release: the newest before it
    ("NeMo 27.02 container", "megatron-bridge@26.08"),
    ("Megatron-Bridge 600d069b + Megatron-Core 24bad8e6 (2026-08-12 study)", "megatron-bridge"),
    ("NeMo 25.07 container", "nemo2@25.07"),  # NeMo 2, before Megatron-Bridge's first release
    ("NeMo 25.05", "nemo2@25.04"), ("NeMo 2.2.1", "nemo2@25.02"),
    ("NeMo 2.5.0rc0 (patched)/Megatron-core, PyTorch 2.8.0.dev+rocm7.0.0", "nemo2@25.07"),
    ("NeMo/Megatron-core, PyTorch 2.6.0 ROCm 6.4 (MLPerf v5.0)", "nemo2"),
    ("MangoBoost LLMBoost 1.2.0", "nemo2"),
    ("NeMo/Megatron-Core (MLPerf Training v3.1, eos-dfw_n1024_ngc23.09_nemo)", "nemo"),
    ("NeMo-Megatron (2023, ~NeMo 23.05/23.07)", "nemo"), ("NeMo 24.12", "nemo"), ("NeMo 1.23.0", "nemo"),
    # container spellings: an image tag, the word container between, a patch container
    ("nvcr.io/nvidia/nemo:24.07", "nemo"), ("nvcr.io/nvidia/nemo:25.11.01", "megatron-bridge@25.11"),
    ("NeMo container 25.09", "megatron-bridge@25.09"), ("nemo:25.02", "nemo2@25.02"),
    ("NeMo Framework 25.04", "nemo2@25.04"),
    # NeMo 2.x named beside a 24.xx container: the 24.09 / 24.12 containers ship NeMo 2.0 / 2.1 too
    ("NeMo 24.09 (NeMo 2.0)", "nemo2@25.02"), ("NeMo 2.1.0", "nemo2@25.02"),
    # names that only look alike: Nemotron is a model, a bridge is not Megatron-Bridge; NeMo-Megatron is NeMo 1.x
    ("Nemotron recipe (Megatron-LM)", "megatron-core"), ("Megatron-DeepSpeed (bridge)", "deepspeed"),
    ("NVIDIA NeMo Megatron", "nemo"),
    # a Megatron-Bridge tag names its release; an unknown one the newest
    ("Megatron-Bridge v0.2.0", "megatron-bridge@25.11"), ("Megatron-Bridge v0.1.0rc3", "megatron-bridge@25.09"),
    ("Megatron-Bridge v9.9.9", "megatron-bridge")])
def test_one_mapping_names_each_nemo_cells_stack(cell, stack):
    """The mapping of docs/stacks.md: NeMo 1.x -> nemo, NeMo 2 -> nemo2 (over megatron-core), Bridge containers ->
    their release."""
    assert stack_for_framework(cell) == stack


def test_cli_lists_shows_and_predicts_a_release(capsys):
    assert main(["stacks", "list"]) == 0
    out = capsys.readouterr().out
    assert "megatron-bridge  release line over megatron-core (bare megatron-bridge: the newest" in out
    # every release on its own line, with its framework tag, Megatron-Core and source
    rows = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert "Megatron-Bridge v0.6.0, Megatron-Core 0.19 line" in rows["megatron-bridge@26.08"]
    assert "NeMo v2.4.0, Megatron-Core unpinned" in rows["nemo2@25.07"] and "source: NeMo @v2.4.0" in rows["nemo2@25.07"]
    assert set(rows) == {f"{n}@{r.version}" for n in release_lines() for r in load_line(n).releases}
    assert main(["stacks", "show", "megatron-bridge@26.06"]) == 0
    out = capsys.readouterr().out
    assert "Megatron-Core 0.18.0" in out and "graphs=step" in out
    flags = ["predict", "--model", "qwen3-30b-a3b", "--hardware", "gb300-nvl72", "--gpus", "8", "--tp", "1", "--pp",
             "1", "--ep", "8", "--micro-batch", "8", "--global-batch", "512", "--seq-len", "4096", "--precision", "fp8"]
    assert main([*flags, "--stack", "megatron-bridge@26.08"]) == 0
    out = capsys.readouterr().out
    assert "dispatcher=flex" in out and "overlap=on cuda_graphs=step" in out and "megatron-bridge@26.08 (Megatron-Bridge v0.6.0, Megatron-Core" in out
    assert main([*flags, "--stack", "megatron-bridge@26.08", "--no-moe-overlap"]) == 0
    assert "overlap=off" in capsys.readouterr().out
    assert main([*flags, "--stack", "megatron-bridge@9"]) == 2
    err = capsys.readouterr().err
    assert "no such release" in err and "\n" not in err.strip() and "Traceback" not in err
    with pytest.raises(SystemExit) as stop:  # argparse refuses the name before a plan is made
        main([*flags, "--stack", "megatron-brige"])
    assert stop.value.code == 2
    assert "megatron-bridge[@VERSION]" in capsys.readouterr().err


def test_predict_versus_shows_what_a_release_changed_part_by_part(capsys):
    flags = ["predict", "--model", "qwen3-30b-a3b", "--hardware", "gb300-nvl72", "--gpus", "8", "--tp", "1", "--pp",
             "1", "--ep", "8", "--micro-batch", "8", "--global-batch", "512", "--seq-len", "4096", "--precision", "fp8",
             "--zero", "1"]
    assert main([*flags, "--stack", "megatron-bridge@26.08", "--versus", "megatron-bridge@26.04"]) == 0
    out = capsys.readouterr().out.split("versus megatron-bridge@26.04")[1]
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:] if line.strip()}
    # the settings the two releases resolve differently: 26.08's MXFP8 recipe overlaps and graphs the step
    assert rows["moe_overlap"] == ["on", "off"] and rows["cuda_graphs"] == ["step", "none"]
    assert "moe_dispatcher" not in rows  # both run HybridEP
    # the parts: compute alike (gb300-nvl72 has no power model: one clock, docs/power.md), the exposed
    # expert-parallel seconds differ, and the changes add up to the step's
    for part in ("gemm", "attention"):
        assert rows[part][-2:] == ["+0.0", "us"]
    change = lambda r: float(r[-2].lstrip("+")) * {"s": 1.0, "ms": 1e-3, "us": 1e-6}[r[-1]]  # noqa: E731
    parts = [k for k in rows if k not in ("stack", "moe_overlap", "cuda_graphs", "part", "step", "clock")]
    assert "clock" not in rows
    assert sum(change(rows[k]) for k in parts) == pytest.approx(change(rows["step"]), rel=0.01, abs=2e-3)
    assert change(rows["ep_comm"]) > 0.5
    assert main([*flags, "--versus", "megatron-bridge@26.04", "--format", "json"]) == 2
    assert "--versus megatron-bridge@26.04 prices the plan flags again" in capsys.readouterr().err


def test_a_search_takes_the_releases_dispatcher_and_graphs():
    from perfmodel.search.ranking import search

    kw = dict(precision="fp8", stack="megatron-bridge@26.08", space={"ep": [8], "pp": [1]})
    r = search("qwen3-30b-a3b", "gb300-nvl72", 8, 512, 4096, **kw)
    best = r.plan(0)
    assert (best.moe_dispatcher, best.cuda_graphs, best.moe_overlap, best.fp8_recipe) == ("flex", "step", False, "mxfp8")
    # the row was priced as the plan it writes: MXFP8's scales included
    from perfmodel.cost.estimate import estimate
    row = estimate(load_model("qwen3-30b-a3b"), load_hardware("gb300-nvl72"), best)
    assert row.step_time_s == pytest.approx(float(r.columns["step_time_s"][0]), rel=1e-6)
    assert any("also sets EP overlap where the layout allows it" in n for n in r.notes)
    # the same plan predicted alone takes the recipe's overlap too: faster than the search's row
    plan = Plan(**best.model_dump(exclude={"moe_overlap"}, exclude_unset=True))  # the recipe fills it
    alone = resolve(plan, load_model("qwen3-30b-a3b"), load_hardware("gb300-nvl72"))
    assert alone.moe_overlap is True
    assert estimate(load_model("qwen3-30b-a3b"), load_hardware("gb300-nvl72"), alone).step_time_s < row.step_time_s
    # the user's dispatcher wins; a stack that is not a release keeps alltoall
    assert search("qwen3-30b-a3b", "gb300-nvl72", 8, 512, 4096, moe_dispatcher="alltoall", **kw).plan(0).moe_dispatcher == "alltoall"
    plain = search("qwen3-30b-a3b", "gb300-nvl72", 8, 512, 4096, precision="fp8", space={"ep": [8], "pp": [1]})
    assert (plain.plan(0).moe_dispatcher, plain.plan(0).cuda_graphs, plain.notes) == ("alltoall", None, [])


def test_on_blackwell_a_release_runs_fp8_as_its_recipes_mxfp8():
    assert plan_on("megatron-bridge@26.08").fp8_recipe == "mxfp8"
    assert plan_on("megatron-bridge@26.08", fp8_recipe="tensorwise").fp8_recipe == "tensorwise"  # the user's wins
    assert plan_on("megatron-core").fp8_recipe == "tensorwise"  # Transformer Engine's default elsewhere
    assert plan_on("megatron-bridge@26.08", "dgx-h100", gpus=16, ep=16, micro_batch=1).fp8_recipe == "tensorwise"


def test_plan_files_from_before_the_new_fields_still_load(tmp_path, capsys):
    import json

    flags = ["predict", "--model", "qwen3-30b-a3b", "--hardware", "dgx-h100", "--gpus", "16", "--tp", "1", "--pp", "1",
             "--ep", "16", "--micro-batch", "1", "--global-batch", "64", "--seq-len", "2048", "--precision", "fp8",
             "--zero", "1"]
    path = tmp_path / "old.json"
    assert main([*flags, "--save-plan", str(path)]) == 0
    first = capsys.readouterr().out
    data = json.loads(path.read_text())
    for key in ("fp8_recipe", "cuda_graphs"):
        data["plan"].pop(key)  # as an older perfmodel wrote it
    path.write_text(json.dumps(data))
    assert main(["predict", "--plan", str(path)]) == 0
    assert capsys.readouterr().out.split("step time")[1][:30] == first.split("step time")[1][:30]
    assert main(["predict", "--plan", str(path), "--no-moe-overlap"]) == 2
    assert "drop --no-moe-overlap" in capsys.readouterr().err


def test_a_precision_change_in_an_export_drops_the_fp8_recipe():
    from perfmodel.export.plan_facts import plan_change
    from perfmodel.spec.plan.file import PlanFile  # noqa: F401  (the change works on any object with .plan)

    class Holder:
        plan = plan_on("megatron-core")

    up, why = {}, []
    plan_change(Holder, up, why, "precision", "bf16", "no fp8 with gradient accumulation")
    assert up == {"precision": "bf16", "fp8_recipe": None} and why == [
        "precision fp8 -> bf16: no fp8 with gradient accumulation"]


def test_the_page_offers_the_stacks_and_leaves_overlap_to_the_release():
    from perfmodel.app.forms import argv, fields

    f = {x["flag"]: x for x in fields("predict")}
    assert f["--moe-overlap"]["kind"] == "checkbox" and "--versus" not in f
    assert f["--stack"]["kind"] == "choice" and {"megatron-core", "megatron-bridge"} <= set(f["--stack"]["choices"])
    assert argv("predict", {"--moe-overlap": True, "--stack": "megatron-bridge"}) == ["--moe-overlap", "--stack",
                                                                                     "megatron-bridge"]
    assert argv("predict", {"--moe-overlap": False}) == []  # unticked: the stack's (its release's recipe)


def test_versus_refuses_a_plot_and_names_itself_when_the_other_stack_refuses(tmp_path, capsys):
    flags = ["predict", "--model", "llama-3-8b", "--hardware", "dgx-h100", "--gpus", "8", "--tp", "1", "--pp", "1",
             "--micro-batch", "1", "--global-batch", "8", "--seq-len", "2048"]
    assert main([*flags, "--versus", "megatron-core", "--plot", str(tmp_path / "a.png")]) == 2
    assert "and no --plot" in capsys.readouterr().err and not (tmp_path / "a.png").exists()
    assert main([*flags, "--stack", "torchtitan", "--compile", "model", "--versus", "megatron-core",
                 "--save-plan", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --versus megatron-core: compile = model") and not (tmp_path / "p.json").exists()


def test_a_fit_to_one_release_prices_the_lines_other_releases():
    """calibrate --from-runs's scopes are the stack's profile, as RunFit.applies_to reads them: runs of
    megatron-bridge@26.04 calibrate a plan of @26.08 on the same system (the benchmark's leave-one-container-out)."""
    from perfmodel.calibrate.runs.from_runs import price
    from perfmodel.calibrate.runs.table import Case

    def case(stack):
        return Case(row_id=stack, group=stack, trust="A", model=load_model("qwen3-30b-a3b"),
                    system=load_hardware("gb300-nvl72"), plan=Plan(**QWEN, stack=stack), measured_s=1.0)

    parts = price([case("megatron-bridge@26.04"), case("megatron-bridge@26.08"), case("megatron-core")])
    assert len(set(parts.scopes)) == 1 and str(parts.scopes[0]).endswith(" / megatron-core")
    fit = (2.0, 1.0, 1.0, 0.0)  # compute twice the spec's speed
    held_out = parts.take([1])
    assert held_out.predict(fit, set(parts.take([0]).scopes))[0] < held_out.predict(fit, {"other / stack"})[0]


def test_nemo_automodels_configs_checkpoint_whole_blocks_and_dispatch_by_deepep():
    # examples/benchmark/configs/qwen3_moe_30b_te_deepep.yaml @8d9bfb90e: activation_checkpointing true, DeepEP
    p = plan_on("nemo-automodel@25.10", system="dgx-h100", precision="bf16", micro_batch=4, zero=3)
    assert (p.recompute, p.recompute_modules, p.moe_dispatcher, p.moe_overlap) == ("full", None, "flex", False)
    assert profile_of("nemo-automodel") == "torchtitan"
    # gptoss_120b_te_deepep.yaml: no checkpointing
    q = plan_on("nemo-automodel", system="dgx-h100", model="gpt-oss-120b", precision="bf16", micro_batch=2, zero=3)
    assert (q.recompute, q.moe_dispatcher) == ("none", "flex")
    # the user's recompute wins
    assert plan_on("nemo-automodel", system="dgx-h100", precision="bf16", recompute="selective").recompute == "selective"
    with pytest.raises(ValueError, match="recompute_full with recompute_modules"):
        load_line("nemo-automodel").releases[0].recipes[0].model_validate(
            {"moe_dispatcher": "flex", "moe_overlap": False, "cuda_graphs": "none", "recompute_full": True,
             "recompute_modules": [], "source": "x"})


def test_the_2509_qwen3_recipe_drops_tokens_padded_to_capacity(capsys):
    # run_script.py @v0.1.0rc3 L96-109: apply_moe_token_drop(capacity factor 1.0, pad to capacity)
    p = plan_on("megatron-bridge@25.09", system="dgx-h100", micro_batch=2, global_batch=512, gpus=16, pp=2, vpp=24,
                zero=1)
    assert (p.moe_capacity_factor, p.moe_pad_to_capacity) == (1.0, True)
    assert plan_on("megatron-bridge@26.04", system="dgx-h100").moe_capacity_factor is None
    assert main(["stacks", "show", "nemo-automodel@25.10"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("nemo-automodel@25.10: NeMo AutoModel main@8d9bfb90e") and "recompute=full" in out


def test_nemo_automodels_line_trains_bf16_state_without_a_master():
    from perfmodel.cost.memory.states import state_bytes

    # the model built in bf16, FSDP2 param_dtype bf16, torch.optim.Adam's moments in bf16: 2 + 2 + 4 B per
    # parameter, against torchtitan's fp32 sharded master (4), fp32 gradients (4) and fp32 moments (8)
    auto = load_stack("nemo-automodel@25.10")
    assert (auto.bf16_state, auto.fsdp_master_weights, auto.grad_dtype) == (True, False, "bf16")
    assert load_stack("torchtitan").bf16_state is False  # the profile itself is untouched
    p = plan_on("nemo-automodel@25.10", system="dgx-h100", precision="bf16", micro_batch=4, zero=3)
    assert p.grad_dtype == "bf16"
    s = state_bytes(8e9, p)  # ZeRO-3 over dp 8
    assert (float(s["weights"]), float(s["gradients"]), float(s["optimizer"])) == (2e9, 2e9, 4e9)
    t = state_bytes(8e9, plan_on("torchtitan", system="dgx-h100", precision="bf16", micro_batch=4, zero=3,
                                 grad_dtype="fp32"))
    assert (float(t["weights"]), float(t["gradients"]), float(t["optimizer"])) == (4e9, 4e9, 8e9)


def test_the_users_capacity_setting_wins_whole_over_the_releases(capsys, tmp_path):
    base = ["predict", "--model", "qwen3-30b-a3b", "--hardware", "dgx-h100", "--gpus", "16", "--tp", "1", "--pp", "2",
            "--vpp", "24", "--ep", "8", "--micro-batch", "2", "--global-batch", "512", "--seq-len", "4096",
            "--precision", "fp8", "--zero", "1", "--stack", "megatron-bridge@25.09"]
    expect = {(): "capacity=1 padded", ("--moe-capacity-factor", "1.25"): "capacity=1.25 (drops)",
              ("--moe-capacity-factor", "none"): "imbalance=1 overlap", ("--no-moe-pad-to-capacity",): "imbalance=1 overlap",
              ("--moe-capacity-factor", "2", "--moe-pad-to-capacity"): "capacity=2 padded"}
    for extra, text in expect.items():
        assert main([*base, *extra]) == 0
        assert text in capsys.readouterr().out, extra
    # the same in a plan file, read back
    out = tmp_path / "p.json"
    assert main([*base, "--moe-capacity-factor", "1.25", "--save-plan", str(out)]) == 0
    capsys.readouterr()
    assert main(["predict", "--plan", str(out)]) == 0 and "capacity=1.25 (drops)" in capsys.readouterr().out
    assert main(["predict", "--plan", str(out), "--no-moe-pad-to-capacity"]) == 2
    assert "drop --no-moe-pad-to-capacity" in capsys.readouterr().err
    # a search takes the user's setting whole too, and says the release's full recompute
    from perfmodel.search.space import Job, capacity_of, with_release

    q, hw = load_model("qwen3-30b-a3b"), load_hardware("dgx-h100")
    job = Job(gpus=16, global_batch=512, seq_len=4096, stack="megatron-bridge@25.09", moe_capacity_factor="none")
    assert capacity_of(with_release(job, q, hw)[0]) is None
    rel = with_release(Job(gpus=16, global_batch=512, seq_len=4096, stack="megatron-bridge@25.09"), q, hw)[0]
    assert (capacity_of(rel), rel.moe_pad_to_capacity) == (1.0, True)
    assert "full recompute" in with_release(Job(gpus=8, global_batch=512, seq_len=4096, stack="nemo-automodel"),
                                            q, hw)[1]


def test_a_patch_container_extends_its_release_with_its_own_rules_first():
    line = load_line("megatron-bridge")
    base, patch = line.release("26.04"), line.release("26.04.01")
    assert patch.extends == "26.04" and len(patch.recipes) == 2 + len(base.recipes)
    assert patch.recipes[2:] == base.recipes  # its own two DeepSeek-V3 rules (B200, B300), then 26.04's
    assert [r.gpus for r in patch.recipes[:2]] == [["B200"], ["B300"]]
    # the recipe a patch leaves alone is its base's
    assert release_recipe("megatron-bridge@26.04.01", "qwen3-235b-a22b", "GB200", "fp8")[1] == \
        release_recipe("megatron-bridge@26.04", "qwen3-235b-a22b", "GB200", "fp8")[1]


def test_extends_must_name_an_earlier_release():
    from pydantic import ValidationError

    from perfmodel.spec.stack.release import ReleaseLine
    rule = dict(moe_dispatcher="alltoall", moe_overlap=False, cuda_graphs="none", source="s")
    with pytest.raises((ValidationError, InputError), match="extends = '9.9', not an earlier release"):
        ReleaseLine.model_validate(dict(name="x", profile="megatron-core", releases=[
            dict(version="1.0", bridge="b", source="s", extends="9.9", recipes=[rule])]))
