"""The optimizer chain the agents share: global-norm clipping, then Adam, with an optional linear decay to 0."""

from __future__ import annotations

import optax


def make_vector_optimizer(lr: float, max_grad_norm: float, decay_steps: int | None = None
                          ) -> optax.GradientTransformation:
    """``clip_by_global_norm(max_grad_norm) -> adam(lr, eps=1e-5)``; with ``decay_steps`` the learning rate falls
    linearly from ``lr`` to 0 over that many optimizer steps. Works on any pytree, including one raveled vector."""
    schedule = optax.linear_schedule(lr, 0.0, decay_steps) if decay_steps else lr
    return optax.chain(optax.clip_by_global_norm(max_grad_norm), optax.adam(schedule, eps=1e-5))


def make_optimizer(lr: float, max_grad_norm: float, decay_steps: int | None = None) -> optax.GradientTransformation:
    """``make_vector_optimizer`` for parameter pytrees, wrapped in ``optax.flatten``: its state is the vector
    optimizer's, so the same optimizer state serves an update on the pytree and one on the parameters raveled into a
    vector (the XLA:CPU fast path of ``agents.ppo``), and checkpoints load either way."""
    return optax.flatten(make_vector_optimizer(lr, max_grad_norm, decay_steps))
