"""Config files (INI, TOML-like, YAML-like): `config_lookup` (effective value) and `config_sections` (lists).

A document is one large service configuration: sections named ``kind.id`` (``worker.eu-3``,
``worker.eu-30``, ``cache.us-3``: look-alike names), each setting some keys in a random order, and some
naming a parent with ``inherits`` whose keys they do not set themselves. Per document the seed picks the
syntax and the key spelling (snake, kebab or camel case)::

    [worker.eu-3]              [worker.eu-3]                  worker.eu-3:
    ; A fool and his money...  # A fool and his money...        # A fool and his money...
    timeout_ms = 2500          timeout-ms = 2500                timeoutMs: 2500
    log_level = info           log-level = "info"               logLevel: info
    inherits = worker.base     inherits = "worker.base"         inherits: worker.base

Comments are lines of the fortunes corpus, and some quote settings ("# log_level = trace was too noisy"),
so a grep for a setting finds commented-out lines too. Only uncommented lines set anything.

``config_lookup``: the effective value of a key in a section (its own setting, else its parent's, and so
on; at hard the value is two parents up). ``config_sections`` kinds, all lists (set_f1): ``list`` (every
section that sets a key to a rare value itself; near misses inherit it), ``above`` (every section that sets
an integer key above T itself; near misses set exactly T). Five phrasings per kind.

For an expert: `parse_config(document)` gives {section: {key: value}} (key spelling kept as written,
values unquoted) for any of the three syntaxes; `effective` follows ``inherits``.
"""

from __future__ import annotations

import itertools
import random
import re
from typing import Any

from fathom.tasks import formats
from fathom.tasks.family import Family, InvalidTaskError, check_difficulty, make_task
from fathom.tasks.formats import Phrasings
from fathom.tasks.haystack import Corpora
from fathom.tasks.schema import Task

KINDS = ("worker", "cache", "queue", "route", "database", "service", "proxy", "cron", "shard", "feed")
REGIONS = ("eu", "us", "ap", "sa", "me", "af", "ca", "in")
LEVELS = ("debug", "info", "warn", "error")
# key words -> value maker
KEYS: dict[tuple[str, ...], Any] = {
    ("timeout", "ms"): lambda r: r.randrange(100, 30_000, 50),
    ("max", "retries"): lambda r: r.randint(0, 12),
    ("pool", "size"): lambda r: r.randint(1, 64),
    ("replicas",): lambda r: r.randint(1, 9),
    ("batch", "size"): lambda r: r.choice((16, 32, 64, 128, 256, 512)),
    ("cache", "ttl", "s"): lambda r: r.randrange(30, 86_400, 30),
    ("log", "level"): lambda r: r.choice(LEVELS),
    ("enabled",): lambda r: "true",
    ("compression",): lambda r: r.choice(("gzip", "zstd", "none", "lz4")),
    ("endpoint",): lambda r: f"https://{r.choice(('api', 'edge', 'int'))}{r.randint(1, 99)}.example.test",
}
INT_KEYS = (("timeout", "ms"), ("max", "retries"), ("pool", "size"), ("replicas",), ("batch", "size"))
RARE = {("log", "level"): "trace", ("enabled",): "false", ("compression",): "brotli"}
SYNTAXES = ("ini", "toml", "yaml")
_SECTION = r"[a-z]+\.[a-z]+-\d+"


def section_name(rng: random.Random, taken: set[str]) -> str:
    """A new ``kind.region-N`` name; four in ten get one more digit (eu-3 / eu-30: look-alikes)."""
    while True:
        name = f"{rng.choice(KINDS)}.{rng.choice(REGIONS)}-{rng.randint(1, 99)}"
        if rng.random() < 0.4:
            name += str(rng.randrange(10))
        if name not in taken:
            taken.add(name)
            return name


def render_value(value: Any, syntax: str) -> str:
    if syntax == "toml" and isinstance(value, str) and value not in ("true", "false"):
        return f'"{value}"'
    return str(value)


def render(rng: random.Random, sections: dict[str, dict[str, Any]], syntax: str, case: str, comments) -> str:
    sep = {"ini": " = ", "toml": " = ", "yaml": ": "}[syntax]
    mark = ";" if syntax == "ini" else "#"
    pad = "  " if syntax == "yaml" else ""
    names = {words: key_name(words, case) for words in (*KEYS, "inherits")}
    out = []
    for name, keys in sections.items():
        out.append(f"{name}:" if syntax == "yaml" else f"[{name}]")
        for words, value in keys.items():
            if rng.random() < 0.15:
                out.append(pad + f"{mark} " + rng.choice(comments))
            if rng.random() < 0.03:  # a commented-out setting: a trap for grep
                rare = RARE.get(words, value) if isinstance(words, tuple) else value
                out.append(pad + f"{mark} {names[words]}{sep}{render_value(rare, syntax)}")
            out.append(pad + names[words] + sep + render_value(value, syntax))
        out.append("")
    return "\n".join(out)


def key_name(words: tuple[str, ...] | str, case: str) -> str:
    if isinstance(words, str):  # "inherits"
        return words
    return formats.styled(words, case if case != "upper" and case != "title" else "snake")


_HEAD = re.compile(r"^\[(.+)\]$|^(\S.*):$")
_KV = re.compile(r"^\s*([A-Za-z][\w-]*)\s*(?:=|:)\s*(.*?)\s*$")


def parse_config(document: str) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in document.split("\n"):
        stripped = line.strip()
        if not stripped or stripped[0] in "#;":
            continue
        head = _HEAD.match(line)
        if head:
            current = out.setdefault(head.group(1) or head.group(2), {})
            continue
        kv = _KV.match(line)
        if kv is None or current is None:
            raise InvalidTaskError(f"unreadable config line {line!r}")
        current[kv.group(1)] = kv.group(2).strip('"')
    return out


def effective(config: dict[str, dict[str, str]], section: str, key: str) -> str:
    seen = set()
    while section not in seen:
        seen.add(section)
        keys = config[section]
        if key in keys:
            return keys[key]
        if "inherits" not in keys:
            break
        section = keys["inherits"]
    raise InvalidTaskError(f"{key} is not set in {section} nor its parents")


def build(rng: random.Random, family: str, length_tokens: int, difficulty: str, corpora: Corpora):
    """(sections, syntax, case, comments) of about `length_tokens`; a fifth of sections inherit."""
    syntax, case = rng.choice(SYNTAXES), rng.choice(("snake", "kebab", "camel"))
    comments = formats.lines_from(corpora, "fortunes")
    n_chars = formats.chars_for(length_tokens, family)
    mean_comment = sum(len(c) for c in comments[::50]) / len(comments[::50])
    names: list[str] = []
    taken: set[str] = set()
    sections: dict[str, dict[Any, Any]] = {}
    total = 0.0
    key_list = list(KEYS)
    while total < n_chars or len(names) < 12:
        i, name = len(names), section_name(rng, taken)
        names.append(name)
        keys = rng.sample(key_list, rng.randint(5, 8))
        sections[name] = {k: KEYS[k](rng) for k in keys}
        if i > 2 and rng.random() < 0.2:
            sections[name]["inherits"] = rng.choice(names[:i])
        # what render() writes: header, "key = value" lines, a comment before 15% of them
        total += len(name) + 4 + sum(len("_".join(k)) + len(str(v)) + 5 for k, v in sections[name].items())
        total += len(sections[name]) * 0.15 * (mean_comment + 4)
    return sections, syntax, case, comments


# ---- config_lookup ---------------------------------------------------------------------------------
_RULE = " (a section that does not set the key takes it from the section its inherits names)"
_C = {"key": r"[A-Za-z_-]+", "section": _SECTION}
LOOKUP = Phrasings(
    (
        "What is the effective value of {key} in the section {section}" + _RULE + "? Answer with the value.",
        "In the config above, what does {key} resolve to for {section}" + _RULE + "?",
        "Section {section}: which value of {key} applies there" + _RULE + "? Reply with the value only.",
        "Give the {key} setting that is in force for {section}" + _RULE + ".",
        "Resolve {key} for the section named exactly {section}" + _RULE + ". What is it?",
    ),
    _C,
)


# Keys with wide value ranges are asked most: a key with few values (enabled, log level, compression,
# a small count) is a near coin flip for a blind policy, and its value may equal another family's gold.
LOOKUP_WEIGHTS = {
    ("timeout", "ms"): 3.0,
    ("cache", "ttl", "s"): 3.0,
    ("endpoint",): 3.0,
    ("pool", "size"): 1.0,
}


def generate_lookup(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"config_lookup/{seed}")
    sections, syntax, case, comments = build(rng, "config_lookup", length_tokens, difficulty, corpora)
    names = list(sections)
    words = rng.choices(list(KEYS), [LOOKUP_WEIGHTS.get(k, 0.5) for k in KEYS])[0]
    hops = {"easy": 0, "medium": rng.randint(0, 1), "hard": rng.randint(1, 2)}[difficulty]
    chain = rng.sample(names, hops + 1)  # chain[0] asks, chain[-1] sets the key
    for child, parent in itertools.pairwise(chain):
        sections[child].pop(words, None)
        sections[child]["inherits"] = parent
    sections[chain[-1]][words] = KEYS[words](rng)
    sections[chain[-1]].pop("inherits", None)
    document = render(rng, sections, syntax, case, comments)
    question = LOOKUP.write(rng, key=key_name(words, case), section=chain[0])
    answer = effective(parse_config(document), chain[0], key_name(words, case))
    meta = {"syntax": syntax, "case": case, "hops": hops, "sections": len(sections)}
    return make_task(
        "config_lookup", seed, length_tokens, difficulty, question, answer, "exact", document, meta
    )


def solve_lookup(question: str, document: str) -> str:
    s = LOOKUP.parse(question)
    return effective(parse_config(document), s["section"], s["key"])


def wrong_lookup(task: Task, document: str) -> list[str]:
    s = LOOKUP.parse(task.question)
    values = {keys.get(s["key"]) for keys in parse_config(document).values()} - {None, str(task.answer)}
    return [*sorted(v for v in values if v)[:6], ""]  # type: ignore[type-var]


# ---- config_sections -------------------------------------------------------------------------------
# Every question of this family is a list (set_f1), so a count or yes/no of another family never fits it.
_E = " Settings on commented-out lines and inherited values do not count."
_S = {"key": r"[A-Za-z_-]+", "value": r"\S+", "t": r"\d+"}
SECTION_KINDS = {
    "list": Phrasings(
        tuple(
            t + _E
            for t in (
                "Which sections set {key} to {value} themselves? List every section name.",
                "List all sections whose own {key} setting is {value}.",
                "Give the names of the sections where {key} = {value} is set, one per line.",
                "Find every section that explicitly sets {key} to {value}. Name them all.",
                "In which sections is {key} set to {value}? List the section names.",
            )
        ),
        _S,
    ),
    "above": Phrasings(
        tuple(
            t + _E
            for t in (
                "Which sections set {key} to a value greater than {t}? List every section name.",
                "List the sections whose own {key} is above {t}.",
                "In which sections is {key} set higher than {t}? Give the section names, one per line.",
                "Name every section with an explicit {key} strictly greater than {t}.",
                "Which section blocks configure {key} above {t}? List them all.",
            )
        ),
        _S,
    ),
}


def sections_answer(kind: str, config: dict[str, dict[str, str]], s: dict[str, str]) -> list[str]:
    if kind == "above":
        return sorted(name for name, keys in config.items() if int(keys.get(s["key"], "-1")) > int(s["t"]))
    return sorted(name for name, keys in config.items() if keys.get(s["key"]) == s["value"])


def plant_sections(rng: random.Random, sections: dict[str, dict[Any, Any]], kind: str) -> dict[str, str]:
    """Choose the asked key (and value or threshold), plant 1 to 12 hits and 2 to 8 near misses."""
    names = list(sections)
    if kind == "list":
        words = rng.choice(tuple(RARE))
        hits = rng.sample(names, rng.randint(1, 12))
        for name in hits:
            sections[name][words] = RARE[words]
        # Near misses: sections that only inherit the rare value, which "do not count".
        rest = [n for n in names if n not in hits]
        for name in rng.sample(rest, rng.randint(2, 8)):
            sections[name].pop(words, None)
            sections[name]["inherits"] = rng.choice(hits)
        return {"words": words, "value": RARE[words], "t": "0"}  # type: ignore[dict-item]
    words = rng.choice(INT_KEYS)
    values = sorted(int(keys[words]) for keys in sections.values() if words in keys)
    t = values[-1 - rng.randint(1, min(12, len(values) - 1))]
    if t == values[-1]:  # ties at the top: keep at least one section above the threshold
        t -= 1
    above = [n for n, keys in sections.items() if words in keys and int(keys[words]) > t]
    if len(above) > 12:  # many sections tie on the top values: raise 1 to 12 of them above the largest
        t = values[-1]
        for name in rng.sample(above, rng.randint(1, 12)):
            sections[name][words] = t + rng.randint(1, 9)
    # Near misses: sections set to exactly the threshold, which is not "greater than".
    rest = [n for n, keys in sections.items() if int(keys.get(words, t)) <= t]
    for name in rng.sample(rest, min(len(rest), rng.randint(2, 6))):
        sections[name][words] = t
    return {"words": words, "value": "", "t": str(t)}  # type: ignore[dict-item]


def generate_sections(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"config_sections/{seed}")
    kind = rng.choice(tuple(SECTION_KINDS))
    sections, syntax, case, comments = build(rng, "config_sections", length_tokens, difficulty, corpora)
    planted = plant_sections(rng, sections, kind)
    document = render(rng, sections, syntax, case, comments)
    s = {"key": key_name(planted["words"], case), "value": planted["value"], "t": planted["t"]}
    question = SECTION_KINDS[kind].write(rng, **s)
    answer = sections_answer(kind, parse_config(document), s)
    meta = {"kind": kind, "syntax": syntax, "case": case, "sections": len(sections)}
    return make_task(
        "config_sections", seed, length_tokens, difficulty, question, answer, "set_f1", document, meta
    )


def solve_sections(question: str, document: str) -> list[str]:
    kind, s = formats.parse_kind(SECTION_KINDS, question)
    return sections_answer(kind, parse_config(document), s)


def wrong_sections(task: Task, document: str) -> list[Any]:
    gold = list(task.answer)  # type: ignore[arg-type]
    misses = sorted(set(parse_config(document)) - set(gold))
    return [gold[:-1], gold[1:], [*gold, misses[0]], []]


LOOKUP_FAMILY = Family(
    "config_lookup",
    "config files (INI / TOML / YAML): the effective value of a key, following inherits",
    generate_lookup,
    solve_lookup,
    wrong_lookup,
    True,
)
SECTIONS_FAMILY = Family(
    "config_sections",
    "config files (INI / TOML / YAML): list the sections by their own settings (a value, above a threshold)",
    generate_sections,
    solve_sections,
    wrong_sections,
    True,
)
FAMILIES = (LOOKUP_FAMILY, SECTIONS_FAMILY)
