"""Fixtures for the benchmark scripts' tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGUFWriter

CHAT_TEMPLATE = "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"


@pytest.fixture(scope="module")
def tokenizer_gguf(tmp_path_factory) -> Path:
    """A GGUF holding only a 260-token byte-level BPE tokenizer, so the models stay tiny."""
    path = tmp_path_factory.mktemp("tok") / "tokenizer.gguf"
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [f"t{i}" for i in range(256)] + ["t1t2"]
    writer = GGUFWriter(path, "llama")
    writer.add_string("tokenizer.ggml.model", "gpt2")
    writer.add_string("tokenizer.ggml.pre", "smollm")
    writer.add_array("tokenizer.ggml.tokens", tokens)
    writer.add_array("tokenizer.ggml.token_type", [3, 3, 3] + [1] * 257)
    writer.add_array("tokenizer.ggml.merges", ["t1 t2"])
    writer.add_uint32("tokenizer.ggml.bos_token_id", 1)
    writer.add_uint32("tokenizer.ggml.eos_token_id", 2)
    writer.add_string("tokenizer.chat_template", CHAT_TEMPLATE)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    return path
