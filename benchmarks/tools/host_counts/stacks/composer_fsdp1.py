"""llm-foundry's MPT under Composer (the composer-fsdp1 profile): calls per operator read from its source, not run."""

from benchmarks.tools.host_counts.stacks import op

FOUNDRY = "mosaicml/llm-foundry@8c8dd48f72168c5d51e2f7b151595892a8fba43d"

COUNTS = {
    "embedding": op({"module_call": 1, "eager_op": 1}, {"autograd_node": 3},
                    "MPTModel.forward (llmfoundry/models/mpt/modeling_mpt.py): wte (SharedEmbedding), "
                    "the autocast cast of the embedding output"),
    "embedding_output": op({"module_call": 1, "eager_op": 2, "view_op": 1}, {"autograd_node": 3},
                           "learned positions: arange, wpe, add; emb_drop (nn.Dropout(p=0): a call that launches "
                           "nothing, view_op); the per-forward flash_attn_padding_info (unpad indices, "
                           "cu_seqlens: "
                           "several eager ops) not itemised"),
    "norm1": op({"module_call": 1, "eager_op": 3}, {"autograd_node": 6},
                "LPLayerNorm (llmfoundry/models/layers/norm.py: a torch LayerNorm subclass): "
                "_cast_if_autocast_enabled of x, weight, bias (3 casts), F.layer_norm with autocast off"),
    "qkv": op({"view_op": 1, "module_call": 1, "eager_op": 3}, {"autograd_node": 9},
              "attention module call; Wqkv nn.Linear under bf16 autocast (casts of x, weight, bias), biases "
              "(no_bias False)"),
    "attention": op({"eager_op": 5, "view_op": 9}, {"autograd_node": 13},
                    "qkv.split; flash_attn_fn (llmfoundry/models/layers/attention.py): 3 x (rearrange + "
                    "bert_padding.index_first_axis (a Function: gather) + rearrange), flash_attn_varlen_func, "
                    "pad_input (IndexPutFirstAxis Function) + rearrange"),
    "out_proj": op({"module_call": 1, "eager_op": 2}, {"autograd_node": 8}, "out_proj nn.Linear (bf16 input "
                   "already: weight and bias casts)"),
    "residual1": op({"view_op": 1, "eager_op": 1}, {"autograd_node": 1},
                    "resid_attn_dropout (nn.Dropout(p=0): returns its input, no node) + add"),
    "norm2": op({"module_call": 1, "eager_op": 3}, {"autograd_node": 6}),
    "mlp_in": op({"view_op": 2, "module_call": 1, "eager_op": 3}, {"autograd_node": 9},
                 "apply_ffn (m.size(), padding branch off), MPTMLP call, up_proj"),
    "activation": op({"module_call": 1}, {"autograd_node": 1}, "nn.GELU(approximate='none')"),
    "mlp_out": op({"module_call": 1, "eager_op": 2}, {"autograd_node": 8}),
    "residual2": op({"view_op": 1, "eager_op": 1}, {"autograd_node": 1},
                    "resid_ffn_dropout (p=0), x.to(device) and .to(device) (no-ops: meta), add"),
    "final_norm": op({"module_call": 1, "eager_op": 3}, {"autograd_node": 6}),
    "lm_head": op({"eager_op": 3}, {"autograd_node": 5}, "tied: F.linear(x, wte.weight) under autocast"),
    "loss": op({"eager_op": 4, "view_op": 3}, {"autograd_node": 4}, "ComposerMPTCausalLM.loss: roll targets, "
               "view, cross_entropy"),
    "_layer": op({"view_op": 1}, {}, "MPTBlock call (FSDP1 per-block hooks: _fsdp2-like all-gather / reduce-"
                 "scatter per wrapped block, FullyShardedDataParallel._pre_forward/_post_forward, in "
                 "torch/distributed/fsdp/_runtime_utils.py)"),
    "_source": f"read: {FOUNDRY} llmfoundry/models/layers/blocks.py MPTBlock, attention.py "
               "GroupedQueryAttention/flash_attn_fn, ffn.py MPTMLP, norm.py LPLayerNorm, mpt/modeling_mpt.py; "
               "MPT defaults (attn_impl flash, low_precision_layernorm, learned positions, biases, GELU, dropouts "
               "0: nn.Dropout(p=0) calls launch nothing and add no node), Composer amp_bf16 (torch.autocast); "
               "approximate (not run)",
}
