"""rlpar.run.guard.all_finite: every inexact element of every leaf is checked, small leaves in one reduction."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpar.run import guard

BIG = guard.OWN_REDUCTION  # a leaf this large is reduced on its own


def tree(rng):
    """Leaves of several dtypes and sizes, as an agent's state holds them: parameters, a replay buffer's columns,
    a bfloat16 leaf, integer counters and keys."""
    return {
        "params": [rng.normal(size=s).astype(np.float32) for s in [(4, 64), (64,), (64, 64), (64,), (64, 2), (2,)]],
        "buffer": {"obs": rng.normal(size=(BIG // 4 + 3, 4)).astype(np.float32),
                   "reward": rng.normal(size=(BIG + 1,)).astype(np.float32)},
        "half": rng.normal(size=(8, 3)).astype(jnp.bfloat16),
        "count": np.arange(5, dtype=np.int32),
        "scalar": np.float32(1.5),
    }


def reference(t) -> bool:
    return all(np.isfinite(np.asarray(x, np.float64)).all() for x in jax.tree.leaves(t)
               if jnp.issubdtype(np.asarray(x).dtype, jnp.inexact))


@pytest.mark.parametrize("jit", [False, True])
def test_a_non_finite_element_anywhere_is_found(jit):
    rng = np.random.default_rng(0)
    check = jax.jit(guard.all_finite) if jit else guard.all_finite
    clean = tree(rng)
    assert bool(check(clean)) and reference(clean)
    paths = [path for path, x in jax.tree_util.tree_leaves_with_path(clean)
             if jnp.issubdtype(np.asarray(x).dtype, jnp.inexact)]
    assert len(paths) == 10
    for i, path in enumerate(paths):
        for bad in (np.nan, np.inf, -np.inf):
            broken = jax.tree_util.tree_map_with_path(
                lambda p, x: _spoil(x, bad, rng) if p == path else x, clean)
            assert not bool(check(broken)), (path, bad)
            assert not reference(broken)


def _spoil(x, value, rng):
    x = np.array(x)
    if x.ndim == 0:
        return x.dtype.type(value)
    flat = x.reshape(-1)
    flat[rng.integers(flat.size)] = value
    return flat.reshape(x.shape)


def test_integers_are_ignored_and_an_empty_tree_is_finite():
    assert bool(guard.all_finite({"keys": np.array([2**31 - 1], np.uint32), "steps": np.int32(3)}))
    assert bool(guard.all_finite({}))
    assert bool(guard.all_finite(()))


def test_large_finite_values_are_finite():
    # the check does not sum anything: values near float32's largest stay finite
    assert bool(guard.all_finite([np.full((3,), 3e38, np.float32), np.full((BIG,), -3e38, np.float32)]))


def test_small_leaves_share_one_reduction():
    many = [jnp.ones((i + 1, 3)) for i in range(40)]
    assert reductions(many) == 1  # one for all 40, not 40
    assert reductions([jnp.ones((BIG,)), jnp.ones((BIG + 5,))] + many) == 3  # and one each for the large ones
    assert reductions(many + [jnp.ones((2,), jnp.bfloat16)]) == 2  # one per dtype


def reductions(leaves) -> int:
    return len(re.findall(r"stablehlo\.reduce\b", jax.jit(guard.all_finite).lower(leaves).as_text()))
