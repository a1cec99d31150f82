"""Agent names for the command line (the tools layer): ``ppo``, ``ppo_rnn``, ``pqn``, ``dqn``, ``sac``, ``ippo``,
``mappo``, or ``package.module:ATTR``.

The engine never imports this module or the agents; the CLI, evaluation and resume do.
"""

from __future__ import annotations

import dataclasses
import importlib

from envs.errors import from_user_code
from rlpar.core.agent import AgentSpec

# name -> "module:attribute" of its AgentSpec, imported on first use
AGENTS: dict[str, str] = {
    "ppo": "agents.ppo:SPEC",
    "ppo_rnn": "agents.ppo_rnn:SPEC",
    "pqn": "agents.pqn:SPEC",
    "dqn": "agents.dqn:SPEC",
    "sac": "agents.sac:SPEC",
    "ippo": "agents.team:IPPO_SPEC",
    "mappo": "agents.team:MAPPO_SPEC",
}


def _accepted() -> str:
    return f"known agents are {', '.join(names())}, or package.module:ATTR naming an rlpar.agent.AgentSpec"


def names() -> list[str]:
    return sorted(AGENTS)


def register(name: str, target: str | AgentSpec) -> None:
    """Add an agent name for the CLI: ``target`` is an ``AgentSpec`` or its ``"module:attribute"``."""
    AGENTS[name] = target


def get(name: str) -> AgentSpec:
    """The agent ``name`` (a registered name, or ``package.module:ATTR`` naming an ``AgentSpec``); ``ValueError``
    saying what is accepted otherwise."""
    target = AGENTS.get(name, name if ":" in str(name) else None)
    if target is None:
        raise ValueError(f"unknown agent {name!r}: {_accepted()}")
    if isinstance(target, AgentSpec):
        return checked(target, name)
    module_name, _, attr = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"agent {name!r}: cannot import module {module_name!r} ({err}); {_accepted()}") from err
    except Exception as err:  # noqa: BLE001 -- the user's module failed while importing
        raise from_user_code(f"agent {name!r}: importing module {module_name!r}", err, _accepted()) from err
    spec = getattr(module, attr, None)
    if not isinstance(spec, AgentSpec):
        found = "nothing" if spec is None else type(spec).__name__
        raise ValueError(f"agent {name!r}: {module_name}.{attr} is {found}, not an rlpar.agent.AgentSpec "
                         f"(AgentSpec(name, config_cls, make)); {_accepted()}")
    return checked(spec, name)


def checked(spec: AgentSpec, name: str) -> AgentSpec:
    """``spec`` if its parts are what the engine needs (a dataclass config class, a callable ``make``); else a
    ``ValueError`` naming the part."""
    if not (isinstance(spec.config_cls, type) and dataclasses.is_dataclass(spec.config_cls)):
        raise ValueError(f"agent {name!r}: its config_cls is {spec.config_cls!r}, not a dataclass (subclass "
                         "rlpar.agent.AgentConfig as a frozen dataclass)")
    if not callable(spec.make):
        raise ValueError(f"agent {name!r}: its make is {type(spec.make).__name__}, not callable (make(config, env, "
                         "env_params, num_envs, axis_name) -> rlpar.agent.Agent)")
    return spec


def from_meta(meta: dict) -> AgentSpec:
    """The agent a run dir's ``config.json`` names: a registered name or ``module:ATTR``, else the ``AgentSpec``
    of that name in the module its ``make`` came from (``agent_module``), so a user's agent trained from Python
    evaluates and resumes without being registered."""
    name, module_name = meta["agent"], meta.get("agent_module")
    if name in AGENTS or ":" in name or not module_name:
        return get(name)
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"agent {name!r}: cannot import its module {module_name!r} ({err})") from None
    for value in vars(module).values():
        if isinstance(value, AgentSpec) and value.name == name:
            return value
    raise ValueError(f"agent {name!r}: module {module_name!r} has no AgentSpec named {name!r}")
