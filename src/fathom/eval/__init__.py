"""Evaluation: run a policy (expert, direct, rlm) on a task file, resumably, with Wilson intervals.

    from fathom.eval import run_eval, summarize, wilson
    from fathom.eval.policies import DirectPolicy, ExpertPolicy, RLMPolicy   # imports torch on use

`fathom eval` is the command line (`fathom.eval.cli`); plots and the HTML report are `fathom.report`.
"""

from fathom.eval.runner import EvalConfigMismatch, read_rows, run_eval
from fathom.eval.stats import length_bucket, summarize, wilson

__all__ = ["EvalConfigMismatch", "length_bucket", "read_rows", "run_eval", "summarize", "wilson"]
