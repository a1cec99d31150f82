"""The agent contract: what the engine needs from an agent, and a config base class that provides most of it.

An agent family is an ``AgentSpec``: a name, a frozen config dataclass, and ``make(config, env, env_params,
num_envs, axis_name) -> Agent``, the pure functions of one agent on one device (``num_envs``: this device's
environments; ``axis_name``: the device axis to reduce over, ``None`` for one device). The engine
(``rlpar.core.program``) owns the loop: each update it collects ``config.num_steps`` steps of every environment with
``agent.act`` and hands the experience to ``agent.learn``. Episode statistics, device mapping, seeds and sweeps,
checkpoints, logs and evaluation are the engine's; an agent writes none of them.

A minimal agent (see ``examples/a2c.py`` for a complete one)::

    @dataclass(frozen=True)
    class MyConfig(AgentConfig):
        lr: float = config_field(1e-3, "learning rate", sweepable=True)

    def make(config, env, env_params, num_envs, axis_name) -> Agent: ...

    SPEC = AgentSpec("mine", MyConfig, make)   # python -m rlpar.train my.module:SPEC --env CartPole-v1
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple, Protocol, runtime_checkable

import jax

from rlpar.core.rollout import Experience

PolicyFn = Callable[[Any, jax.Array, jax.Array], tuple[jax.Array, Any]]  # (carry, obs [B, ...], key) -> (action, carry)


@runtime_checkable
class Agent(Protocol):
    """The per-device functions of one agent. All are pure and traceable; shapes are per device (``B`` envs).

    - ``init(key_params, key_device) -> state``: the agent's state (parameters, optimizer state, its own keys...).
      ``key_params`` is the same on every device, so parameters start identical; ``key_device`` differs.
    - ``initial_carry(num_envs) -> carry``: per-environment recurrent state ``[B, ...]`` (``()`` when none). The
      collector puts it back wherever an episode ends, so each episode starts from it.
    - ``act(state, carry, obs [B, ...], key) -> (action [B, ...], carry, extras)``: the behaviour policy.
      ``extras`` is any pytree of ``[B, ...]`` arrays to keep per step (PPO: log-prob and value; ``()`` for none);
      the collector stacks it ``[T, B, ...]`` into ``Transition.extras``.
    - ``bootstrap``: ``None``, or ``(state, carry, final_obs [B, ...]) -> pytree [B, ...]``: what a truncated
      step needs from the observation its episode was cut at (PPO: the critic's value). The collector evaluates it
      once per collect for all truncated steps, batched, into ``Transition.final`` (zeros elsewhere); ``carry`` is
      the agent's carry after that step, before the reset.
    - ``learn(state, experience) -> (state, metrics)``: learn from one collect (``rlpar.core.rollout.Experience``).
      ``metrics`` is a flat dict of scalars already reduced over ``axis_name`` (identical on every device); the
      engine adds the episode statistics.
    - ``policy(state, deterministic) -> fn(carry, obs, key) -> (action, carry)``: the policy to evaluate or deploy
      (greedy when ``deterministic``), like brax's ``make_inference_fn``; used by evaluation and GIFs.
    """

    init: Callable[[jax.Array, jax.Array], Any]
    initial_carry: Callable[[int], Any]
    act: Callable[[Any, Any, jax.Array, jax.Array], tuple[jax.Array, Any, Any]]
    bootstrap: Callable[[Any, Any, jax.Array], Any] | None
    learn: Callable[[Any, Experience], tuple[Any, dict]]
    policy: Callable[[Any, bool], PolicyFn]


class AgentFunctions(NamedTuple):
    """A ready-made container satisfying ``Agent``, for agents with nothing else to export."""

    init: Callable[[jax.Array, jax.Array], Any]
    initial_carry: Callable[[int], Any]
    act: Callable[[Any, Any, jax.Array, jax.Array], tuple[jax.Array, Any, Any]]
    bootstrap: Callable[[Any, Any, jax.Array], Any] | None
    learn: Callable[[Any, Experience], tuple[Any, dict]]
    policy: Callable[[Any, bool], PolicyFn]


class AgentSpec(NamedTuple):
    """An agent family as the runner, the CLI and evaluation see it."""

    name: str
    config_cls: type  # a frozen dataclass with AgentConfig's fields and methods (subclass it)
    make: Callable[..., Agent]  # make(config, env, env_params, num_envs, axis_name) -> Agent


def config_field(default, help: str, *, sweepable: bool = False):  # noqa: A002 - the flag's help text
    """A config dataclass field with its ``--help`` text. ``sweepable=True`` declares that the agent uses the value
    only inside traced math (a learning rate, a coefficient, a discount), so ``--sweep FIELD=...`` may vmap over it:
    one compiled program serves every value. Shape-deciding fields (sizes, counts) must not be sweepable."""
    return field(default=default, metadata={"help": help, "sweepable": sweepable})


def sweepable_fields(config_cls: type) -> tuple[str, ...]:
    """The fields ``config_cls`` declares sweepable (``config_field(..., sweepable=True)``)."""
    return tuple(f.name for f in dataclasses.fields(config_cls) if f.metadata.get("sweepable"))


def _positive_int(name: str, value) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise ValueError(f"{name}={value!r}: must be a positive integer")


@dataclass(frozen=True)
class AgentConfig:
    """The fields and checks every agent config needs; subclass it (a frozen dataclass) and add your own.

    The engine reads ``seed``, ``num_envs``, ``num_steps``, ``collector_unroll``, ``batch_size``, ``num_updates``
    and calls ``validate(num_devices)`` before compiling anything; every field becomes a CLI flag.
    """

    seed: int = config_field(0, "PRNG seed; same seed and device count give identical results")
    num_envs: int = config_field(8, "parallel environments in total, split evenly over the devices")
    num_steps: int = config_field(128, "environment steps per environment per update (rollout length T)")
    total_timesteps: int = config_field(1_000_000, "environment steps to train for, over all environments")
    collector_unroll: int = config_field(
        0, "environment steps per iteration of the collect's loop: more compile time, less loop overhead per step; "
           "0: the backend's choice (1 on a CPU, 2 on an accelerator)")

    @property
    def batch_size(self) -> int:
        """Environment steps per update, over all devices."""
        return self.num_envs * self.num_steps

    @property
    def num_updates(self) -> int:
        """Updates (collect + learn) in a run: ``total_timesteps`` rounded down to whole rollouts."""
        return self.total_timesteps // self.batch_size

    def replace(self, **changes):
        return dataclasses.replace(self, **changes)

    def validate(self, num_devices: int = 1):
        """Raise ``ValueError`` naming the first bad field and what would be accepted; return ``self`` if fine.
        Subclasses call ``super().validate(num_devices)`` first, then check their own fields."""
        for name in ("num_envs", "num_steps", "total_timesteps"):
            _positive_int(name, getattr(self, name))
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) or not 0 <= self.seed < 2**32:
            # PRNGKey keeps a seed's low 32 bits: 2**32 would silently be seed 0
            raise ValueError(f"seed={self.seed!r}: must be an integer in 0..{2**32 - 1}")
        unroll = self.collector_unroll
        if not isinstance(unroll, int) or isinstance(unroll, bool) or not 0 <= unroll <= self.num_steps:
            raise ValueError(f"collector_unroll={unroll!r}: must be an integer from 0 (the backend's choice) to "
                             f"num_steps={self.num_steps}")
        if self.num_envs % num_devices:
            raise ValueError(
                f"num_envs={self.num_envs} is not divisible by the device count {num_devices}: "
                f"use a multiple of {num_devices} (e.g. {num_devices * max(1, self.num_envs // num_devices)})"
            )
        if self.total_timesteps < self.batch_size:
            raise ValueError(
                f"total_timesteps={self.total_timesteps} is smaller than one rollout "
                f"(num_envs * num_steps = {self.batch_size}): use at least {self.batch_size}"
            )
        return self
