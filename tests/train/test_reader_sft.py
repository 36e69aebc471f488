"""Reader-role SFT rows are token-exact with what the policy's own sub-LM reads for the same llm() call."""

from __future__ import annotations

import random
from collections import Counter

from fathom.env.sublm import SubLMRequest
from fathom.models import ModelSpec, load_tokenizer
from fathom.rollout import ChatFormat
from fathom.rollout.engine import sub_prompt_ids
from fathom.train.reader_sft import call_kind, reader_example, reader_examples, stratified


def test_reader_rows_match_the_sub_lm_prompt_token_for_token():
    chat = ChatFormat(load_tokenizer(ModelSpec(name="tiny-smol")))
    call = {
        "prompt": "Classify each line below into one category: a, b.",
        "chunk": "what is x?\n" * 400,
        "reply": "a\nb",
    }
    for max_input in (2048, 256):  # 256 cuts the chunk: the cut must be the sub-LM's own
        want = sub_prompt_ids(chat, SubLMRequest(call["prompt"], call["chunk"]), max_input)
        row = reader_example(chat, call, max_input)
        n = len(want)
        assert row["input_ids"][:n] == want
        reply = chat.tokenizer.encode("a\nb", add_special_tokens=False)
        assert row["input_ids"][n:] == [*reply, chat.eos_id]
        assert row["assistant_masks"] == [0] * n + [1] * (len(reply) + 1)
        assert chat.turn_text(row["input_ids"][n:]).strip() == "a\nb"
    assert len(want) < len(reader_example(chat, call, 2048)["input_ids"])


def test_reader_examples_dedupe_and_sample():
    chat = ChatFormat(load_tokenizer(ModelSpec(name="tiny-smol")))
    calls = [{"prompt": f"q{i % 3}", "chunk": "c", "reply": "r"} for i in range(9)]
    rows, over = reader_examples(chat, calls, 512, 128, 10, seed=0)
    assert (len(rows), over) == (3, 0)
    assert len(reader_examples(chat, calls, 512, 128, 2, seed=0)[0]) == 2


def _calls(kind: str, n: int) -> list[dict[str, str]]:
    prompt = "Classify each line below into one category: a, b." if kind == "label" else f"{kind} question"
    reply = {"label": "a", "missing": "not found in this text", "answer": "42"}[kind]
    return [{"prompt": prompt, "chunk": f"{kind} chunk {i}", "reply": reply} for i in range(n)]


def test_reader_rows_are_stratified_so_answers_lead_and_labelling_cannot_crowd_them_out():
    calls = _calls("label", 300) + _calls("missing", 80) + _calls("answer", 40)
    assert [call_kind(c) for c in calls[299:301] + calls[-1:]] == ["label", "missing", "answer"]
    picked = stratified(calls, 100, random.Random(0))
    kinds = Counter(call_kind(c) for c in picked)
    # a uniform draw would give ~71 labels and ~10 answers; the mix gives half to answers, and the 10 that
    # the 40 answers cannot fill go to the other two kinds
    assert kinds == {"answer": 40, "missing": 30, "label": 30}
    assert len({c["chunk"] for c in picked}) == 100  # without replacement
    assert Counter(call_kind(c) for c in stratified(calls, 1000, random.Random(0))) == {
        "label": 300, "missing": 80, "answer": 40}  # fmt: skip
    assert Counter(call_kind(c) for c in stratified(calls, 8, random.Random(0))) == {
        "answer": 4, "missing": 2, "label": 2}  # fmt: skip
