"""OOLONG-style records whose labels must be read, not grepped: the shared layer of `oolong` and `pairs`.

A document is a header, one record per line, and a footer::

    Date: Jun 16, 2024 || User: 98779 || Instance: Quick question: who painted The Night Watch?

Each instance is a general-knowledge question whose category (TREC coarse question types, as in
OOLONG's trec_coarse split) is `LABELS`. The label is semantic: it follows from what the question asks
for, and no label name (nor any word of one) ever appears in an instance, so grepping for "location"
finds only the header. Instances come from templates with filler slots, plus optional chatty openers and
closers, so lines vary.

For an expert policy: `RECORD_RE` parses a line (groups: date, user, instance); `label_of(instance)` is
the pure classifier a simulated competent sub-LM uses to label instances (it matches the instance against
every template; exactly one label fits). Dates and users are uniform; only labels carry the signal.
Questions about a document name it by `SPAN` ("the 3,744 questions above (dated Jan 2, 2022 to Dec 30,
2024)", slots from `span(records)`, regexes in `SPAN_SLOTS`, checked by `check_span`), so question texts
are specific to their document.

This module does not choose label counts or questions (see `fathom.tasks.oolong` / `fathom.tasks.pairs`).
"""

from __future__ import annotations

import datetime
import random
import re
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import NamedTuple

from fathom.tasks.family import InvalidTaskError

LABELS = (
    "abbreviation",
    "entity",
    "description and abstract concept",
    "human being",
    "location",
    "numeric value",
)
LABEL_WORDS = frozenset(w for label in LABELS for w in label.split() if w != "and")


def _bank(text: str) -> tuple[str, ...]:
    """Fillers written as one "|"-separated string: compact, and a tuple, so immutable."""
    return tuple(text.split("|"))


_ACRONYMS = _bank(
    "NASA|UNESCO|NATO|FBI|CPU|DNA|HTML|SCUBA|RADAR|LASER|UEFA|OPEC|GDP|ATM|AIDS|BBC|IMF|ISBN|USB|RAM|LED|GPS|"
    "HTTP|MRI|CEO|UFO|DVD|PDF|JPEG|URL"
)
_ANIMALS = _bank("aardvark|okapi|axolotl|pangolin|quokka|narwhal|tapir|capybara|wombat|platypus|ibex|marmot")
_COUNTRIES = _bank(
    "France|Japan|Kenya|Peru|Norway|Egypt|Canada|Chile|India|Ghana|Portugal|Vietnam|Iceland|Morocco"
)
_CITIES = _bank(
    "Kyoto|Marrakesh|Porto|Cusco|Lyon|Krakow|Bergen|Seville|Hanoi|Quebec|Valparaiso|Cairo|Oslo|Nairobi"
)
_BOOKS = _bank(
    "War and Peace|Don Quixote|Pride and Prejudice|Moby-Dick|The Odyssey|Crime and Punishment|"
    "One Hundred Years of Solitude|The Divine Comedy|Les Miserables|The Tale of Genji"
)
_INVENTIONS = _bank("telephone|light bulb|printing press|steam engine|telescope|bicycle|radio|sewing machine")
_PAINTINGS = _bank("the Mona Lisa|The Starry Night|The Night Watch|Guernica|The Scream|The Birth of Venus")
_FEATS = _bank(
    "climb Mount Everest|reach the South Pole|fly solo across the Atlantic|walk on the Moon|"
    "swim the English Channel|sail around the world alone"
)
_DISCOVERIES = _bank("penicillin|radium|the electron|X-rays|the neutron|insulin|the planet Neptune")
_MUSIC = _bank("the Moonlight Sonata|The Four Seasons|the Messiah|The Magic Flute|the Goldberg Variations")
_LANDMARKS = _bank(
    "the Eiffel Tower|Machu Picchu|the Taj Mahal|Angkor Wat|Petra|the Great Barrier Reef|Stonehenge"
)
_PEAKS = _bank("the Matterhorn|Aconcagua|K2|Mont Blanc|Denali|Kilimanjaro")
_PHENOMENA = _bank(
    "thunder|rainbows|tides|earthquakes|inflation|hiccups|rust|jet lag|the northern lights|fog"
)
_DEVICES = _bank("refrigerator|compass|thermostat|microwave oven|vaccine|solar panel|barometer|jet engine")
_WORDS = _bank("serendipity|nostalgia|irony|entropy|hubris|empathy|melancholy|stoicism|utopia")
_PAIRS = _bank("weather and climate|a virus and a bacterium|a crocodile and an alligator|speed and velocity")
_ITEMS = _bank("gallon of milk|loaf of bread|cup of coffee|movie ticket|first-class stamp|bus pass")
_EVENTS = _bank(
    "the Berlin Wall fall|the Titanic sink|the first Olympic Games take place|the printing press arrive in "
    "England|the Panama Canal open|humans first land on the Moon"
)
_SUBSTANCES = _bank("water|ethanol|mercury|olive oil|liquid nitrogen")
_ACTIVITIES = _bank("boil an egg|fly from London to Tokyo|walk the Great Wall|read War and Peace")
_THINGS = _bank("ruby|emerald|canary|ripe lime|fire engine|sapphire")

SLOTS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "acr": _ACRONYMS,
        "animal": _ANIMALS,
        "country": _COUNTRIES,
        "city": _CITIES,
        "book": _BOOKS,
        "invention": _INVENTIONS,
        "painting": _PAINTINGS,
        "feat": _FEATS,
        "discovery": _DISCOVERIES,
        "music": _MUSIC,
        "landmark": _LANDMARKS,
        "peak": _PEAKS,
        "phenomenon": _PHENOMENA,
        "device": _DEVICES,
        "word": _WORDS,
        "pair": _PAIRS,
        "item": _ITEMS,
        "event": _EVENTS,
        "substance": _SUBSTANCES,
        "activity": _ACTIVITIES,
        "thing": _THINGS,
    }
)

TEMPLATES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "abbreviation": (
            "What does {acr} stand for?",
            "What is the full form of {acr}?",
            "What do the letters {acr} mean?",
            "{acr} is short for what?",
            "Which words make up the acronym {acr}?",
        ),
        "entity": (
            "What kind of animal is a {animal}?",
            "What color is a {thing}?",
            "What is the national flower of {country}?",
            "What currency is used in {country}?",
            "Which language do most people speak in {country}?",
            "What does a {animal} eat?",
        ),
        "description and abstract concept": (
            "Why do we get {phenomenon}?",
            "What causes {phenomenon}?",
            "How does a {device} work?",
            "What is the meaning of the word {word}?",
            "What is the difference between {pair}?",
            "Can you explain the idea of {word}?",
        ),
        "human being": (
            "Who wrote {book}?",
            "Who invented the {invention}?",
            "Who painted {painting}?",
            "Who was the first person to {feat}?",
            "Which scientist discovered {discovery}?",
            "Who composed {music}?",
        ),
        "location": (
            "Where is {landmark}?",
            "In which country is {city}?",
            "Which river flows through {city}?",
            "What is the capital of {country}?",
            "Which mountain range contains {peak}?",
            "Where do wild {animal}s live?",
        ),
        "numeric value": (
            "How many legs does a {animal} have?",
            "In what year did {event}?",
            "How much does a {item} cost?",
            "What is the population of {city}?",
            "How tall is {peak}?",
            "How long does it take to {activity}?",
            "At what temperature does {substance} boil?",
        ),
    }
)

OPENERS = ("", "", "", "Quick question: ", "Does anyone know: ", "I was wondering: ", "Trivia night: ")
CLOSERS = ("", "", "", " Thanks!", " Just curious.", " I forgot.", " Asking for a friend.")


def _template_regex(template: str) -> str:
    """The template with each slot replaced by the alternation of its fillers; the first letter may be
    lower-cased (it is, after an opener)."""
    parts = re.split(r"\{(\w+)\}", template)
    out = "".join(
        re.escape(p) if i % 2 == 0 else "(?:" + "|".join(map(re.escape, SLOTS[p])) + ")"
        for i, p in enumerate(parts)
    )
    return f"(?i:{out[0]}){out[1:]}" if template[0].isalpha() else out


def _optional(options: tuple[str, ...]) -> str:
    return "(?:" + "|".join(re.escape(o) for o in options if o) + ")?"


_LABEL_RES = tuple(
    (
        label,
        re.compile(
            _optional(OPENERS) + "(?:" + "|".join(map(_template_regex, ts)) + ")" + _optional(CLOSERS)
        ),
    )
    for label, ts in TEMPLATES.items()
)
_SLOT_NAMES = {t: tuple(re.findall(r"\{(\w+)\}", t)) for ts in TEMPLATES.values() for t in ts}
DATE = r"[A-Z][a-z]{2} \d{1,2}, \d{4}"  # as `date_text` writes it: "Jun 16, 2024"
RECORD_RE = re.compile(rf"^Date: ({DATE}) \|\| User: (\d{{5}}) \|\| Instance: (.+)$", re.MULTILINE)
MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
FIRST_DAY = datetime.date(2022, 1, 1)
N_DAYS = 3 * 365


class Record(NamedTuple):
    day: int  # days after FIRST_DAY
    user: int
    label: str
    text: str


def label_of(instance: str) -> str:
    """The category of an instance, read from what it asks (the simulated competent sub-LM)."""
    fits = [label for label, pattern in _LABEL_RES if pattern.fullmatch(instance)]
    if len(fits) != 1:
        raise ValueError(f"instance fits {len(fits)} categories: {instance!r}")
    return fits[0]


def instance(rng: random.Random, label: str) -> str:
    template = rng.choice(TEMPLATES[label])
    text = template.format(**{slot: rng.choice(SLOTS[slot]) for slot in _SLOT_NAMES[template]})
    opener = rng.choice(OPENERS)
    if opener and template[0].isalpha():  # "Quick question: who wrote ..." but "...: NASA is short for"
        text = text[0].lower() + text[1:]
    return opener + text + rng.choice(CLOSERS)


def date_text(day: int) -> str:
    """'Jun 16, 2024' for a day number; month names are fixed here, never taken from the locale."""
    d = FIRST_DAY + datetime.timedelta(days=day)
    return f"{MONTHS[d.month - 1]} {d.day}, {d.year}"


def parse_date(text: str) -> int:
    month, day, year = text.replace(",", "").split()
    return (datetime.date(int(year), MONTHS.index(month) + 1, int(day)) - FIRST_DAY).days


def format_record(record: Record, dates: tuple[str, ...]) -> str:
    return f"Date: {dates[record.day]} || User: {record.user} || Instance: {record.text}"


def fill(n_chars: int, make: Callable[[], Record], min_records: int = 0) -> list[Record]:
    """Records from `make()` until their lines add up to about `n_chars` (a record line is ~95 chars),
    and at least `min_records` of them."""
    records: list[Record] = []
    total = 0
    per_line = len("Date: Jun 16, 2024 || User: 98779 || Instance: ") + 1
    while total < n_chars or len(records) < min_records:
        record = make()
        records.append(record)
        total += per_line + len(record.text)
    return records


HEADER = (
    "The following lines contain {n} general-knowledge questions, one per line. Each line has a date, "
    "a user ID and an instance (the question itself). Each instance can be described as one of "
    "{k} categories: {labels}. The category is not written on the line: read the instance to tell what "
    "kind of answer it asks for. You will be asked about aggregate statistics of these categories. "
    "Do not try to guess, estimate, or approximate the result."
)
FOOTER = (
    "Recall: the preceding lines contain {n} general-knowledge questions, each of one of the {k} "
    "categories above."
)


def quoted_labels() -> str:
    return ", ".join(f"'{label}'" for label in LABELS)


def document(records: list[Record]) -> str:
    dates = tuple(date_text(day) for day in range(N_DAYS))
    n, k = len(records), len(LABELS)
    lines = [HEADER.format(n=n, k=k, labels=quoted_labels()), ""]
    lines += [format_record(r, dates) for r in records]
    lines += ["", FOOTER.format(n=n, k=k)]
    return "\n".join(lines)


# How oolong and pairs questions name their document: its record count and date span, so that a question
# text is specific to its document (dataset splits never share one) while still being a plain description.
SPAN = "the {n} questions above (dated {first} to {last})"
SPAN_SLOTS: Mapping[str, str] = MappingProxyType({"n": r"\d{1,3}(?:,\d{3})*", "first": DATE, "last": DATE})


def span(records: list[Record]) -> dict[str, str]:
    """The `SPAN` slots of a record list: "3,744" records, earliest and latest date."""
    days = [r.day for r in records]
    return {"n": f"{len(records):,}", "first": date_text(min(days)), "last": date_text(max(days))}


def check_span(slots: Mapping[str, str], text: str) -> None:
    """The `SPAN` slots of a question (as parsed) describe the document's records exactly."""
    days = [day for day, _, _ in parse(text)]
    if not days:
        raise InvalidTaskError("the document has no records")
    want = {"n": f"{len(days):,}", "first": date_text(min(days)), "last": date_text(max(days))}
    got = {k: slots[k] for k in want}
    if got != want:
        raise InvalidTaskError(f"the question describes the records as {got}, they are {want}")


def check_not_greppable(task: object, text: str) -> None:
    """No word of any label name appears in any instance (the header may name them)."""
    for _, _, inst in RECORD_RE.findall(text):
        words = set(re.findall(r"[a-z]+", inst.lower()))
        if words & LABEL_WORDS:
            raise InvalidTaskError(f"instance names a label: {inst!r}")


def parse(text: str) -> list[tuple[int, int, str]]:
    """(day, user, instance) of every record line, in order."""
    return [(parse_date(d), int(u), inst) for d, u, inst in RECORD_RE.findall(text)]
