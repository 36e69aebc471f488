"""`fathom demo`: start `fathom serve` on loopback for the web demo and print the page's URL.

The demo is the server's page (`fathom.server.demo`); this command only picks demo-friendly settings:
loopback, no token, the expert reader as the sub-LM of HTTP/WebSocket sessions, a small sandbox pool.
`add_demo_flags` gives ``--runs`` and ``--demo-model`` to both `fathom serve` and `fathom demo`;
`demo_config` turns them into a `DemoConfig` (loading the model, so a bad name fails before serving).
"""

from __future__ import annotations

import argparse
import socket
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the web stack and the environment take seconds to import: not for `fathom --help`
    from fathom.server.demo import DemoConfig


def add_demo_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--runs", type=Path, metavar="DIR", help="browse the traces*.jsonl files under DIR in the page"
    )
    p.add_argument(
        "--demo-model",
        metavar="NAME",
        help="offer the 'model' policy in the page: an HF model path or smollm2-135m / tiny-smol (runs on CPU)",
    )


def demo_config(args: argparse.Namespace) -> DemoConfig:
    from fathom.server.demo import DemoConfig
    from fathom.server.demo_runs import load_demo_model

    if args.runs is not None and not args.runs.exists():
        raise FileNotFoundError(f"--runs {args.runs}: no such file or folder")
    model = load_demo_model(args.demo_model) if args.demo_model else None
    return DemoConfig(runs_dir=args.runs, model=model)


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "demo",
        help="the web demo: serve on loopback and print the page's URL",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--host", default="127.0.0.1", help="interface to bind (the demo has no token: keep loopback)"
    )
    p.add_argument("--port", type=int, default=8000, help="0: any free port")
    add_demo_flags(p)
    p.add_argument("--pool", type=int, default=2, metavar="N", help="sandbox workers kept pre-started")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from fathom.server.app import ServerConfig, create_app, uvicorn_config
    from fathom.server.cli import load_sub_lm

    app = create_app(ServerConfig(pool_size=args.pool), sub_lm=load_sub_lm("expert"), demo=demo_config(args))
    # Bind first, so the printed URL has the real port even for --port 0.
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((args.host, args.port))
    port = sock.getsockname()[1]
    host = f"[{args.host}]" if family == socket.AF_INET6 else args.host
    print(f"FATHOM demo: http://{host}:{port}/demo  (Ctrl-C to stop)", flush=True)
    uvicorn.Server(uvicorn_config(app, args.host, port)).run(sockets=[sock])
    return 0
