"""Which parts of a model's turn run as code."""

from fathom.env.parsing import code_blocks


def test_runnable_fences_in_order_and_others_ignored():
    text = "plan\n```\nprint(1)\n```\nthen\n```text\nnot code\n```\n```repl\nx = 2\n```\n```bash\nls\n```\n```Python\ny = 3\n```"
    assert code_blocks(text) == ["print(1)", "x = 2", "y = 3"]


def test_unclosed_last_block_runs_and_empty_blocks_do_not():
    assert code_blocks("```python\nunclosed = 1\nmore = 2") == ["unclosed = 1\nmore = 2"]
    assert code_blocks("```repl\n\n```\nFINAL(3)") == []
    assert code_blocks("FINAL(42) in prose is not code") == []


def test_indentation_inside_blocks_is_kept():
    assert code_blocks("```repl\nfor i in range(2):\n    print(i)\n```") == [
        "for i in range(2):\n    print(i)"
    ]
