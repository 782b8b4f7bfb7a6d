"""What XLA:TPU compiles against, measured without a TPU: programs compiled ahead of time for a TPU topology with
libtpu (jax.experimental.topologies), read back from the compiler.

1. The HBM a device offers a program: an oversized program is refused with 'exceeds available HBM (X G)'
   (CompileTimeHbmOom; binary G), the figure hardware_specs/systems/tpu-*.yaml memory_overhead_gib is the device's
   HBM less; the device count a topology has (TPU7x: two devices a chip).
2. What the LM head and MaxText's cross entropy hold per logit: the head's bf16 GEMM, its output cast to fp32
   (base.yml cast_logits_to_fp32) and MaxText's custom-VJP cross entropy (max_utils.cross_entropy_with_logits,
   maxtext df1b359 src/maxtext/utils/max_utils.py L610-700, restated here), gradient taken: the compiled program's
   temporaries over the logits' count (cost.memory.footprint counts 4 B: the fp32 logits kept, no more at the loss).

Needs jax and libtpu (pip install jax libtpu), not perfmodel's environment:
    python -m benchmarks.probes.xla_tpu_limits
Measured with jax 0.10.2, libtpu 0.0.52 (2026-11-28): available HBM per device v5e 15.75, v5p 95.73, v6e 31.24,
TPU7x 94.74 GiB (tpu7x:2x2x1: 8 devices); the head and loss 4.0 B per logit on v5p, v6e and TPU7x, 2.0 on v5e
(8192 tokens x 131072 vocabulary), and v6e refuses 65536 x 131072 (38 G of temporaries > 31.24 G): XLA does not
rematerialize the logits away.
"""

from __future__ import annotations

import re

TOPOLOGIES = ("v5e:2x2", "v5p:2x2x1", "v6e:2x2", "tpu7x:2x2x1")


def available_hbm(topology: str) -> tuple[int, float | None]:
    """(devices in the topology, the GiB a device offers a program) from the compiler's refusal of an oversized one."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    topo = topologies.get_topology_desc(platform="tpu", topology_name=topology)
    one = NamedSharding(Mesh(topo.devices[:1], ("x",)), PartitionSpec())
    x = jax.ShapeDtypeStruct((200_000, 1 << 16), jnp.float32, sharding=one)  # 52 GB: past every device's HBM x 2
    try:
        jax.jit(lambda a: jnp.stack([a * i for i in range(4)]).sum(0)).lower(x).compile()
    except Exception as err:  # noqa: BLE001 - the refusal is the measurement
        found = re.search(r"exceeds available HBM \(([0-9.]+)G\)", str(err))
        return len(topo.devices), float(found.group(1)) if found else None
    return len(topo.devices), None


def loss_bytes_per_logit(topology: str, tokens: int = 8192, hidden: int = 2048, vocab: int = 131072) -> float:
    """Temporaries of the head + cross entropy's gradient over tokens x vocab (bytes per logit)."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    @jax.custom_vjp
    def xent(logits, targets):
        return -jnp.sum(targets * (logits - jax.scipy.special.logsumexp(logits, axis=-1, keepdims=True)), axis=-1)

    def fwd(logits, targets):
        shifted = logits - logits.max(axis=-1, keepdims=True)
        exp = jnp.exp(shifted)
        total = jnp.sum(exp, -1, keepdims=True)
        return -jnp.sum(targets * (shifted - jnp.log(total)), axis=-1), (logits, targets, exp, total)

    def bwd(res, g):
        logits, targets, exp, total = res
        return jnp.asarray(g[..., None] * (exp / total - targets), logits.dtype), None

    xent.defvjp(fwd, bwd)

    def loss(h, w, t):
        logits = jnp.dot(h, w).astype(jnp.float32)
        return xent(logits, jax.nn.one_hot(t, vocab, dtype=logits.dtype)).sum()

    topo = topologies.get_topology_desc(platform="tpu", topology_name=topology)
    one = NamedSharding(Mesh(topo.devices[:1], ("x",)), PartitionSpec())
    args = (jax.ShapeDtypeStruct((tokens, hidden), jnp.bfloat16, sharding=one),
            jax.ShapeDtypeStruct((hidden, vocab), jnp.bfloat16, sharding=one),
            jax.ShapeDtypeStruct((tokens,), jnp.int32, sharding=one))
    compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(*args).compile()
    return compiled.memory_analysis().temp_size_in_bytes / (tokens * vocab)


def main() -> int:
    for topology in TOPOLOGIES:
        devices, gib = available_hbm(topology)
        print(f"{topology:12s} devices {devices:3d}  available HBM {gib} GiB a device  "
              f"head + loss {loss_bytes_per_logit(topology):.2f} B per logit")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
