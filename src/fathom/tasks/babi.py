"""bAbI-style state tracking (BABILong qa1/qa2/qa3): a little world story hidden in real prose.

Facts are paragraphs of their own, in story order, spread through a corpus window::

    Mary travelled to the office.
    John picked up the football.
    John dropped the football.

Variants (chosen by the seed); every question opens with "The text above hides a story of 23 facts, one
per line." (the document's own fact count, checked by `validate()`), so no two documents share a question:

- ``qa1`` "Where is Mary?" — the person's last location (moves only).
- ``qa2`` "Where is the football?" — where its carrier is, or where it was dropped.
- ``qa3`` "Where was the football before the kitchen?" — the place before the (only) visit of the object to
  the kitchen, in the object's history of places.

World rules: people start nowhere; a person can pick up a free object only once they are somewhere, and
only where the object lies (or anywhere if it was never seen); carried objects move with their carrier.

Each world samples its people, objects and places from `fathom.tasks.words` (~100 names, 40 objects, 60
places), so the gold place is any of 60 and a blind guess is right about one time in 60 (REWARD_AUDIT.md).
Difficulty: easy 3 people, 2 objects, 6 places and 8-16 facts; medium 4, 3, 8 and 20-40; hard 6, 4, 12
and 50-100 (the count drawn by the seed); the story runs on past that until the asked question has an
answer. For an expert: `FACT_RE` matches every fact (groups: person, move verb, place, take verb, object,
drop verb, object); `simulate` replays them; `QUESTION_RES` parse the question (slots n, x, y). Gold: a
place; metric ``exact``.

This module does not cover the other bAbI tasks (qa4-qa20: relations, counting, negation, ...).
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from fathom.tasks.family import (
    Family,
    InvalidTaskError,
    alternation,
    check_difficulty,
    find_one,
    make_task,
    template_regex,
)
from fathom.tasks.haystack import Corpora, haystack_with_needles
from fathom.tasks.schema import Task
from fathom.tasks.words import DROP_VERBS, MOVE_VERBS, OBJECTS, PEOPLE, PLACES, TAKE_VERBS

NAME = "babi"
VARIANTS = ("qa1", "qa2", "qa3")
SOURCES = ("shakespeare", "kjv", "pydoc", "fortunes")  # prose: a story among code reads oddly


_PLACE, _THING = alternation(PLACES), alternation(OBJECTS)
_PERSON, _MOVE, _TAKE, _DROP = (alternation(w) for w in (PEOPLE, MOVE_VERBS, TAKE_VERBS, DROP_VERBS))
FACT_RE = re.compile(
    rf"^({_PERSON}) (?:({_MOVE}) to the ({_PLACE})|({_TAKE}) the ({_THING})|({_DROP}) the ({_THING}))\.$",
    re.MULTILINE,
)
_PREFIX = "The text above hides a story of {n} facts, one per line. "  # names its document
_SUFFIX = " Answer with one word: the place, as the story names it."
QUESTIONS = {
    "qa1": _PREFIX + "Where is {x}?" + _SUFFIX,
    "qa2": _PREFIX + "Where is the {x}?" + _SUFFIX,
    "qa3": _PREFIX + "Where was the {x} before the {y}?" + _SUFFIX,
}
_N = r"[1-9]\d*"
QUESTION_RES = {
    "qa1": template_regex(QUESTIONS["qa1"], {"n": _N, "x": alternation(PEOPLE)}),
    "qa2": template_regex(QUESTIONS["qa2"], {"n": _N, "x": _THING}),
    "qa3": template_regex(QUESTIONS["qa3"], {"n": _N, "x": _THING, "y": _PLACE}),
}
# difficulty -> (people, objects, places in the world, (fewest, most) facts before the question)
LEVELS = {
    "easy": (3, 2, 6, (8, 16)),
    "medium": (4, 3, 8, (20, 40)),
    "hard": (6, 4, 12, (50, 100)),
}


@dataclass
class World:
    at: dict[str, str] = field(default_factory=dict)  # person -> place
    holder: dict[str, str] = field(default_factory=dict)  # object -> person carrying it
    lies: dict[str, str] = field(default_factory=dict)  # object -> place
    history: dict[str, list[str]] = field(default_factory=dict)  # object -> places, no repeats in a row

    def put(self, obj: str, place: str) -> None:
        self.lies[obj] = place
        trail = self.history.setdefault(obj, [])
        if not trail or trail[-1] != place:
            trail.append(place)

    def apply(self, person: str, action: str, arg: str) -> None:
        if action == "move":
            self.at[person] = arg
            for obj, carrier in self.holder.items():
                if carrier == person:
                    self.put(obj, arg)
        elif action == "take":
            if (
                person not in self.at
                or arg in self.holder
                or self.lies.get(arg, self.at[person]) != self.at[person]
            ):
                raise InvalidTaskError(f"{person} cannot take the {arg} here")
            self.holder[arg] = person
            self.put(arg, self.at[person])
        elif self.holder.pop(arg, None) != person:
            raise InvalidTaskError(f"{person} drops the {arg} without carrying it")


def simulate(document: str) -> World:
    world = World()
    for person, move, place, take, obj, _, dropped in FACT_RE.findall(document):
        if move:
            world.apply(person, "move", place)
        elif take:
            world.apply(person, "take", obj)
        else:
            world.apply(person, "drop", dropped)
    return world


def _step(
    rng: random.Random,
    world: World,
    people: list[str],
    objects: list[str],
    places: list[str],
    moves_only: bool,
) -> str:
    """Apply one random legal action to `world` and return its fact sentence."""
    person = rng.choice(people)
    # About 20% drops and 25% takes where legal, the rest moves: objects travel, and stories stay readable.
    roll = 1.0 if moves_only else rng.random()
    carried = [o for o in objects if world.holder.get(o) == person]
    takeable = [
        o
        for o in objects
        if o not in world.holder and world.lies.get(o, world.at.get(person)) == world.at.get(person)
    ]
    if roll < 0.2 and carried:
        obj = rng.choice(carried)
        world.apply(person, "drop", obj)
        return f"{person} {rng.choice(DROP_VERBS)} the {obj}."
    if roll < 0.45 and person in world.at and takeable:
        obj = rng.choice(takeable)
        world.apply(person, "take", obj)
        return f"{person} {rng.choice(TAKE_VERBS)} the {obj}."
    place = rng.choice([p for p in places if p != world.at.get(person)])
    world.apply(person, "move", place)
    return f"{person} {rng.choice(MOVE_VERBS)} to the {place}."


def candidates(variant: str, world: World) -> list[tuple[str, str, str]]:
    """(x, y, answer) questions this world can answer unambiguously."""
    if variant == "qa1":
        return [(p, "", place) for p, place in sorted(world.at.items())]
    if variant == "qa2":
        return [(o, "", place) for o, place in sorted(world.lies.items())]
    out = []
    for obj, trail in sorted(world.history.items()):
        out += [
            (obj, place, trail[i - 1]) for i, place in enumerate(trail) if i > 0 and trail.count(place) == 1
        ]
    return out


def generate(seed: int, length_tokens: int, difficulty: str, corpora: Corpora) -> Task:
    check_difficulty(difficulty)
    rng = random.Random(f"{NAME}/{seed}")  # per-family stream: same seed, unrelated tasks
    variant = rng.choice(VARIANTS)
    source = rng.choice(SOURCES)
    n_people, n_objects, n_places, facts_range = LEVELS[difficulty]
    n_facts = rng.randint(*facts_range)
    people = rng.sample(PEOPLE, n_people)
    objects = rng.sample(OBJECTS, n_objects)
    places = rng.sample(PLACES, n_places)
    world = World()
    facts: list[str] = []
    while len(facts) < n_facts or not candidates(variant, world):
        if len(facts) > 10 * n_facts:
            raise InvalidTaskError(f"no {variant} question after {len(facts)} facts (seed {seed})")
        facts.append(_step(rng, world, people, objects, places, variant == "qa1"))
    x, y, answer = rng.choice(candidates(variant, world))
    question = QUESTIONS[variant].format(n=len(facts), x=x, y=y)
    document = haystack_with_needles(corpora, rng, source, length_tokens, facts, ordered=True)
    return make_task(
        NAME,
        seed,
        length_tokens,
        difficulty,
        question,
        answer,
        "exact",
        document,
        {"source": source, "variant": variant, "facts": len(facts)},
    )


def solve(question: str, document: str) -> str:
    hits = [
        (v, m["x"], m.groupdict().get("y", ""))
        for v, p in QUESTION_RES.items()
        if (m := p.fullmatch(question))
    ]
    variant, x, y = find_one(hits, "question variant")
    return find_one(
        [a for cx, cy, a in candidates(variant, simulate(document)) if (cx, cy) == (x, y)], "answer"
    )


def wrong_answers(task: Task, document: str) -> list[str]:
    return [p for p in PLACES if p != task.answer] + ["", "nowhere"]


def check(task: Task, document: str) -> None:
    """The question's fact count is the number of fact lines in the document."""
    slots = [m["n"] for pattern in QUESTION_RES.values() if (m := pattern.fullmatch(task.question))]
    n, found = int(find_one(slots, "question variant")), len(FACT_RE.findall(document))
    if n != found:
        raise InvalidTaskError(f"{task.id}: the question says {n} facts, the document has {found}")


FAMILY = Family(
    NAME, "bAbI state tracking (qa1-qa3) among real prose", generate, solve, wrong_answers, True, check=check
)
validate = FAMILY.validate
