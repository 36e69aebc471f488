"""SFT: token-exact expert and teacher transcripts, assistant-only labels, loss going down, export, GRPO init."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from fathom.env.parsing import code_blocks
from fathom.env.prompts import system_prompt
from fathom.models import ModelSpec, load_tokenizer
from fathom.policies.expert import expert_turn
from fathom.train.configfile import load_config
from fathom.train.sft import collect_transcripts, run_sft, sft_tasks, to_example

TINY = Path(__file__).parents[2] / "configs" / "tiny-cpu.toml"
NIAH = '--curriculum.tiers=[{name="niah", lengths=[8192], families=["niah", "vartrack", "keychain"]}]'


def config(tmp_path, *extra):
    return load_config(TINY, [f"--run.run_dir={tmp_path}", NIAH, "--logging.progress=false", *extra])


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(ModelSpec("tiny-smol"))


def expert_teacher(tasks: dict, seen: list) -> type[BaseHTTPRequestHandler]:
    """An OpenAI-compatible chat endpoint whose model is the expert (it reads the messages it is sent)."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            messages = body["messages"]
            seen.append(messages)
            task = next(t for q, t in tasks.items() if q in messages[1]["content"])
            turn = sum(m["role"] == "assistant" for m in messages)
            message = {"role": "assistant", "content": expert_turn(task, turn)}
            reply = {
                "id": "x",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
            data = json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    return Handler


def test_expert_and_teacher_transcripts_are_token_exact_and_identical(tmp_path, tokenizer):
    cfg = config(tmp_path, "--sft.num_tasks=3", "--sft.source=expert")
    tasks = sft_tasks(cfg)
    expert = collect_transcripts(cfg, tokenizer, tasks)
    assert [r["correct"] for r in expert] == [True] * 3 and {r["end_reason"] for r in expert} == {"answered"}
    for r in expert:
        ex = to_example(r)
        assert len(ex["input_ids"]) == len(ex["assistant_masks"])
        assert ex["assistant_masks"][: len(r["prompt_ids"])] == [0] * len(r["prompt_ids"])
        sampled = tokenizer.decode([t for t, m in zip(r["completion_ids"], r["env_mask"], strict=True) if m])
        assert "```repl" in sampled and "FINAL(" in sampled and "[output]" not in sampled
        env = tokenizer.decode([t for t, m in zip(r["completion_ids"], r["env_mask"], strict=True) if not m])
        assert "[output]" in env and "```repl" not in env

    seen: list = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), expert_teacher({t.question: t for t in tasks}, seen))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        teacher_cfg = config(
            tmp_path,
            "--sft.num_tasks=3",
            "--sft.source=openai",
            f"--sft.teacher_url={url}",
            "--sft.teacher_model=expert",
        )
        teacher = collect_transcripts(teacher_cfg, tokenizer, tasks)
    finally:
        server.shutdown()
    # the teacher saw the real conversation as messages, and its transcripts are the expert's, id for id
    first = seen[0]
    assert [m["role"] for m in first] == ["system", "user"] and first[0]["content"] == system_prompt(16_000)
    assert any([m["role"] for m in msgs] == ["system", "user", "assistant", "user"] for msgs in seen)
    for a, b in zip(expert, teacher, strict=True):
        assert (a["prompt_ids"], a["completion_ids"], a["env_mask"]) == (
            b["prompt_ids"],
            b["completion_ids"],
            b["env_mask"],
        )
        assert b["correct"]


def test_sft_lowers_the_assistant_loss_and_keeps_the_mask(tmp_path):
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    # full fine-tune: LoRA barely moves a random 64-wide model (its adapters cannot reach the tied embeddings)
    cfg = config(
        tmp_path / "sft",
        "--sft.num_tasks=2",
        "--sft.epochs=2",
        "--sft.learning_rate=3e-2",
        "--model.lora=false",
        "--sft.max_length=4096",  # both transcripts fit (a longer one is counted as too_long, not trained)
    )
    summary = run_sft(cfg)
    assert summary["trained_on"] == 2 and summary["correct"] == 2 and summary["too_long"] == 0
    assert summary["assistant_loss_after"] < summary["assistant_loss_before"] - 2.0
    model_dir = Path(summary["exported"]["model"])
    assert (model_dir / "config.json").exists() and "adapter" not in summary["exported"]

    # TRL keeps our mask: labels are -100 exactly on the prompt and the environment's tokens
    record = json.loads((tmp_path / "sft" / "transcripts.jsonl").read_text().splitlines()[0])
    example = to_example(record)
    trainer = SFTTrainer(
        model=str(model_dir),
        args=SFTConfig(output_dir=str(tmp_path / "x"), max_length=4096, report_to="none", use_cpu=True),
        train_dataset=Dataset.from_list([example]),
    )
    labels = trainer.train_dataset[0]["labels"]
    assert [label != -100 for label in labels] == [bool(m) for m in example["assistant_masks"]]


def test_grpo_continues_the_sft_adapter(tmp_path):
    from fathom.train.grpo import build_grpo

    summary = run_sft(
        config(tmp_path / "sft", "--sft.num_tasks=1", "--sft.epochs=1", "--sft.learning_rate=1e-2")
    )
    adapter = Path(summary["exported"]["adapter"])
    assert (adapter / "adapter_model.safetensors").exists() and (
        Path(summary["exported"]["merged"]) / "config.json"
    ).exists()
    grpo_cfg = load_config(
        TINY,
        [f"--run.run_dir={tmp_path / 'grpo'}", f"--model.init_from={adapter}", "--logging.progress=false"],
    )
    run = build_grpo(grpo_cfg)
    saved = load_file(adapter / "adapter_model.safetensors")
    params = dict(run.trainer.model.named_parameters())
    assert any(not torch.all(v == 0) for k, v in saved.items() if "lora_B" in k)  # SFT moved the adapter
    for key, value in saved.items():
        name = key.replace(".weight", ".default.weight")
        assert params[name].requires_grad and torch.equal(params[name].detach().cpu(), value), key


@pytest.mark.slow
def test_longer_sft_makes_the_tiny_model_write_repl_code(tmp_path):
    from fathom.models import load_model
    from fathom.policies.readers import expert_reader
    from fathom.rollout import ChatFormat, RolloutConfig, Sampling
    from fathom.rollout.wiring import build_engine, hf_policy_service

    cfg = config(
        tmp_path,
        "--sft.num_tasks=2",
        "--sft.epochs=60",
        "--sft.learning_rate=1e-2",
        "--model.lora=false",
        "--sft.source=expert",  # two short transcripts a 2-layer model can memorise (the teacher's are ~3x longer)
        "--sft.reader_ratio=0",
        '--curriculum.tiers=[{name="niah", lengths=[8192], families=["niah"]}]',
    )
    summary = run_sft(cfg)
    model, tok = load_model(ModelSpec(summary["exported"]["model"]))
    chat = ChatFormat(tok)
    # the budgets the transcripts came from: the tiny model memorised its exact prompts
    budgets = RolloutConfig(
        max_turns=cfg.sft.max_turns,
        max_total_tokens=1024,
        sampling=Sampling(max_new_tokens=160, temperature=0.0),
    )
    engine = build_engine(hf_policy_service(model, tok), chat, budgets, expert_reader())
    episodes = engine.run_sync(sft_tasks(cfg))
    first_turns = [e.turns[0] for e in episodes]
    assert all(code_blocks(t.text) for t in first_turns)  # the environment parsed code out of each turn
    assert all(t.cells and t.cells[0].error is None for t in first_turns)  # and it ran
