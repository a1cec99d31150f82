"""Config checks and field declarations the agents' configs share.

Each check raises ``ValueError`` with one line naming the field, its value and what would be accepted, as
``rlpar.agent.AgentConfig.validate`` does; an agent's ``validate`` calls them after ``super().validate``.
"""

from __future__ import annotations

import dataclasses

from agents.networks import ACTIVATIONS
from rlpar.core.agent import config_field


def positive_ints(config, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"{name}={value!r}: must be a positive integer")


def positive(config, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if not value > 0:
            raise ValueError(f"{name}={value!r}: must be > 0")


def non_negative(config, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if not value >= 0:
            raise ValueError(f"{name}={value!r}: must be >= 0")


def unit_interval(config, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if not 0.0 <= value <= 1.0:
            raise ValueError(f"{name}={value!r}: must be in [0, 1]")


def network(config) -> None:
    """``hidden_sizes`` (one or more positive widths) and ``activation`` (a name in ``agents.networks``)."""
    sizes = config.hidden_sizes
    if not sizes or any((not isinstance(h, int)) or isinstance(h, bool) or h <= 0 for h in sizes):
        example = ",".join(map(str, type(config).__dataclass_fields__["hidden_sizes"].default))
        raise ValueError(f"hidden_sizes={sizes!r}: must be one or more positive integers, e.g. {example}")
    if config.activation not in ACTIVATIONS:
        raise ValueError(f"activation={config.activation!r}: must be one of {', '.join(ACTIVATIONS)}")


def shuffle_block(config, num_devices: int) -> None:
    """``shuffle_block``: 0 (the backend's choice), 1 (single rows), or a block of rows of one time step that divides
    the environments per device and leaves each minibatch whole blocks."""
    block = config.shuffle_block
    if not isinstance(block, int) or isinstance(block, bool) or block < 0:
        raise ValueError(f"shuffle_block={block!r}: must be 0 (the backend's choice), 1 (single rows) or a number of "
                         f"rows of one time step moved together")
    local_envs = config.num_envs // num_devices
    if block > 1 and (local_envs % block or (local_envs * config.num_steps // block) % config.num_minibatches):
        raise ValueError(f"shuffle_block={block}: must divide the environments per device ({local_envs}) and leave "
                         f"each of the {config.num_minibatches} minibatches the same number of blocks; 1 (single "
                         f"rows) always does")


def minibatches(config, num_devices: int) -> None:
    """``update_epochs`` and ``num_minibatches`` positive, and the minibatches split the per-device batch evenly."""
    positive_ints(config, "update_epochs", "num_minibatches")
    local_batch = (config.num_envs // num_devices) * config.num_steps
    if local_batch % config.num_minibatches:
        raise ValueError(
            f"num_minibatches={config.num_minibatches} does not divide the per-device batch "
            f"(num_envs / devices * num_steps = {config.num_envs // num_devices} * {config.num_steps} = "
            f"{local_batch}): use a divisor of it"
        )


def redeclare(base: type, name: str, default):
    """A field of ``base`` with another default, keeping its help text and sweepability: how a subclass changes
    an inherited default without writing the field's description again."""
    inherited = {f.name: f for f in dataclasses.fields(base)}[name]
    if inherited.metadata.get("help") is None:
        raise TypeError(f"{base.__name__}.{name} is not a config_field")
    return config_field(default, inherited.metadata["help"], sweepable=inherited.metadata.get("sweepable", False))
