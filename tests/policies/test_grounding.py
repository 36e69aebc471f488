"""The grounding check: literals a policy searches for must come from the question or an earlier printout."""

from __future__ import annotations

import pytest

from fathom.policies.grounding import check_code, check_trace, regex_fragments


def _trace(question: str, turns: list[tuple[str, str]]) -> dict:
    return {
        "first": f"Question: {question}\n\n`ctx` is a str of 100 characters (about 25 tokens).",
        "turns": [{"text": t, "observation": o} for t, o in turns],
    }


def _cell(code: str) -> str:
    return f"Let me look.\n```repl\n{code}\n```"


LOOK = _cell("print(len(ctx))\nprint(ctx[:300])")
HEAD = (
    "[output]\n5120\nOne of the special magic numbers for brave-falcon is: 4817263.\n\n[turn 1/12; 11 left]"
)


def test_a_grounded_transcript_passes():
    search = _cell(
        "import re\n"
        "hits = re.findall(r'magic numbers for brave-falcon is: (\\d{7})\\.', ctx)\n"
        "print(hits)\n"
        "if 'brave-falcon' in ctx:\n"
        "    FINAL(hits[0])"
    )
    g = check_trace(
        _trace("What is the magic number for brave-falcon?", [(LOOK, HEAD), (search, "[output]\n")])
    )
    assert g.ok and g.literals == 2, g


def test_a_literal_never_seen_fails_and_names_the_fragment():
    guess = _cell("import re\nprint(re.findall(r'One of the special magic numbers for (\\S+) is', ctx))")
    g = check_trace(_trace("What is the magic number for brave-falcon?", [(guess, HEAD)]))
    # The first turn has seen only the question: the generator's sentence is not in it.
    assert not g.ok
    assert [(v.turn, v.fragment) for v in g.violations] == [(0, "One of the special magic numbers for ")]
    # The same cell after the head was printed is grounded.
    assert check_trace(_trace("What is the magic number for brave-falcon?", [(LOOK, HEAD), (guess, "")])).ok


def test_prose_positions_and_generic_tokens_are_not_patterns():
    code = (
        "import re\n"
        "print('anything at all here', len(ctx))\n"
        "reply = llm('Summarise the chunk for a reader', ctx[:100])\n"
        "rows = ' || '.join(ctx.split('\\n'))\n"
        "dates = re.findall(r'^[A-Z][a-z]{2} \\d{1,2}, \\d{4}: ', ctx, re.M)\n"
        "from datetime import datetime\n"
        "d = datetime.strptime('x', '%b %d, %Y')\n"
    )
    n, bad = check_code(code, seen="")
    assert bad == [] and n >= 3
    n, bad = check_code("x = ctx.count('zebra-stripes')", seen="")
    assert [v.literal for v in bad] == ["zebra-stripes"]


def test_regex_fragments_drop_syntax_and_unescape():
    assert regex_fragments(r"^VAR ([A-Z]{5}) = (?:(\d{5})|VAR ([A-Z]{5}))$") == ["VAR ", " = ", "VAR "]
    assert regex_fragments(r"(?i)\bbrave-falcons?\b") == ["brave-falcon"]
    assert regex_fragments(r"a\.b \|\| c") == ["a.b || c"]


ASK_IN_THE_CALL = _cell(
    'replies = llm_batch([("""Answer from this text, or reply not found if it is not there.\n'
    'Question: x?""", c) for c in ["a", "b"]])\nprint(replies)'
)
ASK_NAMED_FIRST = _cell(  # the teacher's reading cell since run 13
    'ask = """Answer from this text, or reply not found if it is not there.\nQuestion: x?"""\n'
    'replies = llm_batch([(ask, c) for c in ["a", "b"]])\nprint(replies)'
)


@pytest.mark.parametrize("ask", [ASK_IN_THE_CALL, ASK_NAMED_FIRST])
def test_what_the_policy_asked_its_reader_is_known_to_it_in_later_turns_only(ask):
    drop = _cell("answers = [r for r in replies if 'not found' not in r.lower()]\nprint(answers)")
    q = "What is the magic number for brave-falcon?"
    assert check_trace(_trace(q, [(ask, "[output]\n['7', 'x']"), (drop, "")])).ok
    # never asked for: the phrase is the policy's guess at what its reader says
    g = check_trace(_trace(q, [(LOOK, HEAD), (drop, "")]))
    assert [(v.turn, v.literal) for v in g.violations] == [(1, "not found")]
    # asked in the same cell that tests for it is not yet known there
    same = _cell(
        ask.split("```repl\n")[1].split("```")[0] + "\n" + drop.split("```repl\n")[1].split("```")[0]
    )
    assert [v.literal for v in check_trace(_trace(q, [(same, "")])).violations] == ["not found"]


def test_a_named_string_no_llm_call_is_given_is_still_a_pattern():
    search = _cell('term = "zebra-stripes"\nprint(ctx.count(term))')
    g = check_trace(_trace("What is the magic number for brave-falcon?", [(search, "")]))
    assert [v.literal for v in g.violations] == ["zebra-stripes"]
