"""Megatron-LM's pipeline split: the layers of each virtual chunk under its accounting of the embedding and the loss
as layers, or its first / last stage layer counts (spec.plan.layout.split_of picks it where a plan sets either)."""

from __future__ import annotations

from ...errors import InputError, values_text


def default_stage_layers(n_layers: int, pp: int) -> list[int]:
    """Layers per pipeline stage when a plan does not give them: as even as possible, the remainder on middle
    stages first (the first stage also holds the embedding, the last the LM head and loss), then the last,
    then the first. Llama 3 405B: 126 layers over 16 stages gives 7, 8 x 14, 7 (Dubey et al. 2024, Sec. 3.3.2).
    """
    if pp == 1:
        return [n_layers]
    q, r = divmod(n_layers, pp)
    middle_extra = min(r, pp - 2)
    rest = r - middle_extra  # 0, 1 or 2 extra layers: the last stage's, then the first's
    return ([q + (rest >= 2)] + [q + (i < middle_extra) for i in range(pp - 2)] + [q + (rest >= 1)])


def megatron_slots(n_layers: int, embedding: bool = False, loss: bool = False) -> int:
    """What Megatron-LM's pipeline split divides over pp * vpp chunks: the transformer layers, plus one slot for
    the embedding and one for the LM head and loss where they are accounted as layers
    (--account-for-embedding/loss-in-pipeline-split, megatron/training/arguments.py)."""
    return n_layers + bool(embedding) + bool(loss)


def megatron_chunks(n_layers: int, pp: int, vpp: int, embedding: bool = False, loss: bool = False,
                    first: int | None = None, last: int | None = None) -> list[int]:
    """Layers of every virtual pipeline chunk in pipeline order (chunk c runs on stage c % pp), as Megatron-LM
    splits them (megatron/core/transformer/transformer_block.py get_num_layers_to_build and
    megatron/training/arguments.py): with `embedding` / `loss` the embedding / the LM head and loss count as one
    layer each, so n_layers + embedding + loss slots split evenly over the pp * vpp chunks and the first / last
    chunk holds one layer fewer; with `first` / `last` those stages hold that many layers and the others share
    the rest evenly; each stage's layers split evenly over its vpp chunks. InputError where Megatron-LM's
    checks would refuse the split."""
    if (embedding or loss) and (first is not None or last is not None):
        raise InputError("account_for_embedding / account_for_loss and first_stage_layers / last_stage_layers are "
                         "exclusive (Megatron-LM refuses them together); valid: one of the two ways")
    if embedding or loss:
        slots = megatron_slots(n_layers, embedding, loss)
        if slots % (pp * vpp):
            ok = [v for v in range(1, slots // pp + 1) if slots % (pp * v) == 0]
            raise InputError(f"n_layers + embedding + loss = {slots} slots do not split over pp*vpp = {pp}*{vpp} "
                             f"chunks; valid vpp with pp={pp}: {values_text(ok)}")
        per = slots // (pp * vpp)
        chunks = [per] * (pp * vpp)
        chunks[0] -= embedding
        chunks[-1] -= loss
        return chunks
    stages = middle = None
    if first is not None or last is not None:
        f = first if first is not None else 0
        la = last if last is not None else 0
        inner = pp - (first is not None) - (last is not None)
        rest = n_layers - f - la
        if inner == 0 and rest != 0:  # pp 2 with both given: they are the whole split
            raise InputError(f"first_stage_layers = {first} + last_stage_layers = {last} = {f + la} != n_layers = "
                             f"{n_layers} with pp = 2; valid: two counts summing to {n_layers}")
        if inner > 0 and (rest < inner or rest % inner):
            raise InputError(f"first_stage_layers = {first}, last_stage_layers = {last}: the other {inner} stage(s) "
                             f"must share the remaining {rest} of n_layers = {n_layers} evenly; valid: values "
                             f"leaving a positive multiple of {inner} layers")
        middle = rest // inner if inner else 0
        stages = [middle] * pp
        if first is not None:
            stages[0] = first
        if last is not None:
            stages[-1] = last
    else:
        stages = default_stage_layers(n_layers, pp)
    bad = [n for n in stages if n % vpp or n < vpp]
    if bad:
        raise InputError(f"stage layers {stages} do not split into vpp = {vpp} equal chunks per stage; valid: "
                         f"every stage's layer count a multiple of {vpp}")
    return [stages[c % pp] // vpp for c in range(pp * vpp)]
