"""The vocabulary a tokenizer name gives, for framework configs that name a tokenizer instead of a vocabulary size:
Megatron-LM's --tokenizer-type, a --tokenizer-model file (nemotron_2_256k.model), a tiktoken encoding, a Hugging Face
tokenizer id (the vocabulary of that model's config.json). Only sizes with a source; anything else is None, and the
reader asks for the size (--vocab-size) instead of guessing.

The size is the tokenizer's: Megatron-LM pads it to a multiple of --make-vocab-size-divisible-by x tp
(perfmodel.ingest.megatron.keys.VOCAB_DIVISOR), which the reader does, not this table.
"""

from __future__ import annotations

import re

from .catalogue import preset_for_hf_id
from .presets import PRESETS

_MEGATRON = "NVIDIA/Megatron-LM d98e8a64"

# name -> (vocabulary, source)
TOKENIZERS: dict[str, tuple[int, str]] = {
    # Megatron-LM --tokenizer-type values whose vocabulary the type alone fixes
    "GPT2BPETokenizer": (50257, "GPT-2's vocab.json + merges.txt: 50257 tokens (Radford et al. 2019; the HF gpt2 "
                                "config.json vocab_size)"),
    "Llama2Tokenizer": (32000, "Llama 2's SentencePiece model: 32000 tokens (Touvron et al. 2023, Sec. 2.1: 'total "
                               "vocabulary size is 32k tokens'; the HF Llama-2 config.json vocab_size)"),
    # TikTokenizer without --vocab-size: build_tokenizer.py passes vocab_size only when given, and
    # TikTokenizer.__init__ defaults it to DEFAULT_TIKTOKEN_MAX_VOCAB = 2**17
    "TikTokenizer": (131072, f"{_MEGATRON} megatron/core/tokenizers/text/libraries/tiktoken_tokenizer.py:24 "
                             "DEFAULT_TIKTOKEN_MAX_VOCAB = 2**17 (the size when --vocab-size is not given)"),
    # --tokenizer-model files. nemotron_2_256k.model (Megatron-LM tests/functional_tests gpt3_15b_8t_release with
    # GPTSentencePieceTokenizer; NeMo's Nemotron-4 recipes): Nemotron-4's SentencePiece vocabulary
    "nemotron_2_256k": (256000, "Nemotron-4's SentencePiece tokenizer: vocabulary 256,000 (Parmar et al. 2024, "
                                "Nemotron-4 15B technical report, Table 1; transformers' NemotronConfig "
                                "vocab_size default 256000)"),
    # tiktoken encodings (openai/tiktoken tiktoken_ext/openai_public.py): the highest special token id + 1
    "o200k_harmony": (201088, "tiktoken o200k_harmony: reserved special tokens up to id 201087 (openai_public.py); "
                              "openai/gpt-oss-* config.json vocab_size 201088"),
    "o200k_base": (200019, "tiktoken o200k_base: <|endofprompt|> is id 200018 (openai_public.py)"),
    "cl100k_base": (100277, "tiktoken cl100k_base: <|endofprompt|> is id 100276 (openai_public.py)"),
}
_BY_LOWER = {k.lower(): k for k in TOKENIZERS}


def tokenizer_vocab(name: str) -> tuple[int, str] | None:
    """(vocabulary size, its source) of the tokenizer `name` names, or None where no source gives one.

    `name`: a Megatron-LM --tokenizer-type (GPT2BPETokenizer, Llama2Tokenizer, TikTokenizer), a tokenizer file's path
    or name (${DATA_PATH}/utils/nemotron_2_256k.model), a tiktoken encoding (o200k_harmony), or a Hugging Face id
    (meta-llama/Meta-Llama-3-8B, Qwen/Qwen3-8B) whose model has a preset: that config.json's vocab_size, the
    embedding's rows, which a model may pad beyond its tokenizer's own count."""
    text = name.strip()
    base = re.sub(r"\.(model|json|tiktoken|vocab)$", "", text.rstrip("/").split("/")[-1], flags=re.I)
    for key in (text, base):
        if key.lower() in _BY_LOWER:
            return TOKENIZERS[_BY_LOWER[key.lower()]]
    if "/" in text and not text.startswith(("/", ".", "$", "~")):
        preset = preset_for_hf_id(text)
        if preset is not None:
            return PRESETS[preset]["vocab"], f"{text}: vocab_size of preset {preset} ({PRESETS[preset]['source']})"
    return None
