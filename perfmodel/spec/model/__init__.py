"""The model a user describes: `ModelConfig` and where it comes from (a preset, a HuggingFace config.json, a file), the tokenizer's vocabulary and the operators of a training step by name.

- `catalogue`: The model catalogue: a model by preset name, HuggingFace config.json or ModelConfig file, and the preset list.
- `config`: Model schema (a decoder-only transformer, dense or mixture-of-experts, with grouped-query or DeepSeek's
- `global_attention`: The attention shape of a model's global (full-attention) layers where it differs from its windowed layers'
- `hf_config`: HuggingFace config.json onto ModelConfig: dense (gpt2, llama, mistral, qwen2, qwen3, mimo, gpt_neox, gemma3, gemma4) and
- `hf_gemma4`: Gemma 4's text model (model_type gemma4_text, or the text_config of a gemma4 wrapper) onto ModelConfig fields, as
- `operators`: The operators of a decoder-only transformer's training step, by the names every part of perfmodel uses.
- `presets`: Built-in model presets, each with the source of its shape.
- `tokenizers`: The vocabulary a tokenizer name gives, for framework configs that name a tokenizer instead of a vocabulary size:

It imports only the lower stages (`perfmodel.errors`, `perfmodel.types`, `perfmodel.files`) and `perfmodel.spec`.
"""
