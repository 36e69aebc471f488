"""`fathom export RUN_DIR`: publishable weights, a model card and a manifest from a training run; optionally
uploaded to the Hugging Face Hub.

    fathom export runs/grpo                                   # -> runs/grpo/export/
    fathom export runs/grpo --checkpoint latest --evals runs/eval --dtype float16
    fathom export runs/grpo --push-to-hub me/fathom-rlm-1.5b --private

What is written under OUT (default ``RUN_DIR/export``), in this order:

1. LoRA runs: ``adapter/`` (the adapter files as trained, plus the tokenizer), then ``merged/``: the base
   reloaded in 16-bit on the CPU, the adapter applied and merged (`fathom.train.checkpoint.merge_adapter`;
   never merged into a 4-bit model). Full fine-tunes: ``model/``, the weights cast to 16-bit. Each weights
   directory is written atomically and carries its own ``README.md`` (library ``peft`` for the adapter,
   ``transformers`` otherwise).
2. ``README.md``: the model card (`fathom.publish.card`) with the evaluation table of every finished eval in
   ``RUN_DIR/evals/`` and in ``--evals`` directories, and the run's resolved config.
3. ``export.json``: the source checkpoint and step, the base, the dtype, and the sha256 of each weight file.
   It is written last, so its presence means the export is complete.

The source is ``RUN_DIR/final`` (what `fathom grpo` / `fathom sft` exported) or a checkpoint (``checkpoint-N``
or ``latest``): an adapter checkpoint is merged over the same base as the run's own export would be.

``--push-to-hub REPO`` then creates the repo (``exist_ok``) and uploads: the merged (or full) model at the
root, so ``AutoModelForCausalLM.from_pretrained(REPO)`` loads it, and the adapter under ``adapter/``
(``PeftModel.from_pretrained(base, REPO, subfolder="adapter")``). A hub error is reported in one line with a
non-zero exit status; the local export stays as written.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from fathom.train import checkpoint

DTYPES = ("bfloat16", "float16")
WEIGHT_SUFFIXES = (".safetensors", ".bin")
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "adapter_model.bin")
MANIFEST = "export.json"
WEIGHT_DIRS = ("adapter", "merged", "model")
OUT_NAMES = {MANIFEST, "README.md", *WEIGHT_DIRS, *(f"{checkpoint.TMP_PREFIX}{d}" for d in WEIGHT_DIRS)}


class ExportError(RuntimeError):
    """The run, checkpoint, eval directory or option asked for cannot be exported; the message says why."""


class PushError(RuntimeError):
    """The hub refused or could not be reached; the local export is complete."""


def _source(run_dir: Path, which: str) -> tuple[str, Path, str, int | None]:
    """(name, weights dir, kind 'lora' | 'full', step) of the weights to export."""
    if which == "final":
        final = run_dir / "final"
        summary = run_dir / "summary.json"
        step = json.loads(summary.read_text(encoding="utf-8")).get("steps") if summary.is_file() else None
        if (final / "adapter" / ADAPTER_FILES[0]).is_file():
            return "final", final / "adapter", "lora", step
        if (final / "model" / "config.json").is_file():
            return "final", final / "model", "full", step
        raise ExportError(
            f"{final} holds neither adapter/ nor model/ (has the run finished?); "
            "export a checkpoint instead with --checkpoint latest"
        )
    found = dict((p.name, p) for _, p in checkpoint.checkpoints(run_dir))
    if which == "latest":
        path = checkpoint.latest(run_dir)
        if path is None:
            raise ExportError(f"{run_dir} holds no checkpoint-N directory")
    elif re.fullmatch(rf"{checkpoint.PREFIX}\d+", which):
        if which not in found:
            raise ExportError(f"{run_dir} has no {which}; it has: {', '.join(found) or 'no checkpoints'}")
        path = found[which]
    else:
        raise ExportError(f"--checkpoint must be final, latest or checkpoint-N; got {which!r}")
    step = checkpoint.read_state(path)["step"]
    if (path / ADAPTER_FILES[0]).is_file():
        return path.name, path, "lora", step
    if (path / "config.json").is_file():
        return path.name, path, "full", step
    raise ExportError(f"{path} holds neither a LoRA adapter nor a model")


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _tokenizer(source: Path, base: str) -> Any:
    from transformers import AutoTokenizer

    from fathom.models import resolve_model_dir

    # checkpoints and exports carry the tokenizer the run trained with; fall back to the base's
    has_own = (source / "tokenizer_config.json").is_file()
    return AutoTokenizer.from_pretrained(source if has_own else resolve_model_dir(base))


def export_run(
    run_dir: str | Path,
    out: str | Path | None = None,
    which: str = "final",
    evals: list[str | Path] | tuple[str | Path, ...] = (),
    dtype: str = "bfloat16",
) -> dict[str, Any]:
    """Write OUT's weights, cards and manifest (module docstring); returns the manifest."""
    import torch

    from fathom.publish.card import model_card, read_evals
    from fathom.train.config import ConfigError
    from fathom.train.configfile import load_config
    from fathom.train.policy import merge_base

    if dtype not in DTYPES:
        raise ExportError(
            f"--dtype {dtype}: exported weights are 16-bit ({' or '.join(DTYPES)}); never float32 or 4-bit"
        )
    run_dir = Path(run_dir).resolve()  # the manifest's paths hold wherever it is read from
    config_file = run_dir / "config.toml"
    if not config_file.is_file():
        raise ExportError(f"{run_dir} is not a FATHOM run directory: it has no config.toml")
    try:
        config = load_config(config_file)
    except ConfigError as exc:
        raise ExportError(f"{config_file}: {exc}") from exc
    name, source, kind, step = _source(run_dir, which)
    base = merge_base(config.model)
    stage = "sft" if (run_dir / "transcripts.jsonl").exists() else "grpo"  # only `fathom sft` writes it
    own = run_dir / "evals"
    eval_dirs = [own] if own.is_dir() and any(own.glob("*/summary.json")) else []
    try:
        summaries = read_evals([*eval_dirs, *map(Path, evals)])
    except (OSError, ValueError) as exc:
        raise ExportError(str(exc)) from exc
    out = Path(out).resolve() if out is not None else run_dir / "export"

    def card(library: str) -> str:
        return model_card(
            config=config,
            config_toml=config_file.read_text(encoding="utf-8"),
            base=base,
            library_name=library,
            stage=stage,
            step=step,
            checkpoint=name,
            evals=summaries,
            run_dir=run_dir,
        )

    root_card = card("transformers")
    out.mkdir(parents=True, exist_ok=True)
    foreign = sorted(p.name for p in out.iterdir() if p.name not in OUT_NAMES)
    if foreign:  # OUT is rewritten below: never a directory holding anything else
        raise ExportError(f"--out {out} holds files an export does not write ({', '.join(foreign[:5])})")
    # A re-export never leaves a manifest or a merged model that belongs to the previous adapter.
    for stale in (MANIFEST, "README.md", "merged", "model"):
        path = out / stale
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    tokenizer = _tokenizer(source, base)
    torch_dtype = getattr(torch, dtype)
    written: dict[str, Path] = {}
    if kind == "lora":
        adapter_card = card("peft")

        def save_adapter(d: Path) -> None:
            for file in ADAPTER_FILES:
                if (source / file).is_file():
                    shutil.copy2(source / file, d / file)
            tokenizer.save_pretrained(d)
            (d / "README.md").write_text(adapter_card, encoding="utf-8")

        def save_merged(d: Path) -> None:
            checkpoint.merge_adapter(written["adapter"], base, torch_dtype, tokenizer, d)
            (d / "README.md").write_text(root_card, encoding="utf-8")

        written["adapter"] = checkpoint.atomic_save(out / "adapter", save_adapter)
        try:
            written["merged"] = checkpoint.atomic_save(out / "merged", save_merged)
        except ValueError as exc:  # e.g. a quantized base: the adapter above is still a complete export
            staging = checkpoint.staging_dir(out / "merged")
            if staging.exists():
                shutil.rmtree(staging)
            raise ExportError(f"{exc} (the adapter is written: {written['adapter']})") from exc
    else:
        from transformers import AutoModelForCausalLM

        def save_full(d: Path) -> None:
            model = AutoModelForCausalLM.from_pretrained(source, dtype=torch_dtype)
            model.save_pretrained(d)
            tokenizer.save_pretrained(d)
            (d / "README.md").write_text(root_card, encoding="utf-8")

        written["model"] = checkpoint.atomic_save(out / "model", save_full)
    (out / "README.md").write_text(root_card, encoding="utf-8")
    manifest = {
        "run_dir": str(run_dir),
        "out": str(out),
        "source": str(source),
        "checkpoint": name,
        "step": step,
        "stage": stage,
        "kind": kind,
        "base_model": base,
        "dtype": dtype,
        "written": {k: str(v) for k, v in written.items()},
        "sha256": {
            str(f.relative_to(out)): _sha256(f)
            for d in written.values()
            for f in sorted(d.rglob("*"))
            if f.suffix in WEIGHT_SUFFIXES
        },
        "evals": [str(e.directory) for e in summaries],
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    return manifest


def hub_errors() -> tuple[type[BaseException], ...]:
    """What the hub client raises for a refused request, a bad id or a network it cannot reach."""
    from huggingface_hub.errors import HfHubHTTPError, HFValidationError

    # Transport failures (connection refused) come as the HTTP library's own error, which is
    # HfHubHTTPError's other base (httpx2 in huggingface_hub 2.x); offline mode and missing tokens are OSErrors.
    return (OSError, HFValidationError, *HfHubHTTPError.__bases__)


def push(out: str | Path, repo: str, private: bool = False, token: str | None = None) -> str:
    """Upload a finished export: the adapter to ``adapter/`` first, then the merged (or full) model to the
    root. Returns the repo's URL; raises `PushError` with the hub's reason."""
    from huggingface_hub import HfApi

    out = Path(out)
    manifest_file = out / MANIFEST
    if not manifest_file.is_file():
        raise PushError(f"{out} holds no {MANIFEST}: run `fathom export` to completion before pushing")
    written = json.loads(manifest_file.read_text(encoding="utf-8"))["written"]
    uploads = [(Path(written["adapter"]), "adapter")] if "adapter" in written else []
    uploads.append((Path(written.get("merged") or written["model"]), ""))
    api = HfApi(token=token)
    try:
        url = api.create_repo(repo, private=private, exist_ok=True)
        for folder, path_in_repo in uploads:
            api.upload_folder(
                repo_id=repo,
                folder_path=folder,
                path_in_repo=path_in_repo,
                commit_message=f"fathom export: {path_in_repo or folder.name}",
            )
    except hub_errors() as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise PushError(
            f"push to the hub repo {repo} failed ({type(exc).__name__}: {reason}); the export in {out} is complete"
        ) from exc
    return str(url)


def main(args: argparse.Namespace) -> int:
    from fathom.models import ModelLoadError

    if args.push_to_hub:
        from huggingface_hub.utils import validate_repo_id

        try:  # before the merge, which may take minutes, not after
            validate_repo_id(args.push_to_hub)
        except ValueError as exc:
            print(f"fathom export: error: --push-to-hub {args.push_to_hub!r}: {exc}", file=sys.stderr)
            return 2
    try:
        manifest = export_run(args.run_dir, args.out, args.checkpoint, args.evals, args.dtype)
    except (ExportError, ModelLoadError, FileNotFoundError) as exc:
        print(f"fathom export: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({k: manifest[k] for k in ("checkpoint", "step", "kind", "dtype", "written")}, indent=2))
    if args.push_to_hub:
        try:
            url = push(manifest["out"], args.push_to_hub, private=args.private, token=args.token)
        except PushError as exc:
            print(f"fathom export: error: {exc}", file=sys.stderr)
            return 1
        print(f"pushed: {url}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "export", help="adapter, merged 16-bit model and model card from a run; optionally to the Hub"
    )
    p.add_argument("run_dir", type=Path, help="a `fathom grpo` / `fathom sft` run directory")
    p.add_argument("--checkpoint", default="final", help="final (default), latest or checkpoint-N")
    p.add_argument("--out", type=Path, help="output directory (default RUN_DIR/export)")
    p.add_argument(
        "--evals",
        nargs="*",
        default=[],
        type=Path,
        help="eval dirs (or dirs of them) to add to RUN_DIR/evals",
    )
    p.add_argument("--dtype", default="bfloat16", help="bfloat16 (default) or float16; nothing else")
    p.add_argument("--push-to-hub", metavar="REPO", help="upload to this Hugging Face Hub repo (owner/name)")
    p.add_argument("--private", action="store_true", help="create the hub repo private")
    p.add_argument("--token", help="hub token (default: HF_TOKEN or the cached `hf auth login`)")
    p.set_defaults(func=main)
