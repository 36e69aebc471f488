"""The sandbox worker: one per episode, it runs the model's cells in a persistent namespace inside the jail.

Started by the host as ``python3 -I -S -B worker.py CONFIG_JSON`` (stdlib only; ``protocol.py`` and
``lockdown.py`` sit next to it), or forked by ``zygote.py``, which calls ``main`` with the same argv. In order it: dies with its parent, applies its kernel layers, reports
``ready``, waits for ``load`` plus the document's file descriptor (passed over an inherited socket, so the
worker never needs a path to it and a pre-started worker can take any document), then serves ``exec`` frames.

What the model sees: ``ctx`` (the document, a ``str``), ``llm(prompt, chunk)`` and ``llm_batch(items)`` (RPC
stubs answered by the host), ``answer`` (a dict: ``answer["content"]``, ``answer["ready"] = True``) and
``FINAL(value)``. Output is captured and capped; errors come back as tracebacks without worker frames.
Nothing here is a security boundary by itself: the kernel layers are. The Python-level niceties (restoring
builtins and helpers after each cell, friendly messages) only keep honest mistakes from breaking the REPL.
"""

from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)  # -I leaves the script's directory off sys.path

import builtins  # noqa: E402
import json  # noqa: E402
import linecache  # noqa: E402
import mmap  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402

import lockdown  # noqa: E402
import protocol  # noqa: E402

# Loaded now, before lockdown, so the first cell that uses them pays nothing.
for _name in ("collections", "functools", "itertools", "math", "random", "re", "string", "textwrap"):
    __import__(_name)

sys.path.remove(HERE)
HIDDEN_FILES = {os.path.join(HERE, name) for name in ("worker.py", "protocol.py", "lockdown.py")}
TRACEBACK_FRAMES = 12


class CellTimeout(BaseException):
    """Raised into the cell by the soft timer; a BaseException so ``except Exception`` does not swallow it."""


# Tracebacks show it as the builtin the model knows.
CellTimeout.__qualname__, CellTimeout.__module__ = "TimeoutError", "builtins"


class CappedOutput:
    """sys.stdout and sys.stderr during a cell: keeps the first ``cap`` characters and counts the rest."""

    encoding, errors = "utf-8", "strict"

    def __init__(self, cap: int) -> None:
        self.parts: list[str] = []
        self.room, self.dropped = cap, 0

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        n = len(text)
        if n <= self.room:
            self.parts.append(text)
            self.room -= n
        else:
            self.parts.append(text[: self.room])
            self.dropped += n - self.room
            self.room = 0
        return n

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True


def format_exception(exc: BaseException) -> str:
    """A traceback of the model's code only: worker frames dropped, at most the last few frames per exception."""
    top = traceback.TracebackException.from_exception(exc, limit=-TRACEBACK_FRAMES)
    todo, seen = [top], set()
    while todo:
        te = todo.pop()
        if te is None or id(te) in seen:
            continue
        seen.add(id(te))
        te.stack = traceback.StackSummary.from_list([f for f in te.stack if f.filename not in HIDDEN_FILES])
        todo += [te.__cause__, te.__context__]
    return "".join(top.format())


def answer_json(namespace: dict, cap: int) -> str | None:
    """The answer as JSON text if ``answer["ready"]`` is set: JSON-able content as is, anything else str()-ed,
    capped at ``cap`` characters. None when no answer is ready."""
    answer = namespace.get("answer")
    if type(answer) is not dict or not answer.get("ready"):
        return None
    content = answer.get("content")
    if isinstance(content, str):  # FINAL(ctx) must not encode a whole document just to cut it
        return json.dumps(content[:cap])
    try:
        text = json.dumps(content, ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError, RecursionError):
        text = None
    if text is not None and len(text) <= cap:
        return text
    return json.dumps((content if isinstance(content, str) else str(content))[:cap])


class Repl:
    """The persistent namespace and the cell loop."""

    def __init__(self, ctx: str, cfg: dict, llm_available: bool) -> None:
        self.cfg, self.llm_available = cfg, llm_available
        self.fd_in, self.fd_out = cfg["fd_in"], cfg["fd_out"]
        self.helpers = {"llm": self.llm, "llm_batch": self.llm_batch, "FINAL": self.final}
        self.ns: dict = {"__name__": "__main__", "__builtins__": builtins, "ctx": ctx}
        self.ns["answer"] = {"content": None, "ready": False}
        self.ns.update(self.helpers)
        self.builtins_snapshot = dict(vars(builtins))
        self.stdout, self.stderr = sys.stdout, sys.stderr
        self.cells = self.llm_seq = 0
        self.in_cell = False
        self.soft_timeout_s = cfg["soft_timeout_s"]

    # ---- helpers the model calls ------------------------------------------------------------------------
    def final(self, value: object) -> None:
        """FINAL(value): set ``answer`` to value and mark it ready."""
        self.ns["answer"] = {"content": value, "ready": True}

    def llm(self, prompt: str, chunk: str = "") -> str:
        """Ask the sub-LM about ``chunk`` (a part of ctx) with instruction ``prompt``; returns its reply."""
        if not isinstance(prompt, str) or not isinstance(chunk, str):
            raise TypeError("llm(prompt, chunk) takes two str arguments")
        return self._call([[prompt, chunk]])[0]

    def llm_batch(self, items: list) -> list[str]:
        """Ask the sub-LM several things at once: items are (prompt, chunk) pairs or prompt strings."""
        items = list(items)
        if len(items) > self.cfg["max_batch"]:
            raise ValueError(f"llm_batch() takes at most {self.cfg['max_batch']} items, got {len(items)}")
        pairs = []
        for item in items:
            if isinstance(item, str):
                pairs.append([item, ""])
            elif isinstance(item, (tuple, list)) and len(item) == 2 and all(isinstance(x, str) for x in item):
                pairs.append([item[0], item[1]])
            else:
                raise TypeError("llm_batch() items must be (prompt, chunk) pairs of str, or prompt strings")
        return self._call(pairs) if pairs else []

    def _call(self, pairs: list[list[str]]) -> list[str]:
        if not self.llm_available:
            raise RuntimeError("llm() is not available in this episode")
        limit = self.cfg["max_llm_chars"]
        for prompt, chunk in pairs:
            if len(prompt) + len(chunk) > limit:
                raise ValueError(
                    f"llm() input is {len(prompt) + len(chunk)} characters; the limit is {limit} per call"
                )
        self.llm_seq += 1
        request = {"op": "llm", "id": self.llm_seq, "items": pairs}
        if len(protocol.encode(request)) > self.cfg["max_frame"]:
            raise ValueError("llm_batch() request is too large in total: send fewer or smaller chunks")
        # The soft timer is paused while the host answers: llm() time does not count toward the cell limit.
        remaining, interval = signal.setitimer(signal.ITIMER_REAL, 0)
        try:
            protocol.write_frame(self.fd_out, request)
            reply = protocol.read_frame(self.fd_in, self.cfg["max_frame"])
        finally:
            if remaining > 0 and self.in_cell:
                signal.setitimer(signal.ITIMER_REAL, remaining, interval)
        if reply.get("op") != "llm_result" or reply.get("id") != self.llm_seq:
            raise RuntimeError("llm() failed: the host's reply did not match the request")
        if "error" in reply:
            raise RuntimeError(f"llm() failed: {reply['error']}")
        texts = reply.get("texts")
        if (
            not isinstance(texts, list)
            or len(texts) != len(pairs)
            or not all(isinstance(t, str) for t in texts)
        ):
            raise RuntimeError("llm() failed: malformed reply from the host")
        return texts

    # ---- timers -----------------------------------------------------------------------------------------
    def _on_alarm(self, signum: int, frame: object) -> None:
        if self.in_cell:
            limit = self.soft_timeout_s
            if limit < self.cfg["soft_timeout_s"]:  # the host shortened it: the turn's own limit is near
                what = f"the time its turn had left ({limit:.3g} s)"
            else:
                what = f"its time limit of {limit:g} s"
            raise CellTimeout(f"the cell ran past {what} and was interrupted (variables are kept)")

    def _on_xcpu(self, signum: int, frame: object) -> None:
        if self.in_cell:
            raise CellTimeout("this episode has used up its CPU-time budget")

    # ---- one cell ---------------------------------------------------------------------------------------
    def run(self, cell_id: int, code: str, soft_timeout_s: float) -> dict:
        self.cells += 1
        self.soft_timeout_s = soft_timeout_s
        name = f"<cell-{self.cells}>"
        out = CappedOutput(self.cfg["max_output_chars"])
        # Re-install what an earlier cell may have tampered with.
        signal.signal(signal.SIGALRM, self._on_alarm)
        signal.signal(signal.SIGXCPU, self._on_xcpu)
        sys.stdout = sys.stderr = out
        error, timed_out, answer = None, False, None
        started = time.perf_counter()
        self.in_cell = True
        # The interval re-fires the timeout if the cell swallows it; the host's hard deadline is the guarantee.
        signal.setitimer(signal.ITIMER_REAL, soft_timeout_s, 0.5)
        try:
            try:
                linecache.cache[name] = (len(code), None, code.splitlines(True), name)
                exec(compile(code, name, "exec", dont_inherit=True), self.ns)
            # The sandbox boundary: whatever the model's code raises is shown to it.
            except BaseException as e:
                timed_out = isinstance(e, CellTimeout)
                error = format_exception(e)
            answer = answer_json(self.ns, self.cfg["max_answer_chars"])
        except BaseException as e:  # a timeout or a hostile __str__ while formatting the error or the answer
            timed_out = timed_out or isinstance(e, CellTimeout)
            error = error or f"{type(e).__qualname__}: raised while reading the cell's result"
        finally:
            self.in_cell = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            sys.stdout, sys.stderr = self.stdout, self.stderr
        vars(builtins).update(self.builtins_snapshot)
        self.ns.update(self.helpers)
        limit = self.cfg["max_output_chars"]
        if error is not None and len(error) > limit:
            error = error[:limit] + f"\n[... {len(error) - limit} chars truncated]"
        return {
            "op": "result",
            "id": cell_id,
            "stdout": "".join(out.parts),
            "dropped": out.dropped,
            "error": error,
            "timed_out": timed_out,
            "answer_json": answer,
            "elapsed": time.perf_counter() - started,
        }


def apply_layers(cfg: dict) -> tuple[list[str], dict[str, str], dict]:
    """Apply the in-worker layers the host asked for; return (applied, {missing: reason}, info)."""
    wanted, applied, missing, info = cfg["layers"], [], {}, {}
    steps = {
        "rlimits": lambda: lockdown.set_rlimits(cfg["rlimits"]),
        "no_new_privs": lockdown.no_new_privs,
        "landlock": lambda: info.__setitem__(
            "landlock_abi", lockdown.landlock(cfg["read_dirs"], cfg["write_dirs"], ["/dev/null"])
        ),
        "seccomp": lockdown.seccomp,
    }
    for name, step in steps.items():
        if name not in wanted:
            continue
        try:
            step()
            applied.append(name)
        except (lockdown.LayerUnavailable, OSError, ValueError) as e:
            missing[name] = str(e)
    if "seccomp" in applied:

        def no_system(command: object) -> int:
            raise PermissionError(
                "os.system() is not available in the sandbox: starting processes is blocked"
            )

        os.system = no_system  # otherwise it returns -1 silently
    return applied, missing, info


def receive_ctx(ctl_fd: int) -> tuple[str, int]:
    """Take the document's read-only fd from the control socket and read it whole: (text, size in bytes)."""
    sock = socket.socket(fileno=ctl_fd)
    _, fds, _, _ = socket.recv_fds(sock, 16, 1)
    sock.close()
    if len(fds) != 1:
        raise protocol.ProtocolError("no document descriptor received")
    fd = fds[0]
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return "", 0
        # Decoded straight from the page cache: no second copy of the document in this process.
        with mmap.mmap(fd, size, mmap.MAP_SHARED | mmap.MAP_POPULATE, mmap.PROT_READ) as view:
            return str(view, "utf-8", "replace"), size
    finally:
        os.close(fd)


def warm_up(cfg: dict) -> None:
    """Take a load and a first cell's code paths once, on a stand-in document, before "ready".

    The pages they touch (shared copy-on-write with the fork server) are then copied while the worker
    waits in the pool, not during an episode's reset and first step. No model code runs here and nothing
    of it is kept: the episode gets a fresh ``Repl``."""
    repl = Repl("warm", {**cfg, "fd_in": -1, "fd_out": -1}, False)
    protocol.encode(repl.run(0, "print(len(ctx))", cfg["soft_timeout_s"]))
    linecache.cache.clear()


def main(argv: list[str]) -> None:
    cfg = json.loads(argv[1])
    if cfg["ppid"]:
        lockdown.die_with_parent(cfg["ppid"])
    os.chdir(cfg["workdir"])
    applied, missing, info = apply_layers(cfg)
    info.update(pid=os.getpid(), uid=os.getuid(), groups=os.getgroups())
    warm_up(cfg)
    fd_in, fd_out, max_frame = cfg["fd_in"], cfg["fd_out"], cfg["max_frame"]
    protocol.write_frame(fd_out, {"op": "ready", "layers": applied, "missing": missing, "info": info})
    load = protocol.read_frame(fd_in, max_frame)
    if load.get("op") != "load":
        raise protocol.ProtocolError("expected a load frame")
    ctx, size = receive_ctx(cfg["fd_ctl"])
    if "rlimits" in applied:  # lowering only; the document's own memory is on top of the model's budget
        lockdown.set_rlimits({"as": cfg["memory_bytes"] + 3 * size})
    repl = Repl(ctx, cfg, bool(load.get("llm")))
    protocol.write_frame(fd_out, {"op": "loaded", "id": load.get("id"), "chars": len(ctx)})
    while True:
        message = protocol.read_frame(fd_in, max_frame)
        if message.get("op") != "exec" or not isinstance(message.get("code"), str):
            raise protocol.ProtocolError("expected an exec frame")
        # The host may shorten this cell's limit (what is left of its step); it never lengthens it.
        soft = message.get("soft_timeout_s")
        if type(soft) not in (int, float) or not 0 < soft <= cfg["soft_timeout_s"]:
            soft = cfg["soft_timeout_s"]
        try:
            result = repl.run(message.get("id"), message["code"], soft)
        except CellTimeout:  # the timer fired in the few instructions between the cell's end and disarming it
            repl.in_cell = False
            signal.setitimer(signal.ITIMER_REAL, 0)
            sys.stdout, sys.stderr = repl.stdout, repl.stderr
            result = {
                "op": "result",
                "id": message.get("id"),
                "stdout": "",
                "dropped": 0,
                "timed_out": True,
                "error": "TimeoutError: the cell ran past its time limit",
                "answer_json": None,
                "elapsed": 0.0,
            }
        protocol.write_frame(fd_out, result)


if __name__ == "__main__":
    main(sys.argv)
