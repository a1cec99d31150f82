"""``python -m rlpar.train`` with every dense layer's matmul operands rounded to bfloat16 and summed in float32, as a
TPU computes a float32 matmul at JAX's default precision (one bfloat16 pass), to see on a CPU whether that rounding
changes what a run learns.

    python benchmarks/bf16_operands.py ppo --env Breakout-MinAtar --num-envs 1024 --num-steps 16 --lr 1e-3 \\
        --ent-coef 0.03 --eval-every 610 --eval-episodes 64
    RLPAR_PLAIN_LAYERS=1 python benchmarks/bf16_operands.py ppo ...   # with the accelerator's layers and choices

The arguments are the command line's (``python -m rlpar.train --help``). Only ``agents.layers.Dense`` is rounded (the
input and the kernel; the bias is added in float32); its gradient's matmuls see the rounded operands too. A CPU
ignores JAX's matmul precision setting, hence the rounding by hand.
"""

from __future__ import annotations

import sys

import common  # noqa: F401 (puts the repository root on sys.path)


def install() -> None:
    """Round ``agents.layers.Dense``'s matmul operands to bfloat16 from now on (a wrapper around the dtype
    promotion every Dense call makes)."""
    import jax.numpy as jnp

    import agents.layers as layers

    if getattr(layers.promote_dtype, "rounds_to_bf16", False):
        return
    promote = layers.promote_dtype

    def rounded(x, kernel, bias, dtype=None):
        x, kernel, bias = promote(x, kernel, bias, dtype=dtype)
        to_bf16 = lambda a: a.astype(jnp.bfloat16).astype(a.dtype)
        return to_bf16(x), to_bf16(kernel), bias

    rounded.rounds_to_bf16 = True
    layers.promote_dtype = rounded


def main(argv=None) -> int:
    install()
    from rlpar.tools.train import main as train

    return train(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    raise SystemExit(main())
