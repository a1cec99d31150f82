"""Layers with flax's parameters and two computations: a plain one, and one that is faster on XLA:CPU.

``agents.platform`` decides which runs (a module's ``fast`` field overrides it); both give the same values and
gradients up to float rounding from the same parameter tree, so checkpoints load on either path.

``Dense`` is ``nn.Dense``. Its fast path is ``dense``: autodiff of ``x @ kernel`` gives the kernel gradient as
``dot_general(x, g)`` contracting the batch axis of both, a matrix product with a transposed left operand, which
XLA:CPU runs markedly slower than a plain product (figures: ``docs/benchmarks.md``, "Measured history"). ``dense``
computes the same gradient from an explicitly transposed copy of ``x`` (an optimisation barrier keeps XLA
from folding the transpose back into the product). Being a ``jax.custom_vjp``, it has no forward-mode rule: ``jax.jvp``
and ``jax.hessian`` need the plain path. It pays where XLA:CPU emits AVX-512 code; on an AVX2 host only for small
batches (under 1,024 rows), so there larger ones take the plain product unless asked (``agents.platform.dense_fast_path``).

``Conv3x3`` is ``nn.Conv(features, (3, 3), padding="SAME")``. Its fast path is a dense layer over 3x3 patches
(``patches3x3``) with the kernel reshaped to ``[9 C, features]``: XLA:CPU runs convolutions inside loops (every
training step here runs inside ``lax.scan``) several times slower than the equal matmul (``docs/benchmarks.md``).

Both fast paths were measured on float32 only; a layer whose computation dtype is anything else (bf16, say) takes the
plain path whatever the switch says.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import flax.linen as nn
import jax
import jax.numpy as jnp
from flax.linen.dtypes import promote_dtype

from agents import platform


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


def patches3x3(x: jax.Array) -> jax.Array:
    """``[..., H, W, C] -> [..., H, W, 9 C]``: each pixel's 3x3 neighbourhood, zero-padded at the border.

    Entry ``(i * 3 + j) * C + c`` of pixel ``(y, x)`` is input ``(y + i - 1, x + j - 1, c)``: the row-major order of
    a ``[3, 3, C, F]`` convolution kernel, so ``patches3x3(x) @ kernel.reshape(9 * C, F)`` is the SAME convolution.
    """
    h, w = x.shape[-3:-1]
    padded = jnp.pad(x, ((0, 0),) * (x.ndim - 3) + ((1, 1), (1, 1), (0, 0)))
    return jnp.concatenate([padded[..., i:i + h, j:j + w, :] for i in range(3) for j in range(3)], axis=-1)


def _fast(fast: bool | None, dtype: Any) -> bool:
    """Whether ``Conv3x3`` computing in ``dtype`` takes its fast path (float32 only, see the module docstring;
    ``platform.conv_as_patches`` where ``fast`` is ``None``)."""
    return dtype == jnp.float32 and (platform.conv_as_patches() if fast is None else fast)


def fast_dense(fast: bool | None, dtype: Any, rows: int | None = None) -> bool:
    """``_fast`` for ``Dense`` on ``rows`` input rows, whose fast path depends on the ISA and the batch
    (``platform.dense_fast_path``)."""
    return dtype == jnp.float32 and (platform.dense_fast_path(rows=rows) if fast is None else fast)


class Dense(nn.Module):
    """``nn.Dense`` over the last axis: kernel ``[in, out]``, bias ``[out]``, same names, initialisers and dtypes.

    ``dtype`` is the computation dtype (``None``: promote input and parameters, as ``nn.Dense`` does); ``fast``
    picks the path (``None``: ``agents.platform.dense_fast_path()`` when applied).
    """

    features: int
    kernel_init: Callable = nn.initializers.lecun_normal()
    bias_init: Callable = nn.initializers.zeros_init()
    dtype: Any = None
    param_dtype: Any = jnp.float32
    fast: bool | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        kernel = self.param("kernel", self.kernel_init, (jnp.shape(x)[-1], self.features), self.param_dtype)
        bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype)
        x, kernel, bias = promote_dtype(x, kernel, bias, dtype=self.dtype)
        batch_shape = x.shape[:-1]
        if not fast_dense(self.fast, x.dtype, math.prod(batch_shape)):
            return x @ kernel + bias
        y = dense(x.reshape((-1, x.shape[-1])), kernel, bias)
        return y.reshape(batch_shape + (self.features,))


class Conv3x3(nn.Module):
    """``nn.Conv(features, (3, 3), padding="SAME")`` (stride 1) over ``[..., H, W, C]`` -> ``[..., H, W, features]``.

    Parameters as ``nn.Conv``'s: kernel ``[3, 3, C, features]`` (``kernel[i, j, c]`` weighs input pixel
    ``(y + i - 1, x + j - 1)``, channel ``c``, for output pixel ``(y, x)``), bias ``[features]``, same default
    initialisers. ``dtype`` and ``fast`` as in ``Dense``.
    """

    features: int
    kernel_init: Callable = nn.initializers.lecun_normal()
    bias_init: Callable = nn.initializers.zeros_init()
    dtype: Any = None
    param_dtype: Any = jnp.float32
    fast: bool | None = None

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        if jnp.ndim(x) < 3:
            raise ValueError(f"Conv3x3 takes [..., H, W, C] inputs, got shape {jnp.shape(x)}")
        channels = jnp.shape(x)[-1]
        kernel = self.param("kernel", self.kernel_init, (3, 3, channels, self.features), self.param_dtype)
        bias = self.param("bias", self.bias_init, (self.features,), self.param_dtype)
        x, kernel, bias = promote_dtype(x, kernel, bias, dtype=self.dtype)
        if _fast(self.fast, x.dtype):
            return patches3x3(x) @ kernel.reshape(9 * channels, self.features) + bias
        batch_shape = x.shape[:-3]
        y = jax.lax.conv_general_dilated(
            x.reshape((-1,) + x.shape[-3:]), kernel, window_strides=(1, 1), padding=((1, 1), (1, 1)),
            dimension_numbers=("NHWC", "HWIO", "NHWC"),
        )
        return (y + bias).reshape(batch_shape + y.shape[1:])
