"""Micro-batch chunks in flight under interleaved 1F1B when a rank's chunks hold unequal layers (cost.memory.chunks,
cost.pipeline.schedules.interleaved_peak), checked by hand against Megatron-Core's order."""

import numpy as np

from perfmodel.cost.memory import footprint as memory
from perfmodel.cost.layouts import Layouts
from perfmodel.cost.pipeline.schedules import in_flight, interleaved_peak, schedule_order
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.model.catalogue import load_model
from perfmodel.spec.plan.layout import Plan, resolve

B200 = load_hardware("dgx-b200")
L405 = load_model("llama-3.1-405b")  # 126 layers


def test_equal_chunks_peak_at_warmup_plus_one():
    # Megatron-Core: warm-up 2 (pp - r - 1) + (vpp - 1) pp; pp 16 x vpp 8, rank 1: 28 + 112 = 140, so 141 held
    peak, held = interleaved_peak(16, 8, 384, 1, [1.0] * 8)
    assert peak == 141 == float(in_flight("interleaved", 16, 8, 384, 1))
    assert held.sum() == 141
    # pp 4 x vpp 2, m 8, rank 0: warm-up 6 + 4 = 10 forwards, 11 held
    assert interleaved_peak(4, 2, 8, 0, [2.0, 2.0])[0] == 22


def test_accounted_first_and_last_chunks():
    # Llama 3.1 405B, 126 layers + embedding + loss over 16 x 8 chunks of one: rank 0's chunk 0 is the embedding
    # alone. Its 143 held chunks are forwards 0..142: chunk 0 of micro-batches 0-15 and 16-30 (31, no layers) and
    # chunks 1..7 of micro-batches 0-15 (7 x 16 = 112 layers)
    assert interleaved_peak(16, 8, 384, 0, [0] + [1] * 7)[0] == 112
    # the last rank's chunk 7 is the loss alone: warm-up 112 forwards = chunks 0..6 of micro-batches 0-15 (112
    # layers); the steady state's first 16 steps run chunk 7 both ways, then chunk 0 of micro-batch 16 comes in
    # before chunk 6 of micro-batch 0 goes: 113
    peak, held = interleaved_peak(16, 8, 384, 15, [1] * 7 + [0])
    assert peak == 113 and list(held) == [17] + [16] * 6 + [0]


def test_peak_matches_a_walk_over_the_schedule():
    rng = np.random.default_rng(0)
    for _ in range(50):
        pp, vpp = int(rng.choice([2, 4, 8])), int(rng.choice([2, 3, 4]))
        m, r = pp * int(rng.integers(1, 5)), int(rng.integers(0, pp))
        w = rng.integers(0, 4, vpp).astype(float)
        held, best = 0.0, 0.0
        for d, _, c in schedule_order("interleaved", pp, vpp, m, r):
            held += w[c] if d == "F" else -w[c]
            best = max(best, held) if d == "F" else best
        assert interleaved_peak(pp, vpp, m, r, w)[0] == best


def test_405b_stage_activations_follow_the_held_chunks():
    plan = resolve(Plan(gpus=128, tp=4, pp=16, vpp=8, micro_batch=1, global_batch=768, seq_len=8192,
                        sequence_parallel=True, zero=1, account_for_embedding=True, account_for_loss=True,
                        stack="megatron-bridge"), L405, B200)
    lay = Layouts.from_plan(plan)
    per_layer = float(memory.layer_activation_bytes(L405, lay)[0])
    act = memory.stage_memory(L405, B200, lay, per_kind=True)["activations"][:, 0]
    emb = float(np.ravel(memory.embedding_activation_bytes(L405, lay))[0])
    # first: 112 layers and the embedding output of the 16 micro-batches of chunk 0 held then; middle (rank 1,
    # 8 chunks of one layer): 141; last: 113 layers and one micro-batch's head
    assert abs(act[0] - (112 * per_layer + 16 * emb)) < 1e-6 * act[0]
    assert abs(act[1] - 141 * per_layer) < 1e-6 * act[1]
    assert act[2] > 113 * per_layer


def test_a_stage_split_megatron_does_not_run_keeps_the_mean_chunk():
    # 126 layers over pp 8 without the accounting: stages of 15 / 16 layers, which Megatron-LM cannot split into
    # vpp 2 equal chunks (it would refuse without a layout); the model's own 8 + 7 split is no schedule it runs, so
    # rank 0 holds the mean chunk: warm-up 2 x 7 + 8 = 22, 23 chunks of 15 / 2 layers
    plan = resolve(Plan(gpus=64, tp=8, pp=8, vpp=2, micro_batch=1, global_batch=64, seq_len=8192,
                        sequence_parallel=True, zero=1, stack="megatron-bridge"), L405, B200)
    lay = Layouts.from_plan(plan)
    per_layer = float(memory.layer_activation_bytes(L405, lay)[0])
    act = memory.stage_memory(L405, B200, lay, per_kind=True)["activations"][0, 0]
    emb = float(np.ravel(memory.embedding_activation_bytes(L405, lay))[0])
    assert abs(act - (15 * 23 / 2 * per_layer + 23 / 2 * emb)) < 1e-6 * act
