"""A re-export, kept because users' agents import the contract from here: the contract is ``rlpar.core.agent``, and
``make_train`` (an agent package's ``train``) is ``rlpar.run.runner.make_train``."""

from rlpar.core.agent import Agent, AgentConfig, AgentFunctions, AgentSpec, PolicyFn, config_field, sweepable_fields
from rlpar.run.runner import make_train

__all__ = ["Agent", "AgentConfig", "AgentFunctions", "AgentSpec", "PolicyFn", "config_field", "make_train",
           "sweepable_fields"]
