"""Pure pieces of the sandbox: the seccomp program (run on a tiny BPF interpreter), framing, text cleaning,
isolation reports and uid slots."""

from __future__ import annotations

import json
import struct

import pytest

from fathom.sandbox import IsolationError, IsolationReport
from fathom.sandbox.host import clean_text
from fathom.sandbox.lockdown import DENIED_X86_64, seccomp_program
from fathom.sandbox.protocol import ProtocolError, decode, encode
from fathom.sandbox.uids import UID_BLOCK, UID_BLOCKS, UidSlots

ALLOW, KILL, EPERM, ENOSYS = 0x7FFF0000, 0x80000000, 0x00050001, 0x00050026
X86_64 = 0xC000003E


def bpf(prog: list[tuple[int, int, int, int]], nr: int, arch: int = X86_64, arg1: int = 0) -> int:
    """Classic BPF, the subset our filter uses, over a seccomp_data {nr, arch, ip, args[6]}."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, 0, arg1, 0, 0, 0, 0)
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = prog[pc]
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("<I", data, k)[0]
            pc += 1
        elif code in (0x15, 0x35):  # jeq / jge
            hit = acc == k if code == 0x15 else acc >= k
            pc += 1 + (jt if hit else jf)
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


def test_seccomp_filter_denies_what_it_should_and_allows_the_rest() -> None:
    prog = seccomp_program()
    assert len(prog) < 256 and all(jt < 256 and jf < 256 for _, jt, jf, _ in prog)
    for nr in {nr for group in DENIED_X86_64.values() for nr in group}:
        assert bpf(prog, nr) == EPERM, nr
    for nr in (
        0,
        1,
        3,
        9,
        12,
        13,
        14,
        60,
        62,
        231,
        257,
        262,
    ):  # read write close mmap brk sigaction exit kill ...
        assert bpf(prog, nr) == ALLOW, nr
    assert bpf(prog, 435) == ENOSYS  # clone3: glibc falls back to clone, which is denied
    assert bpf(prog, 16, arg1=0x5412) == EPERM  # ioctl(TIOCSTI)
    assert bpf(prog, 16, arg1=0xFFFFFFFF00005412) == EPERM  # the kernel truncates the cmd to 32 bits
    assert bpf(prog, 16, arg1=0x5401) == ALLOW  # ioctl(TCGETS)
    assert bpf(prog, 0x40000000 + 59) == KILL  # x32 ABI
    assert bpf(prog, 59, arch=0x40000003) == KILL  # i386


def test_frames_roundtrip_and_bad_frames_are_protocol_errors() -> None:
    frame = encode({"op": "x", "text": "é\udc80\x00"})
    (size,) = struct.unpack(">I", frame[:4])
    assert size == len(frame) - 4 and frame[4:].isascii()
    assert decode(frame[4:]) == {"op": "x", "text": "é\udc80\x00"}
    for body in (
        b"[1]",
        b'{"no_op": 1}',
        b"\xff",
        b"[" * 100_000 + b"]" * 100_000,
        json.dumps("op").encode(),
    ):
        with pytest.raises(ProtocolError):
            decode(body)


def test_clean_text_escapes_terminal_controls_and_lone_surrogates() -> None:
    assert clean_text("ok\n\ttab") == "ok\n\ttab"
    assert clean_text("\x1b[2J\r\x00\x7f\x9b") == "\\x1b[2J\\x0d\\x00\\x7f\\x9b"
    assert clean_text("a\udc80b 日本") == "a\\udc80b 日本"


def test_isolation_report_floor_and_level() -> None:
    full = IsolationReport(
        "bwrap", ("bwrap", "uid", "rlimits", "no_new_privs", "landlock", "seccomp", "cgroup")
    )
    plain = IsolationReport("plain", ("rlimits", "no_new_privs", "seccomp"), {"landlock": "ABI 0"})
    floor = ("rlimits", "seccomp", "landlock|bwrap")
    assert full.level == "full" and full.unmet(floor) == []
    assert plain.level == "partial" and plain.unmet(floor) == ["landlock|bwrap"]
    assert "missing: landlock (ABI 0)" in plain.describe()
    assert IsolationReport("unsafe-dev", ("rlimits",)).level == "unsafe"


def test_uid_slots_never_share_a_block_between_holders(tmp_path) -> None:
    a, b = UidSlots(1000, str(tmp_path)), UidSlots(1000, str(tmp_path))
    ua = {a.claim() for _ in range(UID_BLOCK + 1)}  # spills into a second block
    ub = {b.claim() for _ in range(10)}
    assert len(ua) == UID_BLOCK + 1 and not ua & ub
    assert all(1000 <= u < 1000 + UID_BLOCKS * UID_BLOCK for u in ua | ub)
    uid = min(ub)
    b.release(uid)
    assert b.claim() == uid
    a.close()
    c = UidSlots(1000, str(tmp_path))
    assert c.claim() is not None  # a closed holder's blocks are free again
    b.close()
    c.close()


def test_uid_slots_report_exhaustion(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("fathom.sandbox.uids.UID_BLOCKS", 1)
    a, b = UidSlots(1000, str(tmp_path)), UidSlots(1000, str(tmp_path))
    a.claim()
    with pytest.raises(IsolationError, match="uid block"):
        b.claim()
    a.close()
    b.close()
