"""A bundle of two files, users as JSON lines and orders as CSV: `jsonl_join` (multi-hop joins).

The document concatenates ``users.jsonl`` (`fathom.tasks.jsonl` records: look-alike ids, shuffled keys,
truncated lines) and ``orders.csv`` (``order_id``, ``user_id``, ``amount``, ``status``, ``placed_at`` in a
random column order, comma or tab separated), in either order, each under a banner whose style the seed
picks (``==> users.jsonl <==``, ``--- orders.csv ---``, ``### file: users.jsonl``). Kinds, five phrasings
each:

- ``orders_of_user``: the ids of the other orders of the user who placed an order (order -> user id ->
  orders); users with look-alike ids (48213 / 148213) have orders too;
- ``status_of_email``: the ids of one status's orders of the user with an email (email -> user id ->
  orders); the user has orders of other statuses, and look-alike users orders of that status;
- ``disputed_in_city``: the ids of the ``disputed`` orders of users living in a city; disputed orders are
  rare (3 to 12 in the city), users of a look-alike city ("Porto" / "Portimao") have 3 to 10, and users of
  the city have orders of other statuses.

Every answer is a list of order ids (set_f1), so a city, a number or a yes / no of another family never
fits.

Orders of truncated user lines are never asked about. For an expert: `split_bundle` gives the two files'
texts, `jsonl.read_users` and `read_orders` parse them, `JOIN_KINDS` parse questions. This module does
not write users (see `fathom.tasks.jsonl`).
"""

from __future__ import annotations

import csv
import random
import re
from typing import Any

from fathom.tasks import formats, jsonl
from fathom.tasks.family import Family, InvalidTaskError, check_difficulty, find_one, make_task
from fathom.tasks.formats import Phrasings
from fathom.tasks.haystack import Corpora
from fathom.tasks.schema import Task

BANNERS = ("==> {name} <==", "--- {name} ---", "### file: {name}", "=== {name} ===")
BANNER_RE = re.compile(r"^(?:==> (\S+) <==|--- (\S+) ---|### file: (\S+)|=== (\S+) ===)$", re.MULTILINE)
STATUSES = ("paid", "shipped", "refunded", "cancelled", "pending")
ORDER_COLS = ("order_id", "user_id", "amount", "status", "placed_at")


def split_bundle(document: str) -> dict[str, str]:
    """File name -> text of each file of the bundle."""
    marks = list(BANNER_RE.finditer(document))
    out = {}
    for i, m in enumerate(marks):
        end = marks[i + 1].start() if i + 1 < len(marks) else len(document)
        out[next(g for g in m.groups() if g)] = document[m.end() : end].strip("\n")
    if set(out) != {"users.jsonl", "orders.csv"}:
        raise InvalidTaskError(f"the bundle holds {sorted(out)}, not users.jsonl and orders.csv")
    return out


def read_orders(text: str) -> list[dict[str, str]]:
    lines = [line for line in text.split("\n") if line.strip()]
    delimiter = "\t" if "\t" in lines[0] else ","
    return list(csv.DictReader(lines, delimiter=delimiter))


_J = {"oid": r"ORD-\d{6}", "email": r"[^ ]+@[a-z.]+", "status": r"[a-z]+", "city": r"[A-Z][a-z]+"}
JOIN_KINDS = {
    "orders_of_user": Phrasings(
        (
            "Order {oid} was placed by a user. List the ids of every other order that user placed.",
            "Which other orders belong to the customer who placed order {oid}? Give every order id.",
            "Follow order {oid} to its user in users.jsonl, then list all of that user's other order ids.",
            "Find who placed {oid} and report the ids of the rest of their orders.",
            "The customer behind order {oid} placed more orders. List those order ids, one per line.",
        ),
        _J,
    ),
    "status_of_email": Phrasings(
        (
            "List the ids of the {status} orders placed by the user with email {email}.",
            "Which orders with status {status} belong to the user whose email is {email}? Give every id.",
            "The user registered as {email}: what are the order ids of their {status} orders?",
            "Find every orders.csv row with status {status} that belongs to the user {email}. List the ids.",
            "Give the ids of all {status} orders of the customer whose email is {email}, one per line.",
        ),
        _J,
    ),
    "disputed_in_city": Phrasings(
        (
            "List the ids of all disputed orders placed by users who live in {city}.",
            "Which orders have status disputed and belong to a user whose address.city is {city}? "
            "Give every order id.",
            "Find every disputed order of customers located in {city} and list their order ids.",
            "Give the order ids (status disputed) whose user lives in the city {city}, one per line.",
            "Users in {city} placed some disputed orders. List all of those order ids.",
        ),
        _J,
    ),
}


def answer_of(
    kind: str, users: list[dict[str, Any]], orders: list[dict[str, str]], s: dict[str, str]
) -> list[str]:
    if kind == "orders_of_user":
        order = find_one([o for o in orders if o["order_id"] == s["oid"]], f"order {s['oid']}")
        uid = find_one([u for u in users if str(u["id"]) == order["user_id"]], "user of the order")["id"]
        return sorted(o["order_id"] for o in orders if o["user_id"] == str(uid) and o["order_id"] != s["oid"])
    if kind == "status_of_email":
        uid = str(find_one([u for u in users if u["email"] == s["email"]], "user with the email")["id"])
        return sorted(o["order_id"] for o in orders if o["user_id"] == uid and o["status"] == s["status"])
    in_city = {str(u["id"]) for u in users if u["address"]["city"] == s["city"]}
    return sorted(o["order_id"] for o in orders if o["status"] == "disputed" and o["user_id"] in in_city)


def generate(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"jsonl_join/{seed}")
    kind = rng.choice(tuple(JOIN_KINDS))
    style = jsonl.Style(rng, difficulty)
    n_chars = formats.chars_for(length_tokens, "jsonl_join")
    users, user_lines = jsonl.make_users(rng, int(n_chars * 0.45), style, min_users=40)
    good = [u for u, ok in zip(users, jsonl.whole(user_lines), strict=True) if ok]
    cols = list(ORDER_COLS)
    rng.shuffle(cols)
    delimiter = rng.choice((",", "\t"))
    oids = iter(formats.distinct(rng, lambda: f"ORD-{rng.randrange(10**5, 10**6)}", 100 + n_chars // 30))
    target = rng.choice(good)
    city = target["address"]["city"]
    alike = [c for c in jsonl.CITIES if c != city and c[:3] == city[:3]]
    rows: list[dict[str, str]] = []

    def order(user: dict[str, Any], status: str) -> dict[str, str]:
        amount = str(rng.randint(5, 2000))
        when = f"2024-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        return {
            "order_id": next(oids),
            "user_id": str(user["id"]),
            "amount": amount,
            "status": status,
            "placed_at": when,
        }

    # Planted rows first (they count towards the file's size, so the document keeps its length): the
    # target's orders, disputed orders in the city, and near misses around each list answer.
    uid = str(target["id"])
    alike_ids = [u for u in good if u is not target and (uid in str(u["id"]) or str(u["id"]) in uid)]
    near = [u for u in good if u["address"]["city"] in alike] or [
        u for u in good if u["address"]["city"] != city
    ]
    in_city = [u for u in good if u["address"]["city"] == city]
    planted = [order(target, rng.choice(STATUSES)) for _ in range(rng.randint(3, 9))]
    status = rng.choice([r["status"] for r in planted[:2]])
    planted += [order(target, "disputed") for _ in range(rng.randint(0, 2))]
    planted += [order(rng.choice(alike_ids or near), status) for _ in range(rng.randint(3, 8))]
    planted += [order(rng.choice(in_city), "disputed") for _ in range(rng.randint(3, 12))]
    planted += [order(rng.choice(in_city), rng.choice(STATUSES)) for _ in range(rng.randint(3, 8))]
    planted += [order(rng.choice(near), "disputed") for _ in range(rng.randint(3, 10))]
    total = 38 * len(planted)
    while total < n_chars * 0.55 or len(rows) < 40:
        rows.append(order(rng.choice(users), rng.choice(STATUSES)))
        total += 38
    for row in planted:
        rows.insert(rng.randrange(len(rows) + 1), row)
    target_order = rng.choice([r for r in rows if r["user_id"] == uid])
    csv_lines = [delimiter.join(cols)] + [delimiter.join(r[c] for c in cols) for r in rows]
    files = [("users.jsonl", "\n".join(user_lines)), ("orders.csv", "\n".join(csv_lines))]
    rng.shuffle(files)
    banner = rng.choice(BANNERS)
    document = "".join(banner.format(name=name) + "\n" + text + "\n\n" for name, text in files)
    s = {"oid": target_order["order_id"], "email": target["email"], "status": status, "city": city}
    question = JOIN_KINDS[kind].write(rng, **s)
    parts = split_bundle(document)
    answer = answer_of(kind, jsonl.read_users(parts["users.jsonl"]), read_orders(parts["orders.csv"]), s)
    meta = {"kind": kind, "users": len(users), "orders": len(rows), "delimiter": delimiter}
    return make_task(
        "jsonl_join", seed, length_tokens, difficulty, question, answer, "set_f1", document, meta
    )


def solve(question: str, document: str) -> Any:
    kind, s = formats.parse_kind(JOIN_KINDS, question)
    parts = split_bundle(document)
    return answer_of(kind, jsonl.read_users(parts["users.jsonl"]), read_orders(parts["orders.csv"]), s)


def wrong_answers(task: Task, document: str) -> list[Any]:
    gold = list(task.answer)  # type: ignore[arg-type]
    others = sorted(set(o["order_id"] for o in read_orders(split_bundle(document)["orders.csv"])) - set(gold))
    return [gold[:-1], gold[1:], [*gold, others[0]], [gold[0]] if len(gold) > 1 else others[:1], []]


FAMILY = Family(
    "jsonl_join",
    "a users.jsonl + orders.csv bundle: joins across the two files, answered with lists of order ids",
    generate,
    solve,
    wrong_answers,
    False,
)
