"""Tiny model directories: loadable by us, by transformers and by the `tokenizers` library."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoConfig

from lego_rl.model import load_model
from lego_rl.model.byte_tokenizer import VOCAB_SIZE
from lego_rl.model.tiny import TokenizerNotFoundError, find_qwen3_tokenizer_dir, main, write_tiny_model

FILES = {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"}


def test_bytes_model_dir_is_complete_and_deterministic(tmp_path: Path):
    a = write_tiny_model(tmp_path / "a", tokenizer="bytes", seed=1)
    b = write_tiny_model(tmp_path / "b", tokenizer="bytes", seed=1)
    c = write_tiny_model(tmp_path / "c", tokenizer="bytes", seed=2)
    assert {p.name for p in a.iterdir()} == FILES
    weights = [(d / "model.safetensors").read_bytes() for d in (a, b, c)]
    assert weights[0] == weights[1] and weights[0] != weights[2]
    hf_config = AutoConfig.from_pretrained(a)
    assert (hf_config.model_type, hf_config.vocab_size, hf_config.num_experts) == ("qwen3_moe", VOCAB_SIZE, 8)
    model = load_model(a)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert model(torch.tensor([[1, 2, 3]])).logits.shape == (1, 3, VOCAB_SIZE)


def test_byte_tokenizer_maps_bytes_to_ids_and_specials_after(tmp_path: Path):
    d = write_tiny_model(tmp_path, tokenizer="bytes", seed=0)
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    text = "<|im_start|>user\nhé 世<|im_end|>\n"
    ids = tok.encode(text).ids
    assert ids == [257, *"user\nhé 世".encode(), 258, 10]
    assert tok.decode(ids, skip_special_tokens=False) == text
    assert tok.get_vocab_size() == VOCAB_SIZE
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    assert cfg["eos_token"] == "<|im_end|>" and "<|im_start|>" in cfg["chat_template"]


def test_qwen3_model_dir_carries_the_real_tokenizer_and_template(tmp_path: Path):
    try:
        find_qwen3_tokenizer_dir()
    except TokenizerNotFoundError as err:
        pytest.skip(str(err))  # needs `pnpm install` in ts/
    d = write_tiny_model(tmp_path, tokenizer="qwen3", seed=0)
    tok = Tokenizer.from_file(str(d / "tokenizer.json"))
    config = json.loads((d / "config.json").read_text())
    assert config["vocab_size"] == tok.get_vocab_size() == 151_669
    assert tok.encode("<|im_start|>user\nhi<|im_end|>").ids == [151644, 872, 198, 6023, 151645]
    template = json.loads((d / "tokenizer_config.json").read_text())["chat_template"]
    assert "<tool_call>" in template and "<think>" in template
    assert json.loads((d / "generation_config.json").read_text())["eos_token_id"] == [151645, 151643]


def test_cli_writes_a_model_dir(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    main(["--out", str(tmp_path / "m"), "--tokenizer", "bytes", "--seed", "3"])
    assert json.loads(capsys.readouterr().out) == {"model_dir": str(tmp_path / "m"), "tokenizer": "bytes", "seed": 3}
    assert {p.name for p in (tmp_path / "m").iterdir()} == FILES


def test_js_tokenizers_library_reads_the_byte_tokenizer_identically(tmp_path: Path):
    ts_dir = Path(__file__).resolve().parents[3] / "ts"
    if shutil.which("node") is None or not (ts_dir / "node_modules/@huggingface/tokenizers").is_dir():
        pytest.skip("needs node and `pnpm install` in ts/")
    d = write_tiny_model(tmp_path, tokenizer="bytes", seed=0)
    script = (
        'import { Tokenizer } from "@huggingface/tokenizers"; import fs from "fs";'
        "const [dir, text] = process.argv.slice(1);"
        'const read = (f) => JSON.parse(fs.readFileSync(`${dir}/${f}`, "utf8"));'
        'const tok = new Tokenizer(read("tokenizer.json"), read("tokenizer_config.json"));'
        "const ids = tok.encode(text).ids;"
        "console.log(JSON.stringify({ ids, text: tok.decode(ids, { skip_special_tokens: false }) }));"
    )
    text = "<|im_start|>user\nhé 世<|im_end|>\n"
    out = subprocess.run(
        ["node", "--input-type=module", "-e", script, str(d), text], cwd=ts_dir, capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == {"ids": [257, *"user\nhé 世".encode(), 258, 10], "text": text}
