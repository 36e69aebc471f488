"""The student's reader is shown at most `rollout.sub_max_input_tokens` of an llm() call, and what teaches or
measures reading keeps to that: the teacher's chunks of dense text fit the GPU proof's view, and the teacher's
reader (whose replies become reader rows) reads only what the student's reader would be shown."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from fathom.env.sublm import SubLMRequest
from fathom.policies.excerpts import CHUNK_CHARS
from fathom.policies.readers import NOT_FOUND, ReaderView, _teacher_read, teacher_reader
from fathom.rollout.engine import chunk_chars, cut_request
from fathom.tasks import generate_task
from fathom.train.configfile import load_config
from fathom.train.sft_collect import collect_transcripts

sys.path.insert(0, str(Path(__file__).parents[1] / "policies"))
from teacher_play import qwen_chat

TINY = Path(__file__).parents[2] / "configs" / "tiny-cpu.toml"
QUESTION = (
    "What is the special magic number for zesty-harp mentioned in the provided text? "
    "Answer with the 7-digit number only."
)
PROMPT = f"Answer from the text alone, or reply not found if it is not there.\nQuestion: {QUESTION}"
NEEDLE = "One of the special magic numbers for zesty-harp is: 4432455."


def _read(reader, chunk: str) -> str:
    return asyncio.run(reader.complete([SubLMRequest(PROMPT, chunk)]))[0].text


def test_a_scripted_reader_answers_only_from_what_the_students_reader_is_shown():
    chat = qwen_chat()
    filler = "The quick brown fox jumps over the lazy dog by the river bank.\n" * 120  # ~1.6K tokens
    assert _teacher_read(PROMPT, NEEDLE + "\n" + filler) == "4432455"
    seen = ReaderView(teacher_reader(), chat, 1024)
    assert _read(seen, NEEDLE + "\n" + filler) == "4432455" and seen.cut == 1  # cut, the needle kept
    assert _read(seen, filler + NEEDLE) == NOT_FOUND and seen.cut == 2  # the needle lay past the cut
    assert _read(ReaderView(teacher_reader(), chat, 4096), filler + NEEDLE) == "4432455"
    short = SubLMRequest(PROMPT, NEEDLE)
    assert cut_request(chat, short, 1024) == short  # what fits is shown as it is


def test_the_teachers_chunks_of_dense_text_fit_the_proofs_reader_view():
    assert CHUNK_CHARS == chunk_chars(4096) == (4096 - 256) * 2
    chat = qwen_chat()  # a log's digits, a table's numbers: a chunk of them is shown whole, with the prompt
    for family in ("logs_count", "table_aggregate", "code_value", "chat_count"):
        doc = generate_task(family, 1, 32768).read_document()
        chunk = doc[len(doc) // 2 : len(doc) // 2 + CHUNK_CHARS]
        assert cut_request(chat, SubLMRequest(PROMPT, chunk), 4096).chunk == chunk, family


def test_sft_collection_records_replies_read_from_the_students_view(tmp_path):
    budget = 768
    cfg = load_config(
        TINY,
        [
            f"--run.run_dir={tmp_path}",
            "--sft.source=teacher",
            "--sft.reader_echo=0",
            "--sft.max_turns=10",
            "--sft.max_length=1048576",
            "--model.name=tiny-qwen",
            f"--rollout.sub_max_input_tokens={budget}",
        ],
    )
    chat = qwen_chat()
    tasks = [generate_task("manual_default", 4, 8192), generate_task("chat_prev", 0, 8192)]
    calls: list[dict[str, str]] = []
    records = collect_transcripts(cfg, chat.tokenizer, tasks, calls)
    assert len(records) == 2 and calls
    for call in calls:  # the reply is the one the shown part of the chunk gives
        shown = cut_request(chat, SubLMRequest(call["prompt"], call["chunk"]), budget)
        assert call["reply"] == _teacher_read(shown.prompt, shown.chunk)
