"""Minibatch shuffles: a keyed pseudorandom permutation of ``range(n)``, drawn the way that is fast on the platform.

Two ways, one contract (each element equally likely at each position; ``tests/test_shuffle.py`` checks both):

- ``"feistel"``, XLA:CPU's fast path (``agents.platform.cpu_fast_paths``): no sort, a few integer operations per
  element (below);
- ``"sort"``, everywhere else: ``jax.random.permutation`` (random sort keys, sorted). On a TPU the Feistel walk was
  the slow one (``docs/benchmarks.md``, "Shuffles on the accelerator"): its cycle walking is a ``while_loop`` whose
  every round is a full pass over the batch with 32-bit integer multiplies, where a TPU sorts half a million keys in
  well under a millisecond.

``method()`` says which one a trace takes; ``set_method`` forces one (benchmarks compare them on one backend).

The Feistel permutation, without sorting:

``jax.random.permutation`` draws random sort keys and sorts them, in two rounds for a PPO batch (``n`` of a thousand
to a few hundred thousand). XLA:CPU sorts with a comparator call per comparison: on PPO's large CartPole config
(1024 environments x 128 steps, 4 epochs) the shuffles took about a third of an update. ``permutation`` below costs a
few integer operations per element instead, on every platform.

How: ``range(2^b)`` with ``2^b >= n`` (``b`` at least 2) is permuted by a Feistel network, an alternating sequence of
rounds that each XOR one half of an index's bits with a keyed hash of the other half (each round is its own inverse,
so the composition is a bijection). Indices that land at ``n`` or beyond are mapped again until they fall below ``n``
(cycle walking: the cycle of the bijection through an index ``< n`` returns below ``n``), which restricts the
bijection of ``range(2^b)`` to one of ``range(n)``. Every element is equally likely at every position over random
keys (``tests/test_shuffle.py`` checks frequencies), which is what minibatch sampling needs; the network does not reach
every permutation of ``n`` (Feistel networks on bit strings give only even permutations), which minibatch sampling
does not need. Below ``SMALL`` elements the halves are too few bits to mix well (with 5 or 6 elements, some positions
were measurably favoured) and a sort costs nothing: there ``jax.random.permutation`` draws the order.
"""

from __future__ import annotations

import contextlib
import math
from typing import Iterator

import jax
import jax.numpy as jnp
import numpy as np

ROUNDS = 6
SMALL = 32  # fewer elements than this: jax.random.permutation
METHODS = ("feistel", "sort")
BLOCK_MAX = 64  # rows of one time step moved as one unit at most, off XLA:CPU (block_size)
MIN_UNITS = 256  # units each minibatch holds at least, for block_size to grow a block

_forced: str | None = None  # set_method; None: by platform
_block_forced: int | None = None  # set_block; None: block_size decides
LAYOUTS = ("auto", "flat", "blocks", "shaped")
LANES = 128  # a TPU tile's minor dimension: rows at least this wide gather as [N / block, block, F] (minibatches)
_layout = "auto"  # how minibatches gathers (see there); the others only to measure against


def method(platform: str | None = None) -> str:
    """The permutation a trace takes now: ``set_method``'s if set, else ``"feistel"`` where the XLA:CPU fast paths
    are on (``agents.platform.cpu_fast_paths``) and ``"sort"`` elsewhere. Read when a program is traced."""
    if _forced is not None:
        return _forced
    from rlpar.cpu_paths import cpu_fast_paths

    return "feistel" if cpu_fast_paths(platform) else "sort"


def set_method(name: str | None) -> None:
    """Force ``name`` (one of ``METHODS``) for everything traced from now on; ``None`` decides by platform again."""
    global _forced
    if name is not None and name not in METHODS:
        raise ValueError(f"shuffle method {name!r}: expected one of {', '.join(METHODS)}")
    _forced = name


def set_block(rows: int | None) -> None:
    """Force ``block_size``'s answer (where it divides the step's rows); ``None`` lets it decide again."""
    global _block_forced
    if rows is not None and (not isinstance(rows, int) or rows < 1):
        raise ValueError(f"shuffle block {rows!r}: expected a positive integer or None")
    _block_forced = rows


@contextlib.contextmanager
def using(name: str | None, block: int | None = None, layout: str = "auto") -> Iterator[None]:
    """``set_method(name)`` and ``set_block(block)`` inside the ``with`` block, the previous choices restored;
    ``layout`` (one of ``LAYOUTS``) is how ``minibatches`` gathers, for benchmarks to compare."""
    global _layout
    if layout not in LAYOUTS:
        raise ValueError(f"shuffle layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
    previous = _forced, _block_forced, _layout
    set_method(name)
    set_block(block)
    _layout = layout
    try:
        yield
    finally:
        set_method(previous[0])
        set_block(previous[1])
        _layout = previous[2]


def block_size(n: int, step_rows: int | None, num_minibatches: int) -> int:
    """How many consecutive rows of a flat batch move together when it is shuffled: 1 with the Feistel method;
    otherwise the largest power of two up to ``BLOCK_MAX`` that divides ``step_rows`` (the rows one time step
    contributes: ``flat index = t * step_rows + r``, so a block never spans two time steps) and leaves every
    minibatch at least ``MIN_UNITS`` blocks. ``None`` (layout unknown): 1.

    Why: an accelerator gathers a few large rows far faster than many small ones (``docs/benchmarks.md``, "Shuffles
    on the accelerator"). A block holds different environments at the same step, which are independent given the
    policy, so a minibatch of blocks is as varied as one of single rows; every row is still used once per epoch and
    each order of the blocks is equally likely."""
    if step_rows is None or n % num_minibatches:
        return 1
    if _block_forced is not None:
        block = _block_forced
        return block if step_rows % block == 0 and (n // block) % num_minibatches == 0 else 1
    if method() == "feistel":
        return 1
    block = 1
    while (block * 2 <= BLOCK_MAX and step_rows % (block * 2) == 0
           and (n // (block * 2)) % num_minibatches == 0 and n // (block * 2) // num_minibatches >= MIN_UNITS):
        block *= 2
    return block


def epoch_orders(key: jax.Array, n: int, epochs: int, block: int = 1) -> jax.Array:
    """``int32 [epochs, n // block]``: each epoch's permutation of the batch's blocks, one key per epoch."""
    return jax.vmap(lambda k: permutation(k, n // block))(jax.random.split(key, epochs))


def minibatches(x: jax.Array, order: jax.Array, num_minibatches: int, block: int = 1) -> jax.Array:
    """``x [N, ...]`` in ``order`` (a permutation of its ``N // block`` blocks), as ``[num_minibatches, N / M, F]``
    with each row flattened (``F`` = the product of ``x.shape[1:]``; ``restore`` gives rows their shape back).

    The gather reads flat rows: an accelerator lays out an array's last two dimensions in tiles (a TPU's are
    8 x 128), so a row shaped ``[10, 10, 4]`` is gathered as padded tiles, a flat one as dense lanes. Blocks of
    narrow rows (``F < LANES``) are gathered as one flat row of ``block * F``; blocks of wide rows as
    ``[block, F]`` slabs. On a TPU v5e (PPO, 4,096 envs x 128 steps, ``docs/benchmarks.md``, "Shuffles on the
    accelerator"): CartPole's update took 145 ms with shaped single rows and 12.7 ms with blocks of 64 as flat rows
    of 256; Breakout-MinAtar's (``F`` = 400) 1,509 ms shaped, 284 ms flat, 149 ms as [64, 400] slabs, where blocks
    of 8 as flat rows of 3,200 asked for 21 GiB of temporaries. On XLA:CPU (block 1) the reshapes are free. Sizes
    are spelled out: a leaf may be empty (``[N, 0]``). (``using(layout=...)`` forces ``"flat"``, ``"blocks"`` or
    ``"shaped"``, rows in their own shape, for benchmarks to compare.)"""
    n, rest = x.shape[0], x.shape[1:]
    width = math.prod(rest)
    if _layout == "shaped":
        units = x if block == 1 else x.reshape((n // block, block) + rest)
        return jnp.take(units, order, axis=0).reshape((num_minibatches, n // num_minibatches) + rest)
    slabs = _layout == "blocks" or (_layout == "auto" and block > 1 and width >= LANES)
    units = x.reshape((n // block, block, width) if slabs else (n // block, block * width))
    taken = jnp.take(units, order, axis=0)
    return taken.reshape((num_minibatches, n // num_minibatches, width))


def restore(minibatch, like):
    """``minibatch``'s leaves ``[R, F]`` (one minibatch of ``minibatches``) reshaped to ``[R] + `` the trailing
    shape of ``like``'s leaves (the batch the minibatch came from)."""
    return jax.tree.map(lambda x, ref: x.reshape(x.shape[:1] + ref.shape[1:]), minibatch, like)


def _mix(x: jax.Array, key: jax.Array) -> jax.Array:
    """A keyed 32-bit hash: the key XORed in, then an integer finaliser (xorshift-multiply, three times)."""
    x = x ^ key
    x = (x ^ (x >> 16)) * np.uint32(0x7FEB352D)
    x = (x ^ (x >> 15)) * np.uint32(0x846CA68B)
    return x ^ (x >> 16)


def permutation(key: jax.Array, n: int) -> jax.Array:
    """A pseudorandom permutation of ``range(n)`` (``int32 [n]``) drawn from ``key``, by ``method()``."""
    if n < SMALL or method() == "sort":
        return jax.random.permutation(key, n).astype(jnp.int32)
    return feistel_permutation(key, n)


def feistel_permutation(key: jax.Array, n: int) -> jax.Array:
    """A pseudorandom permutation of ``range(n)`` (``int32 [n]``) drawn from ``key``, without a sort."""
    if n < SMALL:
        return jax.random.permutation(key, n).astype(jnp.int32)
    bits = max(2, (n - 1).bit_length())
    low_bits = bits - bits // 2
    low_mask, high_mask = np.uint32((1 << low_bits) - 1), np.uint32((1 << (bits // 2)) - 1)
    round_keys = jax.random.bits(key, (ROUNDS,), jnp.uint32)

    def bijection(x: jax.Array) -> jax.Array:  # on range(2^bits)
        low, high = x & low_mask, x >> low_bits
        for r in range(ROUNDS):
            if r % 2 == 0:
                low = low ^ (_mix(high, round_keys[r]) & low_mask)
            else:
                high = high ^ (_mix(low, round_keys[r]) & high_mask)
        return (high << low_bits) | low

    limit = np.uint32(n)
    x = bijection(jnp.arange(n, dtype=jnp.uint32))
    if n < (1 << bits):  # cycle walking
        x = jax.lax.while_loop(lambda x: jnp.any(x >= limit), lambda x: jnp.where(x >= limit, bijection(x), x), x)
    return x.astype(jnp.int32)
