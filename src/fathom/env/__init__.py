"""The RLM environment: tasks + sandboxed REPL + reward behind OpenEnv's reset/step/state contract."""

from fathom.env.environment import EnvConfig, RLMEnvironment, TaskNotFound
from fathom.env.models import CellRecord, RLMAction, RLMObservation, RLMState, SubCallRecord
from fathom.env.sublm import (
    HFSubLM,
    OpenAISubLM,
    RequestBatcher,
    ScriptedSubLM,
    SubLM,
    SubLMReply,
    SubLMRequest,
)

__all__ = [
    "CellRecord",
    "EnvConfig",
    "HFSubLM",
    "OpenAISubLM",
    "RLMAction",
    "RLMEnvironment",
    "RLMObservation",
    "RLMState",
    "RequestBatcher",
    "ScriptedSubLM",
    "SubCallRecord",
    "SubLM",
    "SubLMReply",
    "SubLMRequest",
    "TaskNotFound",
]
