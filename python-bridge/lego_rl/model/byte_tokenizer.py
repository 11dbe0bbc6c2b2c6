"""A byte-level toy tokenizer in the Hugging Face tokenizers JSON format.

Token id b (0..255) is byte b, so any UTF-8 text round-trips and tests can predict ids
without a tokenizer. Ids 256.. are ChatML specials, so the proxy's chat-template path runs
exactly as with Qwen3. It is a BPE model with no merges over the GPT-2 byte-to-unicode
alphabet (the ByteLevel pre-tokenizer and decoder map bytes to those characters), which
both Python `tokenizers` and JS `@huggingface/tokenizers` load.
"""

from __future__ import annotations

from typing import Any

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
"""Ids 256, 257, 258 — the ChatML markers Qwen3 uses (pad, turn start, turn end / EOS)."""

VOCAB_SIZE = 256 + len(SPECIAL_TOKENS)

# ChatML, as the Qwen3 template renders plain (tool-free, think-free) conversations.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def _byte_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map used by ByteLevel (Radford et al. 2019)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    mapping, extra = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + extra)
            extra += 1
    return mapping


def _added(token_id: int, content: str) -> dict[str, Any]:
    return {
        "id": token_id,
        "content": content,
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": False,
        "special": True,
    }


def tokenizer_json() -> dict[str, Any]:
    """tokenizer.json contents."""
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    vocab = {ch: b for b, ch in _byte_to_unicode().items()}
    vocab.update({tok: 256 + i for i, tok in enumerate(SPECIAL_TOKENS)})
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [_added(256 + i, tok) for i, tok in enumerate(SPECIAL_TOKENS)],
        "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": [],
        },
    }


def tokenizer_config_json(model_max_length: int) -> dict[str, Any]:
    """tokenizer_config.json contents (the chat template lives here, as in Qwen3's)."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {
            str(a["id"]): {k: v for k, v in a.items() if k != "id"}
            for a in tokenizer_json()["added_tokens"]
        },
    }
