"""Which action spaces the library's agents handle, and the check a discrete-only agent runs before it builds.

``discrete_actions(agent, env, env_params)`` is what a Q-learning agent (or any agent with a categorical head only)
calls first in its ``make``: the number of actions of a ``Discrete(n)`` space, or a ``ValueError`` naming the env's
action space and the agents that do fit it. The runner calls ``make`` when it builds the per-device program, before
anything is traced or compiled, and the CLI prints a ``ValueError`` as one line (``error: ...``, exit code 2).
"""

from __future__ import annotations

# Agent name -> the kinds of action space it handles. A new agent in this library adds its line here, so that the
# refusal of a discrete-only agent can name the agents a continuous env needs.
ACTION_SPACES: dict[str, tuple[str, ...]] = {
    "ppo": ("discrete", "continuous"),
    "ppo_rnn": ("discrete",),
    "pqn": ("discrete",),
}


def agents_for(kind: str) -> list[str]:
    """The agents (of ``ACTION_SPACES``) that handle a ``kind`` (``"discrete"`` or ``"continuous"``) action space."""
    return sorted(name for name, kinds in ACTION_SPACES.items() if kind in kinds)


def describe(space) -> str:
    """A gymnax space in one short phrase: ``Discrete(3)``, ``Box(low=-2.0, high=2.0, shape=(1,))``."""
    if hasattr(space, "n"):
        return f"Discrete({int(space.n)})"
    if all(hasattr(space, name) for name in ("low", "high", "shape")):
        low, high = (_bound(b) for b in (space.low, space.high))
        return f"Box(low={low}, high={high}, shape={tuple(space.shape)})"
    return type(space).__name__


def _bound(value) -> str:
    """A scalar bound as a plain number, an array bound as ``[...]`` (they can be long)."""
    import numpy as np

    array = np.asarray(value)
    return f"{array.item():g}" if array.size == 1 else "[...]"


def discrete_actions(agent: str, env, env_params) -> int:
    """``n`` for an env whose action space is ``Discrete(n)``; ``ValueError`` otherwise, e.g.::

        pqn needs a discrete action space (Discrete(n)), but Pendulum-v1 has Box(low=-2, high=2, shape=(1,))
        (continuous actions); agents for it: ppo

    The space named is the env's own (``env.unwrapped``), before ``envs.RescaleAction`` maps a ``Box`` to ``[-1, 1]``.
    """
    space = env.action_space(env_params)
    if hasattr(space, "n") and len(getattr(space, "shape", ())) == 0:
        return int(space.n)
    own = getattr(env, "unwrapped", env).action_space(env_params)
    name = getattr(env, "name", type(env).__name__)
    fits = agents_for("continuous")
    raise ValueError(
        f"{agent} needs a discrete action space (Discrete(n)), but {name} has {describe(own)} (continuous actions); "
        f"agents for it: {', '.join(fits) if fits else 'none in this library'}"
    )
