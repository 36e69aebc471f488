"""SFT transcript collection: the tasks `fathom sft` plays (`sft_tasks`) and the episodes of the teacher, the
expert or an endpoint on them (`collect_transcripts`), one record per episode, correct or not.

With ``sft.reader_echo`` > 0 (source teacher) the teacher's reader is an `EchoingReader`: that share of its
not-found replies is a name the question asks about, so transcripts show the teacher's answer check catching
an echo and reading wider. Those replies are marked ``echo`` in the recorded calls (never reader rows) and
each record counts the checks that caught one (``echo_checks``). The teacher's reader reads each chunk as
the student's own sub-LM is shown it (`ReaderView`, ``rollout.sub_max_input_tokens``), and the environment
states the chunk size that fits it. With ``sft.teacher_slips`` > 0 the teacher slips
(`fathom.policies.slips`); each teacher record lists the turns it wrote as slips (``slip_turns``, recomputed
by replaying the teacher over the decoded conversation), which SFT does not train on.

This module does not filter or train; `fathom.train.sft` does.
"""

from __future__ import annotations

from typing import Any

from tqdm import tqdm

from fathom.train.config import TrainConfig

BATCH = 64  # episodes in flight at once while collecting (scripted teachers: the sandboxes are the cost)


def sft_tasks(config: TrainConfig) -> list[Any]:
    from fathom.train.tasksource import TaskSource

    source = TaskSource(config.curriculum.tiers, config.sft.seed, config.data.train_tasks or None)
    tier = config.sft.tier % len(config.curriculum.tiers)
    return [source.generate(tier, i, "sft") for i in range(config.sft.num_tasks)]


def collect_transcripts(
    config: TrainConfig, tokenizer: Any, tasks: list[Any], reader_calls: list[dict[str, str]] | None = None
) -> list[dict[str, Any]]:
    """Play `tasks` with the teacher, the expert or an endpoint; one record per episode, correct or not.
    Teacher records carry their grounding check; `reader_calls` (if given) receives every scripted
    reader call (prompt, chunk, reply)."""
    from fathom.env import OpenAISubLM
    from fathom.policies.endpoint import TeacherBackend
    from fathom.policies.grounding import check_trace
    from fathom.policies.moves import ECHO_MARK
    from fathom.policies.readers import EchoingReader, ReaderView, expert_reader, teacher_reader
    from fathom.policies.scripted import expert_backend
    from fathom.policies.teacher import slip_turns, teacher_backend
    from fathom.rollout import ChatFormat, RolloutConfig, Sampling
    from fathom.rollout.wiring import build_engine, hf_service
    from fathom.train.reader_sft import RecordingSubLM

    s, r = config.sft, config.rollout
    chat = ChatFormat(tokenizer, chat=config.model.chat)
    if s.source in ("expert", "teacher"):
        if s.source == "expert":
            backend: Any = expert_backend(chat, tasks)
        else:
            backend = teacher_backend(chat, s.seed, s.teacher_slips)
        inner: Any = expert_reader()
        if s.source == "teacher":  # it reads what the student's own reader will be shown, no more
            inner = ReaderView(teacher_reader(), chat, r.sub_max_input_tokens)
        if s.source == "teacher" and s.reader_echo > 0:
            inner = EchoingReader(inner, s.reader_echo, s.seed)
        reader: Any = RecordingSubLM(inner)
    else:
        backend = TeacherBackend(
            chat,
            s.teacher_url,
            s.teacher_model,
            s.teacher_api_key_env,
            s.teacher_temperature,
            s.teacher_concurrency,
        )
        reader = OpenAISubLM(s.teacher_url, s.teacher_model, max_tokens=r.sub_max_new_tokens)
    # Turns are collected whole (not cut at the student's budget): `trainable` then drops a transcript with a
    # turn over rollout.max_new_tokens, and counts it
    budgets = RolloutConfig(
        max_turns=s.max_turns,
        max_total_tokens=s.max_length,
        sampling=Sampling(max_new_tokens=min(s.max_length, 4096), temperature=s.teacher_temperature),
        sub_max_input_tokens=r.sub_max_input_tokens,  # the prompt states the chunk size the student will read
    )
    engine = build_engine(hf_service(backend), chat, budgets, reader, reward=config.reward)
    records = []
    for start in tqdm(range(0, len(tasks), BATCH), desc=f"{s.source} transcripts", unit="batch"):
        batch = tasks[start : start + BATCH]
        for task, episode in zip(batch, engine.run_sync(batch), strict=True):
            records.append(
                {
                    "task_id": task.id,
                    "family": task.family,
                    "length_tokens": task.length_tokens,
                    "correct": episode.correct,
                    "reward": episode.total_reward,
                    "end_reason": episode.end_reason,
                    "turns": len(episode.turns),
                    "prompt_ids": episode.prompt_ids,
                    "completion_ids": episode.completion_ids,
                    "env_mask": episode.env_mask,
                }
            )
            if s.source == "teacher":
                records[-1]["grounding"] = check_trace(episode.to_json()).to_dict()
                conversation = tokenizer.decode(episode.prompt_ids + episode.completion_ids)
                records[-1]["slip_turns"] = (
                    slip_turns(conversation, s.seed, s.teacher_slips) if s.teacher_slips > 0 else []
                )
                # the answer cell's check printing a caught echo (True, or the echoed names of a list)
                caught = [t.observation for t in episode.turns if ECHO_MARK in t.observation]
                records[-1]["echo_checks"] = sum(
                    not o.split(ECHO_MARK, 1)[1].lstrip().startswith(("False", "[]")) for o in caught
                )
    if reader_calls is not None and isinstance(reader, RecordingSubLM):
        echoed = getattr(inner, "echoed", set())
        reader_calls.extend({**c, "echo": (c["prompt"], c["chunk"]) in echoed} for c in reader.calls)
    return records
