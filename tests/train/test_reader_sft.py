"""Reader-role SFT rows are token-exact with what the policy's own sub-LM reads for the same llm() call."""

from __future__ import annotations

from fathom.env.sublm import SubLMRequest
from fathom.models import ModelSpec, load_tokenizer
from fathom.rollout import ChatFormat
from fathom.rollout.engine import sub_prompt_ids
from fathom.train.reader_sft import reader_example, reader_examples


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
