"""The direct baseline: truncation to the context window, answer parsing, scoring, a real tiny model."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from fathom.policies.scripted import ScriptedBackend
from fathom.rollout import Sampling
from fathom.rollout.direct import (
    ANSWER_INSTRUCTION,
    DIRECT_SYSTEM,
    TRUNCATION_NOTE,
    build_prompt,
    parse_answer,
    run_direct,
)
from fathom.tasks import Task, load_tasks


def small_task(document: str, question: str = "What is the code word?", answer="alpha") -> Task:
    return Task(
        id="t1",
        family="custom",
        question=question,
        answer=answer,
        metric="exact",
        length_tokens=len(document) // 4,
        length_chars=len(document),
        difficulty="easy",
        seed=0,
        document=document,
    )


@pytest.mark.parametrize("context", [600, 1024, 2048, 4096])
def test_prompt_fits_the_context_and_keeps_the_question(smol_chat, heldout_file, context):
    tok = smol_chat.tokenizer
    for task in load_tasks(heldout_file)[::4]:  # 8K to 128K tokens: always truncated
        prompt = build_prompt(smol_chat, task, context, max_new_tokens=128)
        assert len(prompt.ids) + 128 <= context
        assert len(prompt.ids) + 128 >= context - 16  # and the window is used, not wasted
        assert prompt.truncated and 0 < prompt.doc_tokens < task.length_tokens
        text = tok.decode(prompt.ids)
        tail = f"Question: {task.question}\n{ANSWER_INSTRUCTION}<|im_end|>\n<|im_start|>assistant"
        assert text.rstrip().endswith(tail)
        assert DIRECT_SYSTEM in text and TRUNCATION_NOTE.strip() in text
        # the document kept is the document's beginning
        assert task.read_document()[:200] in text


def test_short_document_is_kept_whole(smol_chat):
    task = small_task("The code word is alpha.\nNothing else here.")
    prompt = build_prompt(smol_chat, task, 2048, max_new_tokens=64)
    text = smol_chat.tokenizer.decode(prompt.ids)
    assert not prompt.truncated and task.document in text and TRUNCATION_NOTE.strip() not in text


def test_awkward_text_still_fits(smol_chat):
    # Mixed scripts and emoji re-tokenise differently after a cut; the prompt must still fit exactly.
    doc = "".join(f"{i} 東京 naïve 🙂🙂 ﬁ — «x» \u200b\n" for i in range(3000))
    for context in range(300, 1400, 97):
        prompt = build_prompt(smol_chat, small_task(doc), context, max_new_tokens=50)
        assert len(prompt.ids) + 50 <= context


def test_question_that_cannot_fit_raises(smol_chat):
    with pytest.raises(ValueError, match="context"):
        build_prompt(smol_chat, small_task("doc", question="why? " * 400), 512, max_new_tokens=64)


def test_document_file_is_read_like_an_inline_one(smol_chat, heldout_file):
    on_disk = load_tasks(heldout_file)[-1]
    assert on_disk.document is None and on_disk.document_path is not None
    inline = replace(on_disk, document=on_disk.read_document(), document_path=None)
    assert build_prompt(smol_chat, on_disk, 2048, 64) == build_prompt(smol_chat, inline, 2048, 64)


@pytest.mark.parametrize(
    ("text", "answer", "source"),
    [
        ("<answer>4821907</answer>", "4821907", "tag"),
        ("Let me see.\n<answer> 12 </answer>\n", "12", "tag"),
        ("<ANSWER>a</ANSWER> then <answer>b</answer>", "b", "tag"),  # the last one counts
        ("<answer></answer><answer>x</answer>", "x", "tag"),
        ("It is <answer>cut off at the tok", "cut off at the tok", "tag"),  # unclosed at max tokens
        ("<answer>first</answer> and <answer>unclosed", "first", "tag"),  # closed beats cut off
        ("I think\nthe answer is 7\n\n", "the answer is 7", "last_line"),
        ("", None, None),
        ("  \n \n", None, None),
    ],
)
def test_parse_answer(text, answer, source):
    assert parse_answer(text) == (answer, source)


def oracle(tasks, fmt):
    """A scripted policy that replies with the gold answer of the task whose question it sees."""
    by_question = {t.question: t for t in tasks}

    def reply(conversation: str) -> str:
        task = next(t for q, t in by_question.items() if q in conversation)
        return fmt(json.dumps(task.answer) if isinstance(task.answer, list) else str(task.answer))

    return reply


def test_gold_answers_score_correct_and_untagged_ones_still_count(smol_chat, heldout_file):
    tasks = load_tasks(heldout_file)[:7]  # one per family, every metric
    backend = ScriptedBackend(smol_chat, oracle(tasks, lambda a: f"Sure.\n<answer>{a}</answer>"))
    results = run_direct(backend, smol_chat, tasks, 4096, Sampling(max_new_tokens=1000), batch_size=3)
    assert backend.calls == 3  # batches of 3, 3, 1
    assert [r.task_id for r in results] == [t.id for t in tasks]
    assert [(r.answer_source, r.end_reason, r.breakdown.correct) for r in results] == [
        ("tag", "answered", True)
    ] * 7
    assert all(r.prompt_tokens + r.completion_tokens <= 4096 for r in results)
    untagged = ScriptedBackend(smol_chat, oracle(tasks, lambda a: f"hmm\n{a}"))
    results = run_direct(untagged, smol_chat, tasks[:2], 2048, Sampling(max_new_tokens=200))
    assert all(r.breakdown.correct and r.end_reason == "last_line" for r in results)
    silent = ScriptedBackend(smol_chat, lambda conversation: "")
    (result,) = run_direct(silent, smol_chat, tasks[:1], 2048, Sampling(max_new_tokens=200))
    assert result.answer is None and result.breakdown.total == 0.0 and result.end_reason == "no_answer"


def test_tiny_model_end_to_end(heldout_file):
    from fathom.eval.policies import DirectPolicy

    policy = DirectPolicy("tiny-smol", sampling=Sampling(max_new_tokens=6, temperature=0.0), device="cpu")
    assert policy.context_tokens == 2048 and policy.label == "direct:tiny-smol"
    tasks = load_tasks(heldout_file)[::7]
    rows = policy.run(tasks)
    assert [r["id"] for r in rows] == [t.id for t in tasks]
    for r in rows:
        assert r["context_used"] <= 2048 and r["tokens"] <= 6 and r["truncated"]
        assert r["llm_calls"] == 0 and r["turns"] == 1 and r["cost_tokens"] == r["context_used"]
        assert r["correct"] is False and r["breakdown"]["total"] == r["reward"]


def test_checkpoints_of_a_run_load_with_the_base_models_window(tmp_path):
    """A merged checkpoint and a LoRA adapter of a run trained from tiny-smol: both load, both get its 2K
    window (through the run's config.toml) instead of the 32K positions in the checkpoint's config."""
    from peft import LoraConfig, get_peft_model

    from fathom.eval.policies import context_window, load_policy_model, trained_from
    from fathom.models import ModelSpec, load_model

    run = tmp_path / "run"
    (run / "final").mkdir(parents=True)
    (run / "config.toml").write_text('[run]\nseed = 0\n\n[model]\nname = "tiny-smol"\n')
    model, tok = load_model(ModelSpec(name="tiny-smol", device="cpu"))
    model.save_pretrained(run / "final" / "merged")
    tok.save_pretrained(run / "final" / "merged")
    lora = get_peft_model(model, LoraConfig(r=2, target_modules="all-linear", init_lora_weights=False))
    lora.save_pretrained(run / "final" / "adapter")
    tok.save_pretrained(run / "final" / "adapter")
    for kind in ("merged", "adapter"):
        path = str(run / "final" / kind)
        loaded, tokenizer = load_policy_model(path, device="cpu")
        assert trained_from(path) == "tiny-smol" and loaded.config.max_position_embeddings == 32768
        assert context_window(path, loaded) == 2048 and tokenizer.pad_token_id is not None
        assert not hasattr(loaded, "peft_config")  # the adapter is merged into plain weights


@pytest.mark.parametrize("mode", ["plain", "static"])
def test_window_long_prompts_leave_room_for_the_reply(heldout_file, mode):
    """The direct baseline's prompt fills the window up to its reply's budget, and every generation path runs
    it (the removed `lean` decoder crashed here: prompt 8064 + 512 > its 8192-token cache)."""
    from fathom.eval.policies import DirectPolicy

    sampling = Sampling(max_new_tokens=128, temperature=0.0)
    policy = DirectPolicy("tiny-smol", sampling=sampling, device="cpu", generation_mode=mode)
    rows = policy.run(load_tasks(heldout_file)[:2])
    for r in rows:
        prompt = r["context_used"] - r["tokens"]
        assert 2048 - 128 - 16 <= prompt <= 2048 - 128 and r["context_used"] <= 2048 and r["truncated"]


def test_a_vllm_engine_loads_the_tokenizer_and_not_an_hf_copy_of_the_weights(monkeypatch, tmp_path):
    """vLLM cannot run here: its backend and service stand in, recording what they were given; the point is
    what `load_model_engine` itself loads (no HF model on the GPU beside vLLM's weights)."""
    import fathom.eval.policies as P

    built: dict = {}

    class RecordingVLLMBackend:
        def __init__(self, model_dir: str, **kwargs) -> None:
            built.update(model_dir=model_dir, **kwargs)
            self.llm = object()

    def no_hf_model(*args, **kwargs):
        raise AssertionError("the HF weights were loaded for a vLLM engine")

    monkeypatch.setattr(P, "wants_vllm", lambda mode, device: True)
    monkeypatch.setattr(P, "VLLMBackend", RecordingVLLMBackend)
    monkeypatch.setattr(P, "vllm_service", lambda llm: ("service", llm))
    monkeypatch.setattr(P, "load_policy_model", no_hf_model)
    policy = P.RLMPolicy("tiny-smol", generation_mode="vllm", device="cuda")
    assert policy.model is None and policy.engine.model is None
    assert policy.tokenizer.encode("ctx") == P.load_tokenizer(P.ModelSpec(name="tiny-smol")).encode("ctx")
    assert built["model_dir"] == str(P.resolve_model_dir("tiny-smol"))
    assert built["max_model_len"] == policy.context_tokens == P.context_window("tiny-smol", None)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    with pytest.raises(ValueError, match="is a LoRA adapter"):
        P.load_model_engine(str(adapter), "bfloat16", "cuda", "vllm", 8192)
