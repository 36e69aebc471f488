"""`fathom serve`: run the environment server (OpenEnv contract + session-keyed HTTP) with uvicorn.

Parses the flags, loads the task file and the sub-LM, builds the app (`fathom.server.app.create_app`) and
runs it until SIGINT/SIGTERM; the app's lifespan then closes every session and sandbox worker. The sub-LM
answers `llm()` inside the REPL:

- ``none`` (default): no `llm()` in episodes;
- ``scripted``: a deterministic keyword reader (the lines of the chunk sharing most words with the
  prompt), for tests and smoke runs without a model;
- ``expert``: the simulated reader behind the expert policy (`fathom.policies.readers.expert_reader`), so
  expert episodes of every family run over the server as they do in-process;
- ``openai:URL:MODEL``: an OpenAI-compatible endpoint (vLLM, llama.cpp server); MODEL is what follows
  the last colon, and the API key, if any, comes from ``--sub-lm-key-file``;
- ``hf:PATH``: a transformers causal LM loaded in-process, batched across episodes.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from fathom.server.demo_cli import add_demo_flags

if TYPE_CHECKING:  # the environment (openenv, gradio) takes seconds to import: not for `fathom --help`
    from fathom.env import SubLM
    from fathom.server.app import ServerConfig

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def load_sub_lm(spec: str, key_file: Path | None = None) -> SubLM | None:
    from fathom.env import HFSubLM, OpenAISubLM, ScriptedSubLM
    from fathom.policies.readers import expert_reader, keyword_reader

    if spec == "none":
        return None
    if spec == "scripted":
        return ScriptedSubLM(keyword_reader)
    if spec == "expert":
        return expert_reader()
    if spec.startswith("openai:"):
        url, sep, model = spec.removeprefix("openai:").rpartition(":")
        if not sep or not url.startswith(("http://", "https://")) or not model:
            raise ValueError(
                f"--sub-lm {spec!r}: expected openai:URL:MODEL, e.g. openai:http://127.0.0.1:8001/v1:qwen"
            )
        key = key_file.read_text().strip() if key_file else "EMPTY"
        return OpenAISubLM(url, model, api_key=key)
    if spec.startswith("hf:"):
        from transformers import AutoModelForCausalLM, AutoTokenizer  # heavy: only when asked for

        path = spec.removeprefix("hf:")
        return HFSubLM(AutoModelForCausalLM.from_pretrained(path), AutoTokenizer.from_pretrained(path))
    raise ValueError(f"--sub-lm {spec!r}: expected none, scripted, expert, openai:URL:MODEL or hf:PATH")


def positive(kind: type[int] | type[float]) -> Callable[[str], int | float]:
    """An argparse type: a number > 0, or a clear usage error."""

    def parse(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a {kind.__name__}, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value

    return parse


def read_token(args: argparse.Namespace) -> str | None:
    if args.token is not None and args.token_file is not None:
        raise ValueError("give --token or --token-file, not both")
    token = args.token if args.token_file is None else args.token_file.read_text().strip()
    if token is not None and not token:
        raise ValueError("the bearer token is empty")
    return token


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "serve",
        help="serve the environment over HTTP/WebSocket (OpenEnv contract)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (0.0.0.0 inside a container)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--tasks", type=Path, help="task file (JSONL) whose ids POST /reset may name")
    p.add_argument("--max-sessions", type=int, default=64, help="HTTP sessions + WebSockets open at once")
    p.add_argument(
        "--idle-timeout",
        type=float,
        default=600.0,
        metavar="S",
        help="close a session idle for S seconds (0: never)",
    )
    p.add_argument(
        "--token", help="require 'Authorization: Bearer TOKEN' (visible in ps; prefer --token-file)"
    )
    p.add_argument("--token-file", type=Path, help="read the bearer token from this file")
    p.add_argument(
        "--sub-lm",
        default="none",
        metavar="SPEC",
        help="none | scripted | expert | openai:URL:MODEL | hf:PATH (default: none)",
    )
    p.add_argument("--sub-lm-key-file", type=Path, help="API key for an openai: sub-LM")
    p.add_argument(
        "--pool", type=int, default=4, metavar="N", help="sandbox workers kept pre-started (0: none)"
    )
    p.add_argument(
        "--max-body-mb", type=float, default=64.0, help="largest request body or WebSocket message"
    )
    p.add_argument(
        "--max-turns",
        type=positive(int),
        default=12,
        metavar="N",
        help="turns per episode before it ends (default 12)",
    )
    p.add_argument(
        "--step-timeout",
        type=positive(float),
        default=60.0,
        metavar="S",
        help="wall-clock limit of one step, all its cells and llm() calls together (default 60)",
    )
    p.add_argument(
        "--client-timeout",
        type=positive(float),
        default=10.0,
        metavar="S",
        help="close a connection that takes S seconds to send a request head, or stalls its body as long",
    )
    add_demo_flags(p)  # the web demo's trace browser and model policy (fathom.server.demo_cli)
    p.add_argument("--log-level", default="info", choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=run)


def server_config(args: argparse.Namespace, token: str | None) -> ServerConfig:
    """What the parsed flags ask of the server and of every episode it runs."""
    from fathom.env import EnvConfig
    from fathom.server.app import ServerConfig

    return ServerConfig(
        max_sessions=args.max_sessions,
        idle_timeout_s=args.idle_timeout or None,
        token=token,
        max_body_bytes=int(args.max_body_mb * 2**20),
        pool_size=args.pool,
        env=EnvConfig(max_iterations=args.max_turns, step_timeout_s=args.step_timeout),
        client_timeout_s=args.client_timeout,
    )


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from fathom.server.app import create_app, uvicorn_config
    from fathom.server.demo_cli import demo_config
    from fathom.tasks import load_tasks

    token = read_token(args)
    if token is None and args.host not in LOOPBACK:
        print(
            f"warning: serving on {args.host} without a token: anyone who can reach it can run code "
            "in sandboxes (use --token-file)",
            file=sys.stderr,
        )
    config = server_config(args, token)
    tasks = load_tasks(args.tasks) if args.tasks else None
    sub_lm = load_sub_lm(args.sub_lm, args.sub_lm_key_file)
    app = create_app(config, sub_lm=sub_lm, tasks=tasks, demo=demo_config(args))
    uvicorn.Server(uvicorn_config(app, args.host, args.port, log_level=args.log_level)).run()
    return 0
