"""`fathom serve-lm`: a local HF model behind a minimal OpenAI-compatible chat endpoint.

For machines without vLLM or llama.cpp: many `fathom serve` replicas (or evaluation jobs) can share one
sub-LM through `--sub-lm openai:URL:MODEL`, and concurrent requests are batched into one `generate` call
(`fathom.env.sublm.RequestBatcher`). Only what the sub-LM client uses is implemented: `POST
/v1/chat/completions` (messages, max_tokens, temperature; one choice, no streaming, no tools) and
`GET /v1/models`. It is not a general inference server.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from fathom.env.sublm import RequestBatcher


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")  # clients send name/tool fields we do not use

    role: Literal["system", "user", "assistant"]
    content: str


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    max_tokens: int = Field(default=256, ge=1, le=4096)
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)


def create_lm_app(model: Any, tokenizer: Any, model_name: str, max_batch: int = 64) -> Any:
    """A FastAPI app answering chat completions with `model`; generation runs in a worker thread."""
    from fastapi import FastAPI, HTTPException

    from fathom.rollout.backends import HFBackend, Sampling

    backend = HFBackend(model, tokenizer)

    async def run(batch: list[tuple[list[int], int, float]]) -> list[tuple[list[int], int]]:
        # One generate per (max_tokens, temperature) group: rows of a batch share their sampling settings.
        groups: dict[tuple[int, float], list[int]] = {}
        for i, (_, max_tokens, temperature) in enumerate(batch):
            groups.setdefault((max_tokens, temperature), []).append(i)
        out: list[tuple[list[int], int]] = [([], 0)] * len(batch)
        for (max_tokens, temperature), rows in groups.items():
            prompts = [batch[i][0] for i in rows]
            gens = await asyncio.to_thread(backend.generate, prompts, Sampling(max_tokens, temperature))
            for i, gen in zip(rows, gens, strict=True):
                out[i] = (gen.ids, len(batch[i][0]))
        return out

    batcher: RequestBatcher[tuple[list[int], int, float], tuple[list[int], int]] = RequestBatcher(
        run, max_batch
    )
    app = FastAPI(title="fathom serve-lm")
    app.state.batcher = batcher

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": model_name, "object": "model", "owned_by": "fathom"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: ChatRequest) -> dict[str, Any]:
        if request.model != model_name:
            raise HTTPException(404, f"unknown model {request.model!r}; this server has {model_name!r}")
        messages = [m.model_dump() for m in request.messages]
        prompt = list(
            tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=True, return_dict=False
            )
        )
        ((ids, prompt_tokens),) = await batcher.submit([(prompt, request.max_tokens, request.temperature)])
        finished = bool(ids) and ids[-1] == tokenizer.eos_token_id
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model_name,
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": tokenizer.decode(ids, skip_special_tokens=True),
                    },
                    "finish_reason": "stop" if finished else "length",
                }
            ],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": len(ids),
                "total_tokens": prompt_tokens + len(ids),
            },
        }

    return app


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from fathom.models import ModelSpec, load_model

    model, tokenizer = load_model(ModelSpec(name=args.model, dtype=args.dtype))
    app = create_lm_app(model, tokenizer, args.served_name or args.model)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("serve-lm", help="serve a local HF model as an OpenAI-compatible sub-LM")
    parser.add_argument("--model", default="smollm2-135m", help="offline name, local path or hub id")
    parser.add_argument("--served-name", default=None, help="model name clients ask for (default: --model)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8001)
    parser.set_defaults(func=run)
