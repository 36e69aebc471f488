"""`fathom export`: a run's adapter then its merged 16-bit model, the model card, the manifest and the upload.

A run directory is built the way `fathom grpo` leaves one: the resolved config.toml, a real tiny-smol LoRA
adapter (its B matrices set away from zero, so the merge changes the model) exported to final/adapter by
`checkpoint.export`, a checkpoint-3 holding the same adapter and its fathom state, and an eval summary.json
whose groups `fathom.eval.stats.summarize` computed from rows. No hub is reachable from here, so the upload
is tested up to the network: against an endpoint that refuses connections and in offline mode (the real
client, real errors), and with `HfApi.create_repo` / `upload_folder` replaced by recorders to check what
they would be sent.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file

from fathom.cli import main as fathom_main
from fathom.eval.stats import summarize
from fathom.models import LoraSpec, ModelSpec, load_model, resolve_model_dir
from fathom.publish.card import model_card
from fathom.publish.export import ExportError, PushError, export_run, push
from fathom.train import checkpoint
from fathom.train.config import CheckpointConfig
from fathom.train.configfile import config_from_dict, dump_toml, load_config

TINY = Path(__file__).parents[2] / "configs" / "tiny-cpu.toml"
SRC = Path(__file__).parents[2] / "src"
TEXT = "The quick brown fox jumps over the lazy dog near the river bank"


def eval_rows(correct: list[bool], family: str, length: int) -> list[dict]:
    return [
        {
            "id": f"{family}-{length}-{i}",
            "family": family,
            "length_tokens": length,
            "correct": c,
            "reward": float(c),
        }
        for i, c in enumerate(correct)
    ]


def write_eval(directory: Path, policy: str, label: str, model: str | None, rows: list[dict]) -> dict:
    directory.mkdir(parents=True)
    summary = {
        "policy": policy,
        "label": label,
        "model": model,
        "task_file": "data/heldout.jsonl",
        "n_tasks": len(rows),
        "n_rows": len(rows),
        "groups": summarize(rows),
    }
    (directory / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """(run dir, the trained PEFT model, the eval summary written into RUN/evals)."""
    run_dir = tmp_path_factory.mktemp("run")
    config = load_config(TINY, [f"--run.run_dir={run_dir}"])
    (run_dir / "config.toml").write_text(dump_toml(config))
    model, tokenizer = load_model(
        ModelSpec("tiny-smol", lora=LoraSpec(r=8, alpha=16, dropout=0.0), device="cpu")
    )
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # a fresh adapter's B is zero (merging it changes nothing): give it a real update
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    model.eval()
    checkpoint.export(model, tokenizer, run_dir / "final", "tiny-smol", CheckpointConfig(export_merged=False))
    ckpt = run_dir / "checkpoint-3"
    model.save_pretrained(ckpt)
    tokenizer.save_pretrained(ckpt)
    checkpoint.write_state(ckpt, {"step": 3, "recipe": {"tier": 0}})
    (ckpt / "config.toml").write_text(dump_toml(config))
    (run_dir / "summary.json").write_text(json.dumps({"steps": 3}))
    rows = eval_rows([True, True, False], "niah", 8192) + eval_rows([True, False], "vartrack", 32768)
    trained = write_eval(
        run_dir / "evals" / "rlm-trained", "rlm", "rlm (SFT+GRPO)", str(run_dir / "final" / "merged"), rows
    )
    return run_dir, model, tokenizer, trained


@pytest.fixture(scope="module")
def exported(run, tmp_path_factory):
    run_dir, *_ = run
    baseline = tmp_path_factory.mktemp("baselines")
    direct = write_eval(
        baseline / "direct", "direct", "direct (untrained)", "tiny-smol", eval_rows([False] * 4, "niah", 8192)
    )
    manifest = export_run(run_dir, evals=[baseline])
    return Path(manifest["out"]), manifest, direct


def logits(model, tokenizer) -> torch.Tensor:
    ids = tokenizer(TEXT, return_tensors="pt").input_ids
    with torch.no_grad():
        return model(ids).logits.float()  # (1, T, vocab)


def front_matter(card: str) -> dict:
    match = re.match(r"^---\n(.*?)\n---\n", card, re.S)
    assert match, card[:200]
    return yaml.safe_load(match.group(1))


def test_adapter_then_merged_16bit_model_equal_to_base_plus_adapter(run, exported):
    run_dir, model, tokenizer, _ = run
    out, manifest, _ = exported
    adapter, merged = out / "adapter" / "adapter_model.safetensors", out / "merged" / "model.safetensors"
    assert manifest["written"] == {"adapter": str(out / "adapter"), "merged": str(out / "merged")}
    assert adapter.stat().st_mtime_ns < merged.stat().st_mtime_ns  # the adapter is on disk first
    source = load_file(run_dir / "final" / "adapter" / "adapter_model.safetensors")
    copied = load_file(adapter)
    assert copied.keys() == source.keys() and all(torch.equal(copied[k], source[k]) for k in source)
    weights = load_file(merged)
    assert {t.dtype for t in weights.values()} == {torch.bfloat16}
    assert not any("lora" in k for k in weights)
    assert not list(out.glob(".tmp-*"))

    from transformers import AutoModelForCausalLM

    reloaded = AutoModelForCausalLM.from_pretrained(out / "merged")
    assert reloaded.dtype == torch.bfloat16
    peft_logits = logits(model, tokenizer)
    with model.disable_adapter():
        base_logits = logits(model, tokenizer)
    merged_logits = logits(reloaded, tokenizer)
    # bf16 keeps ~3 significant digits; the adapter moves the logits ~100x more than that
    assert (merged_logits - peft_logits).abs().max() < 0.03
    assert (base_logits - peft_logits).abs().max() > 0.3


def test_model_card_holds_the_eval_table_the_training_and_the_config(run, exported):
    run_dir, _, _, trained = run
    out, _, direct = exported
    card = (out / "README.md").read_text()
    meta = front_matter(card)
    assert meta["library_name"] == "transformers"
    assert {"fathom", "rlm", "grpo", "lora"} <= set(meta["tags"])
    assert "base_model" not in meta  # tiny-smol is an offline name, not a hub id
    assert "license" not in meta  # the tiny base's card declares none
    assert (out / "merged" / "README.md").read_text() == card
    adapter_card = (out / "adapter" / "README.md").read_text()
    assert front_matter(adapter_card)["library_name"] == "peft"

    assert "writes Python in a sandboxed REPL" in card and "`llm(prompt," in card
    assert "- LoRA: rank 8, alpha 16" in card and "after 3 steps" in card and "`dapo` loss" in card

    def line(*cells) -> str:
        return "| " + " | ".join(str(c) for c in cells) + " |"

    def pct(x: float) -> str:
        return f"{100 * x:.1f}%"

    def stats(s: dict) -> list:
        return [s["n"], pct(s["accuracy"]), f"{pct(s['ci_low'])} – {pct(s['ci_high'])}"]

    g = trained["groups"]
    assert (g["all"]["n"], g["all"]["correct"]) == (5, 3)
    overall = line("rlm", "rlm (SFT+GRPO)", "this run: final/merged", "heldout", *stats(g["all"]))
    baseline = line("direct", "direct (untrained)", "tiny-smol", "heldout", *stats(direct["groups"]["all"]))
    assert overall in card and baseline in card
    assert card.index(baseline) < card.index(overall)  # baselines first, as in `fathom report`
    assert "| rlm | rlm (SFT+GRPO) | this run: final/merged | heldout | 5 | 60.0% | 23.1% – 88.2% |" in card
    for kind, name in (("family", "niah"), ("family", "vartrack"), ("length", "8K"), ("length", "32K")):
        assert line("rlm (SFT+GRPO)", "heldout", name, *stats(g[f"{kind}/{name}"])) in card

    block = re.search(r"```toml\n(.*?)```", card, re.S).group(1)
    run_config = (run_dir / "config.toml").read_text()
    assert tomllib.loads(block) == tomllib.loads(run_config)
    assert config_from_dict(tomllib.loads(block)) == load_config(run_dir / "config.toml")


def test_manifest_records_the_source_and_each_weight_files_hash(exported):
    out, manifest, _ = exported
    assert json.loads((out / "export.json").read_text()) == manifest
    assert (manifest["checkpoint"], manifest["step"], manifest["kind"]) == ("final", 3, "lora")
    assert (manifest["base_model"], manifest["dtype"], manifest["stage"]) == ("tiny-smol", "bfloat16", "grpo")
    assert set(manifest["sha256"]) == {"adapter/adapter_model.safetensors", "merged/model.safetensors"}
    for name, digest in manifest["sha256"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
    assert len(manifest["evals"]) == 2


def test_a_checkpoint_exports_the_same_merge_with_its_own_step(run, exported, tmp_path):
    run_dir, *_ = run
    out, *_ = exported
    manifest = export_run(run_dir, tmp_path / "ckpt", which="latest", dtype="float16")
    assert (manifest["checkpoint"], manifest["step"]) == ("checkpoint-3", 3)
    merged = load_file(tmp_path / "ckpt" / "merged" / "model.safetensors")
    final = load_file(out / "merged" / "model.safetensors")
    assert {t.dtype for t in merged.values()} == {torch.float16}
    # the same adapter over the same base: equal up to the two 16-bit roundings
    assert all(torch.allclose(merged[k].float(), final[k].float(), atol=1e-2) for k in final)
    assert "from `checkpoint-3`, after 3 steps" in (tmp_path / "ckpt" / "README.md").read_text()


def test_a_full_fine_tune_is_written_as_one_16bit_model(tmp_path):
    run_dir = tmp_path / "sft"
    config = load_config(TINY, [f"--run.run_dir={run_dir}", "--model.lora=false"])
    (run_dir / "final").mkdir(parents=True)
    (run_dir / "config.toml").write_text(dump_toml(config))
    (run_dir / "transcripts.jsonl").write_text("")  # what marks an SFT run
    shutil.copytree(resolve_model_dir("tiny-smol"), run_dir / "final" / "model")
    manifest = export_run(run_dir)
    out = run_dir / "export"
    assert manifest["written"] == {"model": str(out / "model")} and not (out / "adapter").exists()
    source = load_file(run_dir / "final" / "model" / "model.safetensors")
    weights = load_file(out / "model" / "model.safetensors")
    assert {t.dtype for t in weights.values()} == {torch.bfloat16}
    assert all(torch.equal(weights[k], source[k].to(torch.bfloat16)) for k in source)
    card = (out / "README.md").read_text()
    assert {"sft"} <= set(front_matter(card)["tags"]) and "lora" not in front_matter(card)["tags"]
    assert "Full fine-tune" in card and "No finished evaluation was found" in card


def test_bad_requests_are_refused_with_a_reason(run, tmp_path, capsys):
    run_dir, *_ = run
    with pytest.raises(ExportError, match=r"16-bit .*never float32 or 4-bit"):
        export_run(run_dir, tmp_path / "a", dtype="float32")
    with pytest.raises(ExportError, match="has no checkpoint-9; it has: checkpoint-3"):
        export_run(run_dir, tmp_path / "a", which="checkpoint-9")
    with pytest.raises(ExportError, match="final, latest or checkpoint-N"):
        export_run(run_dir, tmp_path / "a", which="best")
    with pytest.raises(ExportError, match=r"no config\.toml"):
        export_run(tmp_path, tmp_path / "a")
    with pytest.raises(ExportError, match=r"holds no eval summary\.json"):
        export_run(run_dir, tmp_path / "a", evals=[tmp_path])
    assert fathom_main(["export", str(run_dir), "--out", str(tmp_path / "a"), "--dtype", "int4"]) == 2
    assert "error: --dtype int4" in capsys.readouterr().err
    # a malformed repo id is refused before the merge, not after it
    assert (
        fathom_main(["export", str(run_dir), "--out", str(tmp_path / "b"), "--push-to-hub", "not a repo"])
        == 2
    )
    assert "--push-to-hub 'not a repo'" in capsys.readouterr().err and not (tmp_path / "b").exists()


def test_front_matter_names_a_hub_base_and_a_local_bases_license(run, tmp_path):
    run_dir, *_ = run
    config = load_config(run_dir / "config.toml")
    kwargs = dict(
        config=config, config_toml="", stage="grpo", step=1, checkpoint="final", evals=[], run_dir=run_dir
    )
    hub = front_matter(model_card(base="HuggingFaceTB/SmolLM2-135M-Instruct", library_name="peft", **kwargs))
    assert hub["base_model"] == "HuggingFaceTB/SmolLM2-135M-Instruct" and hub["library_name"] == "peft"
    base = tmp_path / "base"
    shutil.copytree(resolve_model_dir("tiny-smol"), base)
    (base / "README.md").write_text("---\nlicense: apache-2.0\n---\n# a base\n")
    local = front_matter(model_card(base=str(base), library_name="transformers", **kwargs))
    assert local["license"] == "apache-2.0" and "base_model" not in local  # a path is no hub id


def test_out_holding_other_files_is_refused(run, tmp_path):
    run_dir, *_ = run
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match=r"holds files an export does not write \(notes\.txt\)"):
        export_run(run_dir, tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine" and not (tmp_path / "adapter").exists()


def test_a_quantized_base_is_never_merged_into(run, tmp_path):
    run_dir, *_ = run
    base = tmp_path / "base-4bit"
    shutil.copytree(resolve_model_dir("tiny-smol"), base)
    cfg = json.loads((base / "config.json").read_text())
    cfg["quantization_config"] = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    (base / "config.json").write_text(json.dumps(cfg))
    quant_run = tmp_path / "run"
    shutil.copytree(run_dir, quant_run, ignore=shutil.ignore_patterns("export", "evals"))
    config = load_config(quant_run / "config.toml", [f"--model.name={base}"])
    (quant_run / "config.toml").write_text(dump_toml(config))
    with pytest.raises(ExportError, match=r"stored quantized \(bitsandbytes\).*the adapter is written"):
        export_run(quant_run)
    out = quant_run / "export"
    assert (out / "adapter" / "adapter_model.safetensors").exists()
    assert (
        not (out / "merged").exists() and not list(out.glob(".tmp-*")) and not (out / "export.json").exists()
    )


def test_push_sends_the_adapter_then_the_merged_model_to_the_repo(exported, monkeypatch):
    # The one stand-in in this file: no hub is reachable from here, so the two calls that would reach it
    # record what they are given instead.
    from huggingface_hub import HfApi

    out, *_ = exported
    calls = []

    def create_repo(self, repo_id, **kwargs):
        calls.append(("create_repo", self.token, repo_id, kwargs))
        return f"https://hub.example/{repo_id}"

    def upload_folder(self, **kwargs):
        calls.append(("upload_folder", self.token, kwargs["repo_id"], kwargs))
        folder = Path(kwargs["folder_path"])
        assert (folder / "README.md").is_file() and (
            folder / "config.json" if not kwargs["path_in_repo"] else folder / "adapter_config.json"
        ).is_file()

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    url = push(out, "me/fathom-tiny", private=True, token="hf_test")
    assert url == "https://hub.example/me/fathom-tiny"
    assert calls[0] == ("create_repo", "hf_test", "me/fathom-tiny", {"private": True, "exist_ok": True})
    uploads = [(c[1], c[2], c[3]["folder_path"], c[3]["path_in_repo"]) for c in calls[1:]]
    assert uploads == [
        ("hf_test", "me/fathom-tiny", out / "adapter", "adapter"),
        ("hf_test", "me/fathom-tiny", out / "merged", ""),
    ]


def test_an_unreachable_hub_is_one_clear_error_and_the_export_stays(exported, monkeypatch, tmp_path):
    from huggingface_hub import constants

    out, manifest, _ = exported
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    with pytest.raises(
        PushError,
        match=r"me/fathom-tiny failed \(ConnectError: .*Connection refused.*export in .* is complete",
    ):
        push(out, "me/fathom-tiny", token="hf_test")
    for name, digest in manifest["sha256"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
    with pytest.raises(PushError, match=r"holds no export\.json"):
        push(tmp_path, "me/fathom-tiny")


def test_cli_push_offline_exits_nonzero_with_one_line_and_keeps_the_export(run, tmp_path):
    run_dir, *_ = run
    out = tmp_path / "export"
    env = {**os.environ, "PYTHONPATH": str(SRC), "HF_HUB_OFFLINE": "1"}
    argv = [
        sys.executable,
        "-m",
        "fathom",
        "export",
        str(run_dir),
        "--out",
        str(out),
        "--push-to-hub",
        "me/x",
    ]
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("fathom export: error:")]
    assert len(errors) == 1 and "OfflineModeIsEnabled" in errors[0] and "is complete" in errors[0]
    assert "Traceback" not in proc.stderr
    assert json.loads(proc.stdout[: proc.stdout.rindex("}") + 1])["written"]["merged"] == str(out / "merged")
    manifest = json.loads((out / "export.json").read_text())
    for name, digest in manifest["sha256"].items():
        assert hashlib.sha256((out / name).read_bytes()).hexdigest() == digest
