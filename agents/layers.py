"""A dense layer with the same parameters as ``flax.linen.Dense`` and a backward pass that is cheaper on XLA:CPU.

Autodiff of ``x @ kernel`` gives the kernel gradient as ``dot_general(x, g)`` contracting the batch axis of both,
i.e. a matrix product with a transposed left operand. XLA:CPU runs that form markedly slower than a plain product:
on a 2-core CPU, for a batch of 256 (a PPO minibatch), 35 us instead of 27 us for a 64x64 kernel and 19 us instead of
9 us for a 64x2 policy head (``benchmarks/README.md``). ``dense`` computes the same gradient from an explicitly
transposed copy of ``x`` (an optimisation barrier keeps XLA from folding the transpose back into the product).
Values and gradients equal ``nn.Dense``'s up to float rounding; the parameter names and initialisers are the same,
so checkpoints and parameter trees do not change.
"""

from __future__ import annotations

from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp


@jax.custom_vjp
def dense(x: jax.Array, kernel: jax.Array, bias: jax.Array) -> jax.Array:
    """``x @ kernel + bias`` for ``x [N, in]``, ``kernel [in, out]``, ``bias [out]``."""
    return x @ kernel + bias


def _dense_forward(x, kernel, bias):
    return dense(x, kernel, bias), (x, kernel)


def _dense_backward(residuals, g):
    x, kernel = residuals
    x_t = jax.lax.optimization_barrier(jnp.transpose(x))  # [in, N], materialised: a plain product below
    return g @ kernel.T, x_t @ g, jnp.sum(g, axis=0)


dense.defvjp(_dense_forward, _dense_backward)


class Dense(nn.Module):
    """``nn.Dense`` (kernel ``[in, out]`` and bias ``[out]``, same names) over the last axis, via ``dense``."""

    features: int
    kernel_init: Callable = nn.initializers.lecun_normal()
    bias_init: Callable = nn.initializers.zeros_init()

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.param("kernel", self.kernel_init, (x.shape[-1], self.features), jnp.float32)
        bias = self.param("bias", self.bias_init, (self.features,), jnp.float32)
        batch_shape = x.shape[:-1]
        y = dense(x.reshape((-1, x.shape[-1])).astype(jnp.float32), kernel, bias)
        return y.reshape(batch_shape + (self.features,))
