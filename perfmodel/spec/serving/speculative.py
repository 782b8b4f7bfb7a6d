"""Speculative decoding's schema (`SpeculativeConfig`, a ServePlan field), the draft it runs as a one-layer model
(`draft_model`) and the acceptance a plan takes where it states none (`published_acceptance`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ...errors import InputError
from ...types import Count, Real, Schema
from ..model.config import ModelConfig


class SpeculativeConfig(Schema):
    """Speculative decoding (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding",
    Sec. 3): every decode step a draft proposes draft_tokens tokens one after another, then the target model checks
    them in one forward of draft_tokens + 1 tokens per sequence and keeps the accepted prefix and one token of its
    own. mtp: the model's multi-token prediction module drafts (DeepSeek-V3, Sec. 2.2 and 5.4.3; TensorRT-LLM,
    vLLM and SGLang run k > 1 drafts by running the module again on its own output); eagle: an EAGLE-3 draft, one
    decoder layer on the target's hidden states with a head of its own (Li et al. 2025, arXiv 2503.01840). The
    acceptance is stated, not predicted: it depends on the data and the sampling. Where none is stated, an MTP draft
    takes the model's published figure (ModelConfig.mtp_acceptance, by resolve_serve), and `assumed` says so."""

    method: Literal["mtp", "eagle"] = Field(description="the draft: the model's MTP module(s), or an EAGLE-3 layer")
    draft_tokens: Count = Field(le=16, description="tokens drafted per step (num_speculative_tokens, num_nextn_"
                                                   "predict_layers in TensorRT-LLM's MTP config)")
    acceptance_rate: Real | None = Field(None, gt=0, lt=1, description="probability that a draft token is accepted "
                                                                       "given that the ones before it were")
    acceptance_length: Real | None = Field(None, ge=1, description="mean tokens a step emits per sequence, its own "
                                                                   "token included (the engines' acceptance length)")
    draft_ffn_hidden: Count | None = Field(None, description="eagle: the draft layer's MLP width (default the target's "
                                                             "ffn_hidden, as the EAGLE-3 heads of Llama 3.1 have)")
    draft_vocab: Count | None = Field(None, description="eagle: the draft head's vocabulary (EAGLE-3's for Llama 3.1: "
                                                        "32000; default the target's)")
    assumed: str = Field("", description="where the acceptance came from when none was stated (the model's "
                                         "published figure, filled in by resolve_serve); empty: stated")

    @model_validator(mode="after")
    def _one_acceptance(self):
        if self.acceptance_rate is not None and self.acceptance_length is not None:
            raise ValueError(f"acceptance_rate = {self.acceptance_rate}, acceptance_length = {self.acceptance_length}; "
                             "valid: at most one of them (neither: the model's published figure, where it has one)")
        if self.acceptance_length is not None and self.acceptance_length > self.draft_tokens + 1:
            raise ValueError(f"acceptance_length = {self.acceptance_length:g} exceeds draft_tokens + 1 = "
                             f"{self.draft_tokens + 1}; valid: 1 to {self.draft_tokens + 1}")
        return self

    @property
    def tokens_per_step(self) -> float:
        """Mean tokens a step emits per sequence: acceptance_length, or from acceptance_rate a with k drafts
        (1 - a^(k+1)) / (1 - a) (Leviathan et al. 2023, Eq. 1: the expected accepted prefix plus the target's own
        token)."""
        if self.acceptance_length is not None:
            return self.acceptance_length
        if self.acceptance_rate is None:
            raise InputError(f"speculative.method = {self.method} with no acceptance: the plan was not resolved "
                             "against its model (spec.serving.schema.resolve_serve fills the published figure); valid: "
                             "acceptance_rate or acceptance_length")
        a, k = self.acceptance_rate, self.draft_tokens
        return (1.0 - a ** (k + 1)) / (1.0 - a)


def fusion_inputs(method: str, hidden: int) -> int:
    """Input width of a speculative draft's fusion GEMM (to `hidden` outputs): an MTP module's eh_proj of the token's
    embedding and the previous hidden state, 2h (DeepSeek-V3 Sec. 2.2); EAGLE-3's fc of three target layers' hidden
    states, 3h (Li et al. 2025, Sec. 3)."""
    return (2 if method == "mtp" else 3) * hidden


def draft_model(model: ModelConfig, spec: SpeculativeConfig) -> ModelConfig:
    """The draft's one decoder layer as a one-layer model. mtp: a block of the model's own kind (a MoE block where it
    has experts; full attention, as Qwen3.5's and DeepSeek's MTP blocks are), sharing the embedding and LM head;
    eagle: a dense grouped-query layer of the target's width and heads (an MLA target's: hidden / heads wide), MLP
    draft_ffn_hidden, its own head over draft_vocab."""
    common = dict(n_layers=1, linear_attention=None, sliding_window=None, sliding_window_layers=None, mtp_layers=0,
                  global_attention=None)
    if spec.method == "mtp":
        moe = None if model.moe is None else model.moe.model_copy(update={"first_dense_layers": 0, "layer_freq": 1})
        return model.model_copy(update=common | dict(name=f"{model.name} MTP", moe=moe))
    head_dim = model.hidden // model.n_heads if model.mla is not None else model.head_dim
    return model.model_copy(update=common | dict(
        name=f"{model.name} EAGLE-3", moe=None, mla=None, sparse_attention=None, attention_output_gate=False,
        head_dim=head_dim, mlp="swiglu", linear_bias="none", ffn_hidden=spec.draft_ffn_hidden or model.ffn_hidden,
        vocab=spec.draft_vocab or model.vocab, tie_embeddings=False))


def published_acceptance(s: SpeculativeConfig, model: ModelConfig) -> SpeculativeConfig:
    """`s` (no acceptance stated) with the model's published acceptance rate of its own MTP draft
    (ModelConfig.mtp_acceptance: DeepSeek-V3's report, Sec. 5.4.3, for its architecture), `assumed` naming it;
    InputError where the model publishes none or the draft is an EAGLE-3 layer (its acceptance is the draft
    checkpoint's, not the model's)."""
    if s.method == "mtp" and model.mtp_acceptance is not None:
        a = model.mtp_acceptance
        return s.model_copy(update={"acceptance_rate": a.rate, "assumed": a.source})
    from ..model.presets import PRESETS

    known = [k for k, v in PRESETS.items() if v.get("mtp_acceptance")]
    why = ("an EAGLE-3 draft's acceptance is its checkpoint's" if s.method == "eagle" else
           f"{model.name} publishes no acceptance for its MTP module (models that do: {', '.join(known)})")
    raise InputError(f"speculative.method = {s.method} needs its acceptance stated: {why}; valid: acceptance_rate "
                     "(--acceptance-rate A, each draft token's) or acceptance_length (--acceptance-length L, tokens a "
                     "step)")
