"""Which action spaces the library's agents take, and the check an agent for one kind runs first in its ``make``.

``discrete_actions(agent, env, env_params)`` returns ``n`` of a ``Discrete(n)`` space; ``continuous_actions(...)``
returns the bounds of a ``Box``. For the other kind each raises one ``ValueError`` naming the env's action space and
the agents that fit it, e.g.::

    dqn needs a discrete action space (Discrete(n)), but Pendulum-v1 has Box(low=-2, high=2, shape=(1,)) (continuous
    actions); agents for it: ppo, sac

The engine calls ``make`` when it builds the per-device program, before anything is traced or compiled, and the CLI
prints a ``ValueError`` as one line (``error: ...``, exit code 2).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

# Agent name -> the kinds of action space it takes. A new agent of this library adds its line here, so that a refusal
# can name the agents that fit.
ACTION_SPACES: dict[str, tuple[str, ...]] = {
    "ppo": ("discrete", "continuous"),
    "ppo_rnn": ("discrete",),
    "pqn": ("discrete",),
    "dqn": ("discrete",),
    "sac": ("continuous",),
}
# Agents for team envs (an agent axis: envs.marl_suite), which take no single-agent env.
TEAM_AGENTS = ("ippo", "mappo")


def single_agent(agent: str, env) -> None:
    """The one-line ``ValueError`` if ``env`` is a team env (it declares ``agent_names``): a single-agent agent
    would read its agent axis as part of one observation and one action."""
    names = getattr(env, "agent_names", None)
    if names:
        raise ValueError(f"{agent} takes single-agent envs, but {getattr(env, 'name', type(env).__name__)} has "
                         f"{len(names)} agents ({', '.join(names)}); agents for it: {', '.join(TEAM_AGENTS)}")


def team_agents(agent: str, env) -> tuple[str, ...]:
    """The agent names of a team env; the one-line ``ValueError`` for a single-agent env."""
    names = getattr(env, "agent_names", None)
    if not names:
        name = getattr(env, "name", type(env).__name__)
        raise ValueError(f"{agent} needs a multi-agent env (marl-NAME with a JaxMARL env name, e.g. "
                         f"marl-MPE_simple_spread_v3, or a JaxMARL-style env instance), but {name} has a single "
                         f"agent; agents for it: {', '.join(sorted(ACTION_SPACES))}")
    return tuple(names)


def agents_for(kind: str) -> list[str]:
    """The agents of ``ACTION_SPACES`` that take a ``kind`` (``"discrete"`` or ``"continuous"``) action space."""
    return sorted(name for name, kinds in ACTION_SPACES.items() if kind in kinds)


def describe(space) -> str:
    """A gymnax space in a short phrase: ``Discrete(2)``, ``Box(low=-2, high=2, shape=(1,))``."""
    if hasattr(space, "n"):
        return f"Discrete({int(space.n)})"
    if all(hasattr(space, name) for name in ("low", "high", "shape")):
        return f"Box(low={_bound(space.low)}, high={_bound(space.high)}, shape={tuple(space.shape)})"
    return type(space).__name__


def _bound(value) -> str:
    array = np.asarray(value)
    return f"{array.item():g}" if array.size == 1 else "[...]"


def _is_discrete(space) -> bool:
    return hasattr(space, "n") and len(getattr(space, "shape", ())) == 0


def _is_box(space) -> bool:
    return not hasattr(space, "n") and all(hasattr(space, name) for name in ("low", "high", "shape"))


def _refuse(agent: str, needs: str, env, env_params, kind_found: str) -> ValueError:
    own = getattr(env, "unwrapped", env).action_space(env_params)  # the env's own space, before envs.RescaleAction
    name = getattr(env, "name", type(env).__name__)
    fits = agents_for(kind_found)
    return ValueError(f"{agent} needs {needs}, but {name} has {describe(own)} ({kind_found} actions); agents for it: "
                      f"{', '.join(fits) if fits else 'none in this library'}")


def discrete_actions(agent: str, env, env_params) -> int:
    """``n`` for an env whose action space is ``Discrete(n)``; the one-line ``ValueError`` otherwise (also for a
    team env)."""
    single_agent(agent, env)
    space = env.action_space(env_params)
    if _is_discrete(space):
        return int(space.n)
    raise _refuse(agent, "a discrete action space (Discrete(n))", env, env_params, "continuous")


class ActionBounds(NamedTuple):
    """A ``Box`` action space as a continuous-action agent needs it; arrays ``[action_dim]`` float32."""

    low: np.ndarray  # bounds of the actions the agent passes to ``env.step`` ([-1, 1] behind envs.RescaleAction)
    high: np.ndarray
    own_low: np.ndarray  # the env's own bounds (what envs.RescaleAction maps [-1, 1] onto)
    own_high: np.ndarray

    @property
    def action_dim(self) -> int:
        return int(self.low.shape[0])


def continuous_actions(agent: str, env, env_params) -> ActionBounds:
    """The bounds of an env whose action space is a ``Box`` with finite bounds; the one-line ``ValueError`` for a
    discrete space (or a ``Box`` with an infinite bound, which a squashed policy cannot cover), or a team env."""
    single_agent(agent, env)
    space = env.action_space(env_params)
    if not _is_box(space):
        raise _refuse(agent, "a continuous action space (Box)", env, env_params, "discrete")
    own = getattr(env, "unwrapped", env).action_space(env_params)
    own = own if _is_box(own) and tuple(own.shape) == tuple(space.shape) else space
    flat = lambda bound, box: np.broadcast_to(np.asarray(bound, np.float32), box.shape).reshape(-1)
    bounds = ActionBounds(flat(space.low, space), flat(space.high, space), flat(own.low, own), flat(own.high, own))
    if not all(np.all(np.isfinite(b)) for b in bounds):
        name = getattr(env, "name", type(env).__name__)
        raise ValueError(f"{agent} needs finite action bounds, but {name} has {describe(own)}: wrap the env so its "
                         "actions lie in a bounded Box")
    return bounds
