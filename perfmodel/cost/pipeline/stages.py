"""Pipeline stages as the step model compares them: which units each holds, how busy the pipeline keeps its
ranks, and how much faster ranks that share a host's cores compute when some of them wait."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from ...spec.hardware.system import System
from ...spec.model.config import ModelConfig
from ..compute.kernel_time import shared_core_speedup
from ..layouts import Layouts
from ...spec.plan.layout import split_of
from .schedules import stage_layers

UNITS = ("layer", "embedding", "head")


def unit_counts(model: ModelConfig) -> dict[str, int]:
    """How many of each unit the whole model has: a multi-token prediction module counts as one more layer and
    one more head (`Stages.with_mtp`)."""
    return {"layer": model.n_layers + model.mtp_layers, "embedding": 1, "head": 1 + model.mtp_layers}


@dataclass
class Stages:
    """The stage kinds whose times and memory are compared: arrays (kinds, plans) of unit counts."""

    layers: np.ndarray
    embedding: np.ndarray
    head: np.ndarray
    rank: np.ndarray  # pipeline rank whose in-flight micro-batches the kind holds
    valid: np.ndarray  # kinds a plan has (no middle stage with pp = 2, no last with pp = 1)
    explicit: bool = False  # one row per stage of one plan's split (else: first, middle, last kinds)

    @classmethod
    def of_split(cls, split) -> Stages:
        """Every stage of a split (layers per stage), one plan: the first holds the embedding, the last the head."""
        n = len(split)
        col = lambda x: np.asarray(x, float)[:, None]
        ranks = np.arange(n)
        return cls(col(split), col(ranks == 0), col(ranks == n - 1), col(ranks), np.ones((n, 1), bool), True)

    def with_mtp(self, mtp: int) -> Stages:
        """The stages with `mtp` multi-token prediction modules on the one holding the head, as Megatron-Core
        builds them (mtp_num_layers: "MTP layers are placed in the last pipeline stage"; DeepSeek-V3, Sec. 2.2):
        each looks up the embedding of the tokens one further ahead, runs one transformer block and the shared
        output head with its own loss, so it counts as one more embedding, layer and head; with pp > 1 that
        stage holds a copy of the embedding (Megatron-Core GPTModel builds it where mtp_process), whose gradient
        is synced with the first stage's (`cost.step`). Its 2h x h projection of [norm(h); norm(embedding)] is not priced (DeepSeek-V3:
        0.1B of the block's 0.6B active parameters per token; `ModelConfig.mtp_params` counts it)."""
        if not mtp:
            return self
        last = self.head > 0
        return replace(self, layers=self.layers + mtp * last, head=self.head + mtp * last,
                       embedding=self.embedding + mtp * last)

    @classmethod
    def of(cls, model: ModelConfig, lay: Layouts) -> Stages:
        """First, (largest) middle and last stage of the default split per plan; or each stage of an explicit one
        (layers per stage of the model's own layers; the multi-token prediction modules on the last, `with_mtp`)."""
        return cls._of(model, lay).with_mtp(model.mtp_layers)

    @classmethod
    def _of(cls, model: ModelConfig, lay: Layouts) -> Stages:
        pp = lay.pp
        if lay.stage_layers is not None:
            return cls.of_split(lay.stage_layers)
        if lay.first_stage_layers is not None or lay.last_stage_layers is not None:  # one plan: its own split
            return cls.of_split(split_of(lay.plan(0), model.n_layers))
        # the default split per pp, or Megatron-LM's accounting: n + e + l slots evenly, first / last one fewer
        # one split per distinct (pp, accounting): a search has a few dozen among its ~10^5 plans
        first, inverse = lay.distinct(("pp", "account_for_embedding", "account_for_loss"))
        emb = np.broadcast_to(lay.account_for_embedding, pp.shape)
        loss = np.broadcast_to(lay.account_for_loss, pp.shape)
        lf, lm, ll = np.array([stage_layers(model.n_layers, int(pp[i]), bool(emb[i]), bool(loss[i])) for i in first],
                              float)[inverse].T
        one = np.ones(len(lay))
        return cls(layers=np.stack([lf, lm, ll]), embedding=np.stack([one, 0 * one, 0 * one]),
                   head=np.stack([(pp == 1) * one, 0 * one, one]), rank=np.stack([0 * one, one, pp - 1.0]),
                   valid=np.stack([one > 0, pp > 2, pp > 1]))

    def mean(self, per_kind: np.ndarray, pp) -> np.ndarray:
        """The mean over a plan's pp stages of a per-stage-kind value (kinds, plans): every stage of an explicit
        split; else the first, the last and pp - 2 middle stages of the largest middle's value."""
        if self.explicit:
            return np.mean(per_kind, axis=0)
        pp = np.asarray(pp, float)
        first, middle, last = per_kind
        return np.where(pp == 1, first, (first + last + np.maximum(pp - 2, 0) * middle) / np.maximum(pp, 1))

    def count(self, unit: str) -> np.ndarray:
        return self.layers if unit == "layer" else getattr(self, unit)

    def seconds(self, per_unit: dict) -> np.ndarray:
        """Seconds per micro-batch on each stage: every unit's seconds times how many of it the stage holds."""
        return sum(per_unit[u] * self.count(u) for u in UNITS)

    def name(self, kind: int, pp: int) -> str:
        if pp == 1:
            return "single"
        if kind == 0:
            return "first"
        if (self.explicit and kind == pp - 1) or (not self.explicit and kind == 2):
            return "last"
        return f"stage {kind}" if self.explicit else "middle"


def pick(values: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """values[kind[j], j] for every plan j."""
    values = np.asarray(values)
    if values.shape[1] == 1:
        return values[kind, 0]
    n = len(kind)  # one flat take: ~5x faster than values[kind, arange(n)] on 10^5 plans
    return values.reshape(-1).take(np.asarray(kind) * n + np.arange(n))


def pipeline_busy(model: ModelConfig, lay: Layouts, st: Stages, compute: dict) -> np.ndarray:
    """Fraction of its ranks a pipeline keeps computing: the mean stage's compute per micro-batch (`compute`:
    seconds per unit) over the slowest stage's (1 without pipelining)."""
    per_stage = st.seconds(compute)
    slowest = np.max(np.where(st.valid, per_stage, 0.0), axis=0)
    mean = sum(compute[u] * n for u, n in unit_counts(model).items()) / lay.pp
    return np.minimum(np.divide(mean, slowest, out=np.ones_like(slowest), where=slowest > 0), 1.0)


def shared_host_speedup(system: System, lay: Layouts, busy=1.0) -> np.ndarray:
    """cost.compute.kernel_time.shared_core_speedup for every plan with `busy` of its ranks computing; 1 without
    system.shared_host."""
    host = system.shared_host
    if host is None:
        return np.ones(len(lay))
    return shared_core_speedup(np.broadcast_to(busy, (len(lay),)), lay.gpus, host.ranks, host.cores)
