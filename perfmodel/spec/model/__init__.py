"""The model a user describes (`ModelConfig`), and where it comes from.

- `config`: the schema: a decoder-only transformer, dense or mixture-of-experts, and its parameter counts.
- `catalogue`: a model by preset name, HuggingFace config.json or file (`load_model`).
- `presets`: the built-in presets, each with the source of its shape.
- `hf_config`: a HuggingFace config.json onto `ModelConfig`, by model_type; `hf_gemma4`: Gemma 4's.
- `global_attention`: global layers whose attention shape differs from the windowed layers'.
- `tokenizers`: the vocabulary a tokenizer name gives.
- `torchtitan_flavors`: torchtitan's model families and flavors as shapes, read by its exporter and its reader.
- `operators`: the operators of a training step, by the names every part of perfmodel uses.

It may import what `spec` may: `errors`, `types`, `files` (perfmodel.layers).
"""
