"""Wire format between the host and a sandbox worker: 4-byte big-endian length, then a UTF-8 JSON object.

Shared by both sides, so it is stdlib-only and imports nothing from ``fathom`` (the worker loads it from a
copied file inside the jail). It encodes and decodes frames and does blocking frame I/O for the worker; the
host's non-blocking reader lives in ``channel.py``. It does not decide what a message means.

Messages (``op`` field):
  host -> worker   load{id, llm}  exec{id, code, soft_timeout_s}  llm_result{id, texts | error}
  worker -> host   ready{layers, missing, info}  loaded{id, chars}  llm{id, items}
                   result{id, stdout, dropped, error, timed_out, answer_ready, answer_json}
Everything the worker sends is untrusted: the host only ever ``json.loads`` it, caps its size and checks ids.
"""

from __future__ import annotations

import json
import os
import struct

HEADER = struct.Struct(">I")


class ProtocolError(Exception):
    """A frame that breaks the protocol: too large, not JSON, not an object, or truncated."""


def encode(message: dict) -> bytes:
    """One frame. ``ensure_ascii`` keeps lone surrogates (from user output) encodable."""
    body = json.dumps(message, ensure_ascii=True, allow_nan=False, separators=(",", ":")).encode("ascii")
    return HEADER.pack(len(body)) + body


def decode(body: bytes | bytearray | memoryview) -> dict:
    """Parse one frame body; anything but a JSON object is a protocol error."""
    try:
        message = json.loads(bytes(body))
    except (ValueError, RecursionError) as e:  # RecursionError: deeply nested arrays from a hostile peer
        raise ProtocolError(f"frame is not valid JSON: {type(e).__name__}") from None
    if not isinstance(message, dict) or not isinstance(message.get("op"), str):
        raise ProtocolError("frame is not a JSON object with an 'op'")
    return message


def _read_exact(fd: int, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("peer closed the pipe")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_frame(fd: int, max_frame: int) -> dict:
    """Blocking read of one frame (worker side)."""
    (size,) = HEADER.unpack(_read_exact(fd, HEADER.size))
    if size > max_frame:
        raise ProtocolError(f"frame of {size} bytes exceeds the {max_frame}-byte cap")
    return decode(_read_exact(fd, size))


def write_frame(fd: int, message: dict) -> None:
    """Blocking write of one frame (worker side)."""
    view = memoryview(encode(message))
    while view:
        view = view[os.write(fd, view) :]
