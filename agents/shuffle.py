"""Minibatch shuffles: a keyed pseudorandom permutation of ``range(n)``, drawn the way that is fast on the platform.

Two ways, one contract (each element equally likely at each position; ``tests/test_shuffle.py`` checks both):

- ``"feistel"``, XLA:CPU's fast path: no sort, a few integer operations per element (below);
- ``"sort"``, everywhere else: ``jax.random.permutation`` (random sort keys, sorted).

Which one a trace takes, how many rows of a time step move together (``block_size``) and how ``minibatches``
gathers them are decided in ``rlpar.core.platform`` (``shuffle_method``, ``shuffle_block``, ``gather_layout``), with the
measurements behind each; ``method``, ``block_size``, ``set_method``, ``set_block`` and ``using`` here are those
answers and their forcing hooks (benchmarks compare them on one backend).

The Feistel permutation, without sorting:

``jax.random.permutation`` draws random sort keys and sorts them, in two rounds for a PPO batch (``n`` of a thousand
to a few hundred thousand). XLA:CPU sorts with a comparator call per comparison: on PPO's large CartPole config
(1024 environments x 128 steps, 4 epochs) the shuffles took about a third of an update. The Feistel walk below costs a
few integer operations per element instead.

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
from typing import Any, Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from rlpar.core import platform
from rlpar.core.platform import BLOCK_MAX, GATHER_LAYOUTS, LANES, MIN_UNITS, SHUFFLE_METHODS  # noqa: F401 (re-exported)

ROUNDS = 6
SMALL = 32  # fewer elements than this: jax.random.permutation
METHODS = SHUFFLE_METHODS
LAYOUTS = ("auto",) + GATHER_LAYOUTS  # using(layout=...): "auto" lets rlpar.core.platform.gather_layout decide

method = platform.shuffle_method  # (platform=None) -> "feistel" or "sort", for a trace now
set_method = platform.set_shuffle_method  # force one of METHODS for everything traced from now on; None: by platform
set_block = platform.set_shuffle_block  # force block_size's answer (where it fits); None: it decides again
block_size = platform.shuffle_block  # (n, step_rows, num_minibatches) -> rows of one time step moved together


def rows_per_unit(config, n: int, step_rows: int | None) -> int:
    """Rows of one time step that move as one unit when a batch of ``n`` rows (``step_rows`` per time step) is shuffled
    into ``config.num_minibatches`` minibatches: ``config.shuffle_block`` where the config sets it (validated to fit),
    else the backend's choice (``block_size``)."""
    if config.shuffle_block:
        if config.shuffle_block > 1 and (step_rows is None or step_rows % config.shuffle_block):
            raise ValueError(f"shuffle_block={config.shuffle_block}: a batch laid out {step_rows} rows per time step "
                             f"cannot move in blocks of that many rows of one step")
        return config.shuffle_block
    return block_size(n, step_rows, config.num_minibatches)


@contextlib.contextmanager
def using(name: str | None, block: int | None = None, layout: str = "auto") -> Iterator[None]:
    """``set_method(name)`` and ``set_block(block)`` inside the ``with`` block, the previous choices restored;
    ``layout`` (one of ``LAYOUTS``) is how ``minibatches`` gathers, for benchmarks to compare."""
    if layout not in LAYOUTS:
        raise ValueError(f"shuffle layout {layout!r}: expected one of {', '.join(LAYOUTS)}")
    with platform.forcing(shuffle_method=name, shuffle_block=block,
                          gather_layout=None if layout == "auto" else layout):
        yield


def epoch_orders(key: jax.Array, n: int, epochs: int, block: int = 1) -> jax.Array:
    """``int32 [epochs, n // block]``: each epoch's permutation of the batch's blocks, one key per epoch."""
    return jax.vmap(lambda k: permutation(k, n // block))(jax.random.split(key, epochs))


def minibatches(x: jax.Array, order: jax.Array, num_minibatches: int, block: int = 1) -> jax.Array:
    """``x [N, ...]`` in ``order`` (a permutation of its ``N // block`` blocks), as ``[num_minibatches, N / M, F]``
    with each row flattened (``F`` = the product of ``x.shape[1:]``; ``restore`` gives rows their shape back).

    The gather reads flat rows, blocks of narrow rows as one flat row of ``block * F``, blocks of wide rows as
    ``[block, F]`` slabs (``rlpar.core.platform.gather_layout``, which says why; ``"shaped"``, rows in their own shape,
    only when forced, to measure against). Sizes are spelled out: a leaf may be empty (``[N, 0]``)."""
    n, rest = x.shape[0], x.shape[1:]
    width = math.prod(rest)
    layout = platform.gather_layout(block, width)
    if layout == "shaped":
        units = x if block == 1 else x.reshape((n // block, block) + rest)
        return jnp.take(units, order, axis=0).reshape((num_minibatches, n // num_minibatches) + rest)
    slabs = layout == "blocks"
    units = x.reshape((n // block, block, width) if slabs else (n // block, block * width))
    taken = jnp.take(units, order, axis=0)
    return taken.reshape((num_minibatches, n // num_minibatches, width))


def rows_of(batch, block: int = 1) -> tuple[Any, Callable[[Any], Any]]:
    """``(rows, split)``: what an epoch gathers into minibatches of units of ``block`` rows (``minibatches`` on each
    leaf of ``rows``), and ``split(minibatch)``, one minibatch of it (leaves ``[R, F]``) as ``batch``'s tree with
    leaves ``[R, ...]``.

    With ``rlpar.core.platform.packed_gather(block)`` every leaf's values are laid side by side as 32-bit words in one
    ``uint32 [N, W]`` array (``pack``): an epoch gathers one array instead of one per leaf. Otherwise ``rows`` is
    ``batch`` itself. The values ``split`` gives are the same either way, bit for bit."""
    if platform.packed_gather(block):
        packed, unpack = pack(batch)
        return packed, unpack
    return batch, lambda minibatch: restore(minibatch, batch)


def pack(tree) -> tuple[jax.Array, Callable[[jax.Array], Any]]:
    """``(packed, unpack)``: ``tree``'s leaves (each ``[N, ...]``) as the columns of one ``uint32 [N, W]`` array,
    and ``unpack(rows)``, which takes rows of it (``[R, W]``) back to ``tree``'s structure, dtypes and trailing shapes
    (leaves ``[R, ...]``), bit for bit. A 32-bit value is one word (its bits); a narrower one is widened to a word
    (integers and booleans by value, 16-bit floats by their bits); a 64-bit one takes two words."""
    leaves, treedef = jax.tree.flatten(tree)
    n = leaves[0].shape[0]
    columns, specs = [], []
    for leaf in leaves:
        words = _to_words(leaf.reshape((n, -1)))
        specs.append((leaf.dtype, leaf.shape[1:], words.shape[1]))
        columns.append(words)
    packed = jnp.concatenate(columns, axis=1) if len(columns) > 1 else columns[0]

    def unpack(rows: jax.Array):
        out, start = [], 0
        for dtype, shape, width in specs:
            part = rows[:, start:start + width]
            start += width
            out.append(_from_words(part, dtype).reshape(rows.shape[:1] + shape))
        return jax.tree.unflatten(treedef, out)

    return packed, unpack


def _to_words(x: jax.Array) -> jax.Array:
    """``x [N, F]`` as ``uint32 [N, F * max(1, itemsize / 4)]``, losslessly (``_from_words`` inverts it)."""
    n = x.shape[0]
    size = x.dtype.itemsize
    if size >= 4:
        return jax.lax.bitcast_convert_type(x, jnp.uint32).reshape((n, -1))
    if jnp.issubdtype(x.dtype, jnp.floating):  # float16, bfloat16, 8-bit floats: their bits, widened
        x = jax.lax.bitcast_convert_type(x, jnp.uint16 if size == 2 else jnp.uint8)
    elif jnp.issubdtype(x.dtype, jnp.signedinteger):  # by value, sign kept
        return jax.lax.bitcast_convert_type(x.astype(jnp.int32), jnp.uint32)
    return x.astype(jnp.uint32)


def _from_words(words: jax.Array, dtype) -> jax.Array:
    """``_to_words``'s inverse for a column range of ``words`` ``[R, K]`` that held values of ``dtype``."""
    dtype = jnp.dtype(dtype)
    size = dtype.itemsize
    if size >= 4:
        return jax.lax.bitcast_convert_type(words.reshape(words.shape[0], -1, size // 4) if size > 4 else words, dtype)
    if jnp.issubdtype(dtype, jnp.floating):
        return jax.lax.bitcast_convert_type(words.astype(jnp.uint16 if size == 2 else jnp.uint8), dtype)
    if dtype == jnp.bool_:
        return words != 0
    if jnp.issubdtype(dtype, jnp.signedinteger):
        return jax.lax.bitcast_convert_type(words, jnp.int32).astype(dtype)
    return words.astype(dtype)


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
