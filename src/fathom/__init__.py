"""FATHOM: teach small open language models to be Recursive Language Models (RLMs).

A document far larger than the model's context sits in a sandboxed Python REPL as ``ctx``; the model
answers questions about it by writing code and, where reading is needed, calling ``llm(prompt, chunk)``.
"""

__version__ = "0.1.0"
