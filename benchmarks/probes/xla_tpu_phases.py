"""What XLA:TPU holds at a training step's peak, measured without a TPU: programs compiled ahead of time
for a TPU topology with libtpu (jax.experimental.topologies), their temporaries read back from the compiler
(compiled.memory_analysis().temp_size_in_bytes, per device). The numbers cost.memory.peak cites:

1. The head phase and the layer phase never coexist: a MaxText-shaped step (fp32 parameters sharded over fsdp on
   the embed dimension, bf16 compute, a scan of fully rematerialized layers, the logits cast to fp32, cross
   entropy), 16384 tokens a device, vocabulary V (the logits) and MLP width F (the rebuilt layer) each small or
   large: logits alone 4.47 GiB, the rebuilt layer alone 2.85, both 4.72 (the sum would be 7.13).
2. What ZeRO-3 (fsdp) holds gathered per tensor: an 8192 x 131072 LM head, 2048 tokens a device: 3.10 GiB = the
   head gathered (2.00, bf16) + the fp32 logits (1.00) + 0.10 (no second copy of the head, no gradient buffer
   beside it); tied to the embedding 2.64. Two layers of 8192 x 65536 wi and wo (1.0 GiB each gathered), 1024
   tokens a device: 3.56 GiB (cost.memory.peak.zero_copy_bytes counts 4.0 for a layer: two of its largest tensor and
   that one's fp32 gradient).

Needs jax and libtpu (pip install jax libtpu), not perfmodel's environment; each compile takes minutes on 2 cores:
    python -m benchmarks.probes.xla_tpu_phases
Measured with jax 0.10.2, libtpu 0.0.52 (2026-11-28), topology v6e:2x2 (4 devices). The step is restated here
(MaxText's layers reduced to an MLP: what is measured is buffer liveness, not MaxText's numbers).
"""

from __future__ import annotations

GiB = 2**30


def temp_gib(V, F, E=1024, L=4, tok_dev=16384, S=4096, tied=False, topology="v6e:2x2") -> float:
    """Temporaries per device (GiB) of the gradient of a fsdp-sharded step, compiled for `topology`."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental import topologies
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    devs = np.array(topologies.get_topology_desc(platform="tpu", topology_name=topology).devices)
    mesh, n = Mesh(devs, ("fsdp",)), len(devs)
    sh = lambda *spec: NamedSharding(mesh, P(*spec))

    def layer(x, w):
        return x + jax.nn.gelu(x @ w["wi"].astype(jnp.bfloat16)) @ w["wo"].astype(jnp.bfloat16)

    def loss_fn(params, tokens, targets):
        emb = params["embed"].astype(jnp.bfloat16)
        x = jax.lax.with_sharding_constraint(jnp.take(emb, tokens, axis=0), sh("fsdp", None, None))
        body = jax.checkpoint(lambda c, w: (layer(c, w), None), policy=jax.checkpoint_policies.nothing_saveable)
        x, _ = jax.lax.scan(body, x, params["layers"])
        logits = (x @ (emb.T if tied else params["head"].astype(jnp.bfloat16))).astype(jnp.float32)
        tgt = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
        return jnp.mean(jax.nn.logsumexp(logits, axis=-1) - tgt)

    f32 = jnp.float32
    shapes = {"embed": jax.ShapeDtypeStruct((V, E), f32, sharding=sh(None, "fsdp")),
              "layers": {"wi": jax.ShapeDtypeStruct((L, E, F), f32, sharding=sh(None, "fsdp", None)),
                         "wo": jax.ShapeDtypeStruct((L, F, E), f32, sharding=sh(None, None, "fsdp"))}}
    if not tied:
        shapes["head"] = jax.ShapeDtypeStruct((E, V), f32, sharding=sh("fsdp", None))
    tokens = jax.ShapeDtypeStruct((tok_dev * n // S, S), jnp.int32, sharding=sh("fsdp", None))
    step = jax.jit(jax.grad(loss_fn), out_shardings=jax.tree.map(lambda s: s.sharding, shapes))
    return step.lower(shapes, tokens, tokens).compile().memory_analysis().temp_size_in_bytes / GiB


def main() -> None:
    tok = 16384
    for V, F in ((1024, 1024), (131072, 1024), (1024, 65536), (131072, 65536)):
        print(f"phases: V {V:6d} F {F:5d}, {tok} tokens: temp {temp_gib(V, F, tok_dev=tok):.2f} GiB "
              f"(fp32 logits {tok * V * 4 / GiB:.2f}, one layer's F activations bf16 {tok * F * 2 / GiB:.2f})", flush=True)
    for tied in (False, True):
        print(f"head 8192 x 131072 {'tied' if tied else 'untied'}, 2048 tokens: temp "
              f"{temp_gib(131072, 1024, E=8192, L=2, tok_dev=2048, S=2048, tied=tied):.2f} GiB (head bf16 2.00, "
              f"fp32 logits 1.00)", flush=True)
    print(f"layers of 8192 x 65536 wi, wo, 1024 tokens: temp "
          f"{temp_gib(1024, 65536, E=8192, L=2, tok_dev=1024, S=1024):.2f} GiB (one tensor bf16 1.00)", flush=True)


if __name__ == "__main__":
    main()
