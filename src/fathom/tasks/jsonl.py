"""JSON Lines user records, and the `jsonl_lookup` family over them (locate a field, arg-max).

A document is a ``users.jsonl`` export: one JSON object per line. Per document the seed picks the key
spelling (snake_case or camelCase), the separators (compact or spaced) and whether key order is shuffled
on every line; optional keys (``phone``, ``tags``, ``nickname``) are missing from some records and
``null`` in others, and at medium/hard a few lines are cut short mid-object (a truncated write) and must
be skipped::

    {"id": 48213, "name": "Ada Brook", "email": "ada.brook17@example.org", "plan": "pro",
     "address": {"city": "Porto", "country": "Portugal"}, "score": 771, "active": true, ...}

Ids come with look-alikes (48213, 148213, 482130 are all users), so a substring search for an id finds
several lines. ``jsonl_lookup`` kinds (five phrasings each, exact answers): ``by_id`` (a field, maybe
nested as ``address.city``, of the user with an id), ``by_email`` (a field of the user with an email),
``top`` (the id of the user with the highest score among the active users of a plan in a city; unique).

For an expert: `read_users(document)` parses every whole line; `LOOKUP_KINDS` parse questions. The join
family over users and orders is `fathom.tasks.jsonl_join`.
"""

from __future__ import annotations

import json
import random
from typing import Any

from fathom.tasks import formats
from fathom.tasks.family import Family, InvalidTaskError, check_difficulty, find_one, make_task
from fathom.tasks.formats import Phrasings
from fathom.tasks.haystack import Corpora
from fathom.tasks.schema import Task
from fathom.tasks.words import PEOPLE

SURNAMES = [
    "Brook",
    "Castell",
    "Dunmore",
    "Ellery",
    "Fairbank",
    "Garrow",
    "Holt",
    "Ingram",
    "Jessop",
    "Kettering",
    "Lowell",
    "Marsh",
    "Norwood",
    "Oakes",
    "Pryor",
    "Quill",
    "Rowan",
    "Sedge",
    "Thorne",
    "Upton",
    "Vale",
    "Whitlock",
    "Yardley",
]
CITIES = {
    "Porto": "Portugal",
    "Portimao": "Portugal",
    "Lyon": "France",
    "Lyons": "France",
    "Bergen": "Norway",
    "Bergamo": "Italy",
    "Osaka": "Japan",
    "Oslo": "Norway",
    "Cairo": "Egypt",
    "Cairns": "Australia",
    "Perth": "Australia",
    "Perm": "Russia",
    "Austin": "USA",
    "Aosta": "Italy",
}
PLANS = ("free", "pro", "team", "enterprise")
DOMAINS = ("example.org", "mail.test", "inbox.example", "corp.test")
FIELDS = ("email", "plan", "address.city", "address.country", "score", "signup_date")
KEYS = (
    "id",
    "name",
    "email",
    "plan",
    "address",
    "score",
    "active",
    "signup_date",
    "phone",
    "tags",
    "nickname",
)
_CAMEL = {k: formats.styled(k.split("_"), "camel") for k in KEYS}
_SNAKE = {v: k for k, v in _CAMEL.items()}


class Style:
    def __init__(self, rng: random.Random, difficulty: str):
        self.camel = rng.random() < 0.4
        self.compact = rng.random() < 0.5
        self.shuffle = rng.random() < 0.5
        self.truncated = {"easy": 0.0, "medium": 0.003, "hard": 0.01}[difficulty]

    def key(self, name: str) -> str:
        return _CAMEL.get(name, name) if self.camel else name


def make_user(rng: random.Random, uid: int, n: int) -> dict[str, Any]:
    first, last = rng.choice(PEOPLE), rng.choice(SURNAMES)
    city = rng.choice(tuple(CITIES))
    user: dict[str, Any] = {
        "id": uid,
        "name": f"{first} {last}",
        "email": f"{first.lower()}.{last.lower()}{n}@{rng.choice(DOMAINS)}",
        "plan": rng.choice(PLANS),
        "address": {"city": city, "country": CITIES[city]},
        "score": rng.randrange(1000),
        "active": rng.random() < 0.7,
        "signup_date": f"20{rng.randint(15, 24)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}",
    }
    for optional in ("phone", "tags", "nickname"):
        roll = rng.random()
        if roll < 0.3:
            continue
        if roll < 0.4:
            user[optional] = None
        elif optional == "phone":
            user[optional] = f"+{rng.randint(1, 99)} {rng.randint(100, 999)} {rng.randint(1000, 9999)}"
        elif optional == "tags":
            user[optional] = rng.sample(("beta", "vip", "churn-risk", "trial", "partner"), rng.randint(0, 3))
        else:
            user[optional] = rng.choice(PEOPLE).lower()
    return user


def next_id(rng: random.Random, out: list[int], taken: set[int]) -> int:
    """A new id; a third of them look like a recent one with one digit added in front or behind."""
    while True:
        if out and rng.random() < 0.3:
            base = rng.choice(out[-50:])
            uid = int(f"{rng.randint(1, 9)}{base}") if rng.random() < 0.5 else base * 10 + rng.randrange(10)
        else:
            uid = rng.randrange(10_000, 100_000)
        if uid not in taken:
            taken.add(uid)
            out.append(uid)
            return uid


def render_user(rng: random.Random, user: dict[str, Any], style: Style, cut: bool = True) -> str:
    items = [(style.key(k), v) for k, v in user.items()]
    if style.shuffle:
        rng.shuffle(items)
    seps = (",", ":") if style.compact else (", ", ": ")
    line = json.dumps(dict(items), separators=seps, ensure_ascii=False)
    if cut and rng.random() < style.truncated:
        return line[: rng.randrange(10, len(line) - 5)].rstrip("}")  # see `whole`
    return line


def make_users(
    rng: random.Random, n_chars: int, style: Style, min_users: int = 30
) -> tuple[list[dict[str, Any]], list[str]]:
    """Users and their lines, about `n_chars` in all; truncated lines are users nobody may ask about."""
    users: list[dict[str, Any]] = []
    lines: list[str] = []
    ids: list[int] = []
    taken: set[int] = set()
    total = 0
    while total < n_chars or len(users) < min_users:
        users.append(make_user(rng, next_id(rng, ids, taken), len(users)))
        lines.append(render_user(rng, users[-1], style))
        total += len(lines[-1]) + 1
    return users, lines


def _plain(obj: dict[str, Any]) -> dict[str, Any]:
    """A parsed record with camelCase keys back in snake_case (nested keys are one word)."""
    return {
        _SNAKE.get(k) or "".join("_" + c.lower() if c.isupper() else c for c in k): v for k, v in obj.items()
    }


def read_users(text: str) -> list[dict[str, Any]]:
    """Every line that parses as a whole JSON object (truncated and other lines skipped)."""
    out = []
    for line in text.split("\n"):
        if line.startswith("{"):
            try:
                out.append(_plain(json.loads(line)))
            except json.JSONDecodeError:
                continue
    return out


def field(user: dict[str, Any], path: str) -> Any:
    value: Any = user
    for part in path.split("."):
        value = value[part]
    return value


def whole(lines: list[str]) -> list[bool]:
    """Which rendered lines are whole objects: a truncated one is cut so that it never ends in "}"."""
    return [line.endswith("}") for line in lines]


_L = {
    "field": r"[A-Za-z_.]+",
    "id": r"\d+",
    "email": r"[^ ]+@[a-z.]+",
    "plan": r"[a-z]+",
    "city": r"[A-Z][a-z]+",
}
LOOKUP_KINDS = {
    "by_id": Phrasings(
        (
            "What is the {field} of the user whose id is {id}? Answer with the value only.",
            "In users.jsonl, find the record with id {id}. What is its {field}?",
            "User {id}: what does the field {field} say? Reply with the value.",
            "Look up id {id} and report the value of {field}.",
            "Which {field} is recorded for the user with the id exactly {id}?",
        ),
        _L,
    ),
    "by_email": Phrasings(
        (
            "What is the {field} of the user whose email is {email}? Answer with the value only.",
            "In users.jsonl, find the record with email {email}. What is its {field}?",
            "The user with email address {email}: what does the field {field} say?",
            "Look up the email {email} and report the value of {field}.",
            "Which {field} is recorded for the user registered as {email}?",
        ),
        _L,
    ),
    "top": Phrasings(
        (
            "Among the active users on the {plan} plan who live in {city}, which one has the highest score? "
            "Answer with the user id.",
            "Which user id has the top score of all active {plan}-plan users with address.city {city}?",
            "Find the active users whose plan is {plan} and whose city is {city}. Give the id of the one "
            "with the largest score.",
            "Highest score among active users in {city} on plan {plan}: which id is it?",
            "Of the users that are active, on {plan}, and located in {city}, who scores highest? Reply with "
            "their id.",
        ),
        _L,
    ),
}
LOOKUP_WEIGHTS = (0.4, 0.3, 0.3)


def top_user(users: list[dict[str, Any]], plan: str, city: str) -> list[dict[str, Any]]:
    return [u for u in users if u["active"] and u["plan"] == plan and u["address"]["city"] == city]


def answer_of(kind: str, users: list[dict[str, Any]], s: dict[str, str]) -> str | int:
    if kind == "top":
        pool = top_user(users, s["plan"], s["city"])
        if not pool:
            raise InvalidTaskError("no user fits")
        best = max(u["score"] for u in pool)
        return find_one([u["id"] for u in pool if u["score"] == best], "top scorer")
    key, want = ("id", int(s["id"])) if kind == "by_id" else ("email", s["email"])
    return field(find_one([u for u in users if u[key] == want], f"user with {key} {want}"), s["field"])


def generate(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"jsonl_lookup/{seed}")
    kind = rng.choices(tuple(LOOKUP_KINDS), LOOKUP_WEIGHTS)[0]
    style = Style(rng, difficulty)
    users, lines = make_users(rng, formats.chars_for(length_tokens, "jsonl_lookup"), style)
    ok = whole(lines)
    target_i = rng.choice([i for i, good in enumerate(ok) if good])
    target = users[target_i]
    s = {"field": rng.choice(FIELDS), "id": str(target["id"]), "email": target["email"]}
    s["plan"], s["city"] = target["plan"], target["address"]["city"]
    if kind == "top":
        target["active"] = True
        pool = top_user([u for u, good in zip(users, ok, strict=True) if good], s["plan"], s["city"])
        target["score"] = max(u["score"] for u in pool) + rng.randint(1, 30)
        lines[target_i] = render_user(rng, target, style, cut=False)
    shown = {**s, "field": style.key(s["field"]) if "." not in s["field"] else s["field"]}
    question = LOOKUP_KINDS[kind].write(rng, **shown)
    document = "\n".join(lines) + "\n"
    answer = answer_of(kind, [u for u, good in zip(users, ok, strict=True) if good], s)
    meta = {"kind": kind, "users": len(users), "camel": style.camel, "compact": style.compact}
    return make_task(
        "jsonl_lookup", seed, length_tokens, difficulty, question, answer, "exact", document, meta
    )


def solve(question: str, document: str) -> str | int:
    kind, s = formats.parse_kind(LOOKUP_KINDS, question)
    if "field" in s:
        s["field"] = _plain({s["field"]: 0}).popitem()[0]
    return answer_of(kind, read_users(document), s)


def wrong_answers(task: Task, document: str) -> list[Any]:
    kind, s = formats.parse_kind(LOOKUP_KINDS, task.question)
    users = read_users(document)
    if kind == "top":
        pool = sorted(top_user(users, s["plan"], s["city"]), key=lambda u: -u["score"])
        return [u["id"] for u in pool[1:3]] + [int(f"1{task.answer}"), ""]
    path = _plain({s["field"]: 0}).popitem()[0]
    others = {str(field(u, path)) for u in users[:40]} - {str(task.answer)}
    return [*sorted(others)[:5], ""]


FAMILY = Family(
    "jsonl_lookup",
    "JSON lines: a field of the user with an id / email; the top scorer of a group",
    generate,
    solve,
    wrong_answers,
    False,
)
