"""Running mean and variance of observations, synchronised over devices.

Every device folds the same global batch moments into its statistics (means of per-device moments, ``pmean``-ed
over ``axis_name``), so all devices hold bit-identical statistics that equal those of the concatenated batch.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from rlpar.core.collectives import pmean, psum


@struct.dataclass
class RunningStats:
    mean: jax.Array  # [*shape] running mean
    var: jax.Array  # [*shape] running (population) variance
    count: jax.Array  # scalar float32, samples seen (starts at a tiny epsilon)


def init_stats(shape: tuple[int, ...]) -> RunningStats:
    return RunningStats(jnp.zeros(shape, jnp.float32), jnp.ones(shape, jnp.float32), jnp.float32(1e-4))


def update_stats(stats: RunningStats, batch: jax.Array, axis_name: str | None) -> RunningStats:
    """Fold ``batch [N, *shape]`` (this device's share; every device holds the same N) into ``stats``.

    Batch moments over all devices: ``m = pmean(mean(x))``, ``v = pmean(mean(x^2)) - m^2``, ``n = psum(N)``.
    Merge (Chan et al.): ``delta = m - mean``, ``total = count + n``,
    ``mean' = mean + delta * n / total``, ``var' = (var * count + v * n + delta^2 * count * n / total) / total``.
    """
    batch = batch.astype(jnp.float32)
    batch_mean = pmean(jnp.mean(batch, axis=0), axis_name)
    batch_var = jnp.maximum(pmean(jnp.mean(jnp.square(batch), axis=0), axis_name) - jnp.square(batch_mean), 0.0)
    batch_count = psum(jnp.float32(batch.shape[0]), axis_name)
    delta = batch_mean - stats.mean
    total = stats.count + batch_count
    mean = stats.mean + delta * batch_count / total
    m2 = stats.var * stats.count + batch_var * batch_count + jnp.square(delta) * stats.count * batch_count / total
    return RunningStats(mean, m2 / total, total)


def normalize_obs(stats: RunningStats, obs: jax.Array, clip: float = 10.0) -> jax.Array:
    """``clip((obs - mean) / sqrt(var + 1e-8), -clip, clip)``; ``obs`` is ``[..., *shape]``."""
    return jnp.clip((obs - stats.mean) / jnp.sqrt(stats.var + 1e-8), -clip, clip)
