"""agents.shuffle.permutation: a permutation of range(n) for every n, each element equally likely at each position."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents.shuffle import permutation


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 7, 8, 10, 100, 1000, 1024, 1025, 4097])
def test_a_permutation_for_every_size(n):
    perms = jax.jit(jax.vmap(lambda k: permutation(k, n)))(jax.random.split(jax.random.PRNGKey(n), 6))
    assert perms.dtype == jnp.int32 and perms.shape == (6, n)
    for perm in np.asarray(perms):
        np.testing.assert_array_equal(np.sort(perm), np.arange(n))
    if n >= 5:  # different keys, different orders; none the identity
        assert len({tuple(p) for p in np.asarray(perms)}) == 6
        assert not any((p == np.arange(n)).all() for p in np.asarray(perms))


@pytest.mark.parametrize("n", [6, 32, 40, 100])
def test_every_element_equally_likely_at_every_position(n):
    """Over 12000 keys, the count of elements of bucket i (ten buckets of the elements, or each element when n is
    small) at positions of bucket j is its expectation within 5 standard deviations, and the table passes a
    chi-square test at about 1e-3. (With the first version's 6 rounds on 6 elements, some positions were favoured
    by 6 standard deviations: small n now sorts.)"""
    draws, buckets = 12000, min(n, 10)
    perms = np.asarray(jax.jit(jax.vmap(lambda k: permutation(k, n)))(jax.random.split(jax.random.PRNGKey(0), draws)))
    bucket = np.arange(n) * buckets // n
    counts = np.zeros((buckets, buckets))
    for position in range(n):
        np.add.at(counts, (bucket[perms[:, position]], bucket[position]), 1)
    sizes = np.bincount(bucket)
    expected = np.outer(sizes, sizes) * draws / n
    assert np.abs(counts - expected).max() < 5 * np.sqrt(expected).max()
    chi2 = ((counts - expected) ** 2 / expected).sum()
    dof = (buckets - 1) ** 2
    assert chi2 < dof + 3.1 * np.sqrt(2 * dof) + 10  # about the 0.999 quantile of chi-square(dof)


def test_neighbours_are_separated_as_by_chance():
    """Consecutive elements of the batch (the same environment's consecutive steps) land in the same minibatch of 4 as
    often as in a uniformly random shuffle: 1/4 minus a little, not more."""
    n, minibatches = 1024, 4
    perms = np.asarray(jax.vmap(lambda k: permutation(k, n))(jax.random.split(jax.random.PRNGKey(1), 200)))
    which = np.empty_like(perms)
    for row, perm in enumerate(perms):
        which[row, perm] = np.arange(n) // (n // minibatches)  # minibatch of each element
    together = (which[:, 1:] == which[:, :-1]).mean()
    assert abs(together - (n // minibatches - 1) / (n - 1)) < 0.01
