"""The ICI torus shaped by the job's slice (cost.comm.collectives.torus_slice_dims / torus_slice_wraps / _torus_ring_links).

Hand values from Google Cloud TPU docs' slice topologies (v4/v5p: 2x2x1 ... 2x4x4 meshes, 4x4x4 and up tori of whole
cubes; v5e/v6e: 2x2 ... 8x16 meshes, the 16x16 pod a torus) and Jouppi et al. 2023 (TPU v4, Sec. 2): a ring over a
whole wrapped dimension uses both directions (2 links), otherwise 1.
"""

import pytest

from perfmodel.cost.comm import collectives as C
from perfmodel.errors import InputError
from perfmodel.spec.hardware.system import load_hardware
from perfmodel.spec.hardware.network import NetworkTier

V5P, V5E, V4, V7 = (load_hardware(n) for n in ("tpu-v5p", "tpu-v5e", "tpu-v4", "tpu-v7"))


def ici(system):
    return system.tiers[0]


@pytest.mark.parametrize("system,gpus,dims,wraps", [
    (V5P, 4, [1, 2, 2], False),  # 2x2x1, one host
    (V5P, 8, [2, 2, 2], False),
    (V5P, 16, [2, 2, 4], False),
    (V5P, 32, [2, 4, 4], False),  # inside one cube: a mesh
    (V5P, 64, [4, 4, 4], True),  # one whole cube: wraparound on every dimension
    (V5P, 96, [4, 4, 8], True),  # no 96-chip topology: the smallest slice holding the job
    (V5P, 128, [4, 4, 8], True),
    (V5P, 4096, [16, 16, 16], True),
    (V5P, 8960, [16, 20, 28], True),  # the pod
    (V5P, 12288, [16, 20, 28], True),  # multislice: each slice the pod
    (V4, 192, [4, 4, 12], True),  # 64 x 3: the odd factor on one dimension whole
    (V5E, 8, [2, 4], False),
    (V5E, 64, [8, 8], False),
    (V5E, 128, [8, 16], False),  # a full 16-wide dimension, but not the whole pod: still a mesh
    (V5E, 256, [16, 16], True),
])
def test_slice_dims_and_wraparound(system, gpus, dims, wraps):
    t = ici(system)
    assert C.torus_slice_dims(t, gpus) == dims
    assert C.torus_slice_wraps(t, dims) == [wraps] * len(dims)


def test_unknown_job_size_is_the_pod():
    assert C.torus_slice_dims(ici(V5P), None) == [16, 20, 28]


def test_ironwood_die_pair_is_in_every_slice_and_never_wraps():
    t = ici(V7)  # [2, 16, 24, 24] devices: two dies a chip, then 16 x 24 x 24 chips
    assert C.torus_slice_dims(t, 2) == [2, 1, 1, 1]  # one chip
    assert C.torus_slice_dims(t, 128) == [2, 4, 4, 4]  # 64 chips, one cube
    assert C.torus_slice_wraps(t, [2, 4, 4, 4]) == [False, True, True, True]
    assert C._torus_ring_links(t, 1, 2, 128) == 1  # the die pair: one link
    assert C._torus_ring_links(t, 1, 8, 128) == 1 + 2  # die pair + a whole wrapped 4-chip line


def test_v5p_64_chip_job_links():
    t = ici(V5P)  # slice 4x4x4, a torus
    assert C._torus_ring_links(t, 1, 4, 64) == 2  # one whole wrapped dimension
    assert C._torus_ring_links(t, 4, 4, 64) == 2  # the next dimension (stride 4), whole and wrapped
    assert C._torus_ring_links(t, 1, 16, 64) == 4  # two whole dimensions
    assert C._torus_ring_links(t, 1, 64, 64) == 6  # all three
    assert C._torus_ring_links(t, 1, 2, 64) == 1  # half a dimension folds back along a line
    # the old pod-wide rule (job size unknown): 4 chips of a 16-long dimension, one link
    assert C._torus_ring_links(t, 1, 4, None) == 1


def test_v5p_32_chip_job_is_a_mesh():
    t = ici(V5P)  # slice 2x4x4: no wraparound, 1 link per spanned dimension
    assert C._torus_ring_links(t, 1, 2, 32) == 1
    assert C._torus_ring_links(t, 2, 4, 32) == 1  # a whole 4-long dimension, unwrapped
    assert C._torus_ring_links(t, 1, 8, 32) == 2
    assert C._torus_ring_links(t, 1, 16, 32) == 3  # 2 x 4 x half of the third
    assert C._torus_ring_links(t, 1, 32, 32) == 3


def test_v5e_links():
    t = ici(V5E)
    assert C._torus_ring_links(t, 1, 8, 64) == 1  # 8x8 mesh: a whole row, unwrapped
    assert C._torus_ring_links(t, 1, 64, 64) == 2
    assert C._torus_ring_links(t, 1, 16, 256) == 2  # the 16x16 pod: a wrapped row
    assert C._torus_ring_links(t, 1, 256, 256) == 4


def test_allreduce_time_by_hand_v5p_16_way_in_64_chip_job():
    # 16 chips stride 1 of a 4x4x4 slice: two whole wrapped dimensions = 4 links per direction, each
    # 100 GB/s x 0.85 (tpu-v5p ici); ring all-reduce 2(n-1)a + 2(n-1)/n S/B, a = 1 us.
    ph = C.group_phases(V5P, 16, 1, gpus=64)
    assert [(p.tier, p.members) for p in ph] == [("ici", 16)]
    bw = 100e9 * 0.85 * 4
    assert ph[0].bandwidth == pytest.approx(bw)
    size = 2.0**30
    by_hand = 2 * 15 * 1e-6 + 2 * 15 / 16 * size / bw  # = 3.0e-5 + 2013265920 / 3.4e11 = 0.0059513703 s
    assert by_hand == pytest.approx(0.0059513703, rel=1e-8)
    assert C.collective_time("all_reduce", size, ph) == pytest.approx(by_hand, rel=1e-12)
    assert C.ring_allreduce_time(size, 16, bw, 1e-6) == pytest.approx(by_hand, rel=1e-12)
    # the same group in a 32-chip job (2x4x4 mesh): 3 links, one each
    assert C.group_phases(V5P, 16, 1, gpus=32)[0].bandwidth == pytest.approx(100e9 * 0.85 * 3)


def _tier(**kw):
    base = dict(name="ici", topology="torus", torus_dims=[8, 8], bandwidth_gbps=50, latency_us=1.0,
                collective_efficiency=0.85)
    return NetworkTier(**{**base, **kw})


def test_without_wrap_min_extent_only_whole_pod_dimensions_wrap():
    t = _tier()
    assert C.torus_slice_dims(t, 16) == [4, 4]
    assert C.torus_slice_wraps(t, [4, 4]) == [False, False]
    assert C._torus_ring_links(t, 1, 16, 16) == 2  # two unwrapped dimensions
    assert C._torus_ring_links(t, 1, 64, 64) == 4  # the whole torus, wrapped


def test_wrap_min_extent_on_a_switch_tier_is_refused():
    with pytest.raises(InputError, match="wrap_min_extent"):
        NetworkTier(name="nvlink", bandwidth_gbps=450, latency_us=3.0, collective_efficiency=0.8, wrap_min_extent=4)
