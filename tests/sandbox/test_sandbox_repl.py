"""The REPL contract: persistence, ctx, output, errors, timeouts, llm() RPC, the answer protocol, lifecycle."""

from __future__ import annotations

import asyncio
import hashlib
import os

import pytest
from conftest import Recorder, config, pid_alive

from fathom.sandbox import LAYERS, IsolationError, Sandbox, SandboxConfig

DOC = "The quick brown fox. Ünïcødé ✓ 日本語 🦊 e\u0301\n" * 50


def run(coro):
    return asyncio.run(coro)


async def started(mode: str = "auto", llm: Recorder | None = None, doc: str = DOC, **overrides) -> Sandbox:
    return await Sandbox.start(None, config(mode, **overrides), llm, ctx_text=doc)


def test_variables_persist_and_ctx_is_the_document(mode: str) -> None:
    async def go():
        async with await started(mode) as sb:
            assert (await sb.execute("x = 41\nimport hashlib")).error is None
            r = await sb.execute("print(x + 1)\nprint(len(ctx), hashlib.sha256(ctx.encode()).hexdigest())")
            return r, sb.stats

    r, stats = run(go())
    assert r.error is None
    assert r.stdout == f"42\n{len(DOC)} {hashlib.sha256(DOC.encode()).hexdigest()}\n"
    assert (stats.cells, stats.restarts, stats.llm_calls) == (2, 0, 0)


def test_ctx_from_a_file_matches_and_bad_bytes_are_replaced(tmp_path) -> None:
    path = tmp_path / "doc.txt"
    path.write_bytes(DOC.encode() + b"\xff\xfe tail")
    path.chmod(0o600)  # readable by the host only: the worker gets the open fd, never the path

    async def go():
        async with await Sandbox.start(path, config()) as sb:
            return await sb.execute("print(len(ctx), ctx.endswith('\\ufffd\\ufffd tail'), ctx[:9])")

    assert run(go()).stdout == f"{len(DOC) + 7} True The quick\n"


def test_ctx_arguments_are_checked(tmp_path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="regular file"):
        run(Sandbox.start(fifo, config()))
    with pytest.raises(ValueError, match="exactly one"):
        run(Sandbox.start(None, config()))


def test_output_is_capped_with_a_marker_and_control_characters_escaped() -> None:
    async def go():
        async with await started() as sb:
            big = await sb.execute("print('a' * 5000)")
            ctl = await sb.execute(r"print('\x1b[31mred\x07\r\x00', chr(0xdc80), bytes([0, 255, 27]))")
            return big, ctl

    big, ctl = run(go())
    assert big.truncated_chars == 5001 - 2000
    assert big.stdout == "a" * 2000 + "\n[... 3001 chars truncated]"
    assert ctl.stdout == "\\x1b[31mred\\x07\\x0d\\x00 \\udc80 b'\\x00\\xff\\x1b'\n"
    assert not any(ord(c) < 32 and c != "\n" for c in ctl.stdout)


def test_frames_larger_than_the_pipe_buffer_pass_both_ways() -> None:
    recorder = Recorder()

    async def go():
        async with await started(llm=recorder, max_output_chars=300_000, max_llm_chars=300_000) as sb:
            out = await sb.execute("print('o' * 250_000)")
            ask = await sb.execute("r = llm('q', 'c' * 200_000)\nprint(len(r))")
            code = await sb.execute("x = '" + "k" * 200_000 + "'\nprint(len(x))")
            return out, ask, code

    out, ask, code = run(go())
    assert out.stdout == "o" * 250_000 + "\n" and out.truncated_chars == 0
    assert ask.stdout == f"{len('echo q [200000]')}\n" and len(recorder.batches[0][0].chunk) == 200_000
    assert code.stdout == "200000\n"


def test_tracebacks_show_model_frames_only() -> None:
    async def go():
        async with await started(llm=Recorder()) as sb:
            typed = await sb.execute("def ask():\n    return llm(1)\nask()")
            syntax = await sb.execute("def (")
            return typed, syntax, sb._launcher.runtime

    typed, syntax, runtime = run(go())
    assert typed.error.startswith(
        'Traceback (most recent call last):\n  File "<cell-1>", line 3, in <module>'
    )
    assert 'File "<cell-1>", line 2, in ask' in typed.error
    assert typed.error.endswith("TypeError: llm(prompt, chunk) takes two str arguments\n")
    for leak in ("worker.py", "/sbx", runtime, "protocol.py"):
        assert leak not in typed.error
    assert "SyntaxError" in syntax.error and not syntax.restarted


def test_timeouts_soft_keeps_state_hard_restarts_llm_time_excluded(mode: str) -> None:
    async def soft():
        async with await started(mode) as sb:
            await sb.execute("kept = 'yes'")
            r = await sb.execute("while True:\n    pass")
            return r, await sb.execute("print(kept)")

    async def hard():
        async with await started(mode) as sb:
            await sb.execute("kept = 'yes'")
            r = await sb.execute(
                "import signal\nsignal.signal(signal.SIGALRM, signal.SIG_IGN)\nwhile True:\n    pass"
            )
            after = await sb.execute("print(len(ctx))\nprint(kept)")
            return r, after, sb.stats

    async def slow_llm():  # 1.5 s in llm() with a 1 s soft limit: no timeout
        async with await started(mode, Recorder(delay_s=1.5)) as sb:
            return await sb.execute("print(llm('q'))")

    async def go():
        return await asyncio.gather(soft(), hard(), slow_llm())

    (s, s_after), (h, h_after, h_stats), llm_r = run(go())
    assert s.timed_out and not s.restarted
    assert s.error.endswith(
        "TimeoutError: the cell ran past its time limit of 1 s and was interrupted (variables are kept)\n"
    )
    assert s_after.stdout == "yes\n"
    assert 0.9 < s.elapsed_s < 2.9  # the timer fires at 1 s; a loaded box may run the handler late
    assert h.timed_out and h.restarted and h_stats.restarts == 1
    assert h.error.startswith(
        "TimeoutError: the cell ran past the hard time limit of 3 s. The REPL was restarted"
    )
    assert h_after.stdout == f"{len(DOC)}\n" and "NameError: name 'kept' is not defined" in h_after.error
    assert llm_r.error is None and llm_r.stdout == "echo q [0]\n" and llm_r.elapsed_s < 0.5


def test_llm_single_batch_and_accounting() -> None:
    recorder = Recorder()

    async def go():
        async with await started(llm=recorder) as sb:
            one = await sb.execute("print(llm('hi', ctx[:10]))")
            many = await sb.execute("print(llm_batch([('a', 'xy'), 'b', ['c', 'z']]))")
            return one, many, sb.stats

    one, many, stats = run(go())
    assert one.stdout == "echo hi [10]\n" and (one.llm_calls, one.llm_chars) == (1, 12)
    assert many.stdout == "['echo a [2]', 'echo b [0]', 'echo c [1]']\n"
    assert (many.llm_calls, many.llm_chars) == (3, 3 + 1 + 2)
    assert [len(b) for b in recorder.batches] == [1, 3]  # the batch reached the handler whole
    assert (stats.llm_calls, stats.llm_chars) == (4, 18)


def test_llm_budget_exhaustion_is_a_model_error_and_the_worker_survives() -> None:
    recorder = Recorder()
    code = "ok = 0\nfor i in range(25):\n    try:\n        llm('q')\n        ok += 1\n    except RuntimeError as e:\n        err = str(e)\nprint(ok, err)"

    async def go():
        async with await started(llm=recorder) as sb:
            return await sb.execute(code), await sb.execute("llm_batch(['x', 'y'])"), sb.stats

    r, again, stats = run(go())
    assert r.stdout == "20 llm() failed: llm budget exhausted: 20 calls per episode, 0 left\n"
    assert recorder.calls == 20 and stats.llm_calls == 20 and not r.restarted
    assert again.error.endswith(
        "RuntimeError: llm() failed: llm budget exhausted: 20 calls per episode, 0 left\n"
    )


def test_llm_unavailable_failing_handler_and_input_limits() -> None:
    recorder = Recorder()

    async def go():
        async with await started(llm=None) as sb:
            off = await sb.execute("llm('q')")
        async with await started(llm=recorder) as sb:
            boom = await sb.execute("llm('boom')")
            big = await sb.execute("llm('x' * 20000)")
            wide = await sb.execute("llm_batch(['q'] * 65)")
            bad = await sb.execute("llm_batch([('q', 1)])")
            fine = await sb.execute("print(llm('q'))")
        return off, boom, big, wide, bad, fine

    off, boom, big, wide, bad, fine = run(go())
    assert off.error.endswith("RuntimeError: llm() is not available in this episode\n")
    assert boom.error.endswith("RuntimeError: llm() failed: ConnectionError: sub-LM backend unreachable\n")
    assert big.error.endswith("ValueError: llm() input is 20000 characters; the limit is 10000 per call\n")
    assert wide.error.endswith("ValueError: llm_batch() takes at most 64 items, got 65\n")
    assert "TypeError: llm_batch() items must be" in bad.error
    assert fine.stdout == "echo q [0]\n"
    assert [r.prompt for b in recorder.batches for r in b] == [
        "boom",
        "q",
    ]  # rejected inputs never left the worker


def test_answer_protocol() -> None:
    cells = [
        "answer['content'] = 'draft'",  # not ready yet
        "answer['content'] = [1, 'two', {'three': 3.0}]\nanswer['ready'] = True",
        "FINAL({'k': (1, 2), 'n': None})",
        "class Box:\n    def __str__(self):\n        return 'a box'\nFINAL(Box())",
        "FINAL('z' * 10_000)",
        "FINAL(float('nan'))",
        "answer = 'not a dict'",
    ]

    async def go():
        async with await started() as sb:
            return [await sb.execute(c) for c in cells]

    rs = run(go())
    assert [r.answer_ready for r in rs] == [False, True, True, True, True, True, False]
    assert rs[1].answer == [1, "two", {"three": 3.0}]
    assert rs[2].answer == {"k": [1, 2], "n": None}
    assert rs[3].answer == "a box"
    assert rs[4].answer == "z" * 500
    assert rs[5].answer == "nan"
    assert all(r.error is None for r in rs)


def test_memory_errors_leave_the_worker_alive(mode: str) -> None:
    async def go():
        async with await started(mode) as sb:
            await sb.execute("kept = 1")
            big = await sb.execute("s = 'a' * (10 ** 10)")
            grow = await sb.execute(
                "def grow():\n    xs = []\n    while True:\n        xs.append(bytes(10**8))\ngrow()"
            )
            return big, grow, await sb.execute("print(kept)")

    big, grow, after = run(go())
    assert big.error.endswith("MemoryError\n") and grow.error.endswith("MemoryError\n")
    assert not big.restarted and not grow.restarted and after.stdout == "1\n"


def test_layers_are_recorded_per_mode(mode: str) -> None:
    async def go():
        async with await started(mode) as sb:
            return sb.layers, sb.report

    layers, report = run(go())
    assert report.mode == mode
    assert set(report.missing) == set(LAYERS) - set(layers)
    if mode == "unsafe-dev":
        assert layers == ("rlimits",) and report.level == "unsafe"
        return
    assert {"rlimits", "no_new_privs", "seccomp"} <= set(layers)
    assert ("bwrap" in layers) == (mode == "bwrap")
    assert ("uid" in layers) == (os.geteuid() == 0)


def test_floor_refuses_to_run_below_it() -> None:
    with pytest.raises(IsolationError, match=r"below the configured floor: missing \['bwrap'\]"):
        run(Sandbox.start(None, config("plain", min_isolation=("bwrap",)), ctx_text=""))


def test_unsafe_dev_warns_loudly(capsys) -> None:
    async def go():
        async with await started("unsafe-dev") as sb:
            return await sb.execute("print(1)")

    assert run(go()).stdout == "1\n"
    assert "UNSAFE: fathom sandbox in unsafe-dev mode" in capsys.readouterr().out


def test_close_kills_everything_and_is_idempotent() -> None:
    async def go():
        sb = await started()
        pids, runtime = sb.processes, sb._launcher.runtime
        alive_before = [pid_alive(p) for p in pids]
        await sb.close()
        await sb.close()
        with pytest.raises(RuntimeError, match="closed"):
            await sb.execute("1")
        return pids, alive_before, runtime

    pids, alive_before, runtime = run(go())
    assert all(alive_before) and pids
    assert not any(pid_alive(p) for p in pids)
    assert not os.path.exists(runtime)


def test_a_cancelled_cell_restarts_the_worker_before_the_next_one() -> None:
    async def go():
        async with await started() as sb:
            await sb.execute("kept = 1")
            task = asyncio.create_task(sb.execute("import time\ntime.sleep(0.5)"))
            await asyncio.sleep(0.1)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            return await sb.execute("print(kept)"), await sb.execute("print(len(ctx))")

    first, second = run(go())
    assert first.restarted and first.error.startswith(
        "the previous cell was cancelled. The REPL was restarted"
    )
    assert second.stdout == f"{len(DOC)}\n" and not second.restarted


def test_concurrent_execute_calls_are_serialized() -> None:
    async def go():
        async with await started() as sb:
            await sb.execute("n = 0")
            cells = [sb.execute("n += 1\nprint(n)") for _ in range(20)]
            return await asyncio.gather(*cells)

    assert sorted(int(r.stdout) for r in run(go())) == list(range(1, 21))


def test_config_is_validated() -> None:
    with pytest.raises(ValueError, match="soft_timeout_s < hard_timeout_s"):
        SandboxConfig(soft_timeout_s=5, hard_timeout_s=5)
    with pytest.raises(ValueError, match="isolation must be one of"):
        SandboxConfig(isolation="docker")
    with pytest.raises(ValueError, match="unknown isolation layer"):
        SandboxConfig(min_isolation=("seccomp|apparmor",))
