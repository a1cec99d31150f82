"""agents.shuffle: a permutation of range(n) for every n by either method, each element equally likely at each
position; minibatches of blocks that use every row once per epoch."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import shuffle

METHODS = pytest.mark.parametrize("method", shuffle.METHODS)


def permutation(key, n):
    return shuffle.permutation(key, n)


@pytest.fixture(autouse=True)
def _method(request):
    """Tests parametrized by ``method`` trace under it; the others under the platform's choice."""
    method = request.node.callspec.params.get("method") if hasattr(request.node, "callspec") else None
    with shuffle.using(method):
        yield


@METHODS
@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, 7, 8, 10, 100, 1000, 1024, 1025, 4097])
def test_a_permutation_for_every_size(n, method):
    perms = jax.jit(jax.vmap(lambda k: permutation(k, n)))(jax.random.split(jax.random.PRNGKey(n), 6))
    assert perms.dtype == jnp.int32 and perms.shape == (6, n)
    for perm in np.asarray(perms):
        np.testing.assert_array_equal(np.sort(perm), np.arange(n))
    if n >= 5:  # different keys, different orders; none the identity
        assert len({tuple(p) for p in np.asarray(perms)}) == 6
        assert not any((p == np.arange(n)).all() for p in np.asarray(perms))


@METHODS
@pytest.mark.parametrize("n", [6, 32, 40, 100])
def test_every_element_equally_likely_at_every_position(n, method):
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


@METHODS
def test_neighbours_are_separated_as_by_chance(method):
    """Consecutive elements of the batch (the same environment's consecutive steps) land in the same minibatch of 4 as
    often as in a uniformly random shuffle: 1/4 minus a little, not more."""
    n, minibatches = 1024, 4
    perms = np.asarray(jax.vmap(lambda k: permutation(k, n))(jax.random.split(jax.random.PRNGKey(1), 200)))
    which = np.empty_like(perms)
    for row, perm in enumerate(perms):
        which[row, perm] = np.arange(n) // (n // minibatches)  # minibatch of each element
    together = (which[:, 1:] == which[:, :-1]).mean()
    assert abs(together - (n // minibatches - 1) / (n - 1)) < 0.01


def test_the_platform_picks_the_method_and_the_block():
    """XLA:CPU (these tests' backend) takes the Feistel walk and moves rows one by one; off the fast paths (an
    accelerator's answer) blocks grow to the largest power of two that divides the step's rows and leaves MIN_UNITS
    blocks per minibatch, whichever the permutation."""
    from rlpar.core import platform

    assert shuffle.method() == "feistel"
    assert shuffle.block_size(128 * 4096, 4096, 8) == 1
    with platform.fast_paths(False):
        assert shuffle.method() == "sort"  # the backend is a CPU's: a GPU's answer (a TPU takes the Feistel walk)
        assert shuffle.block_size(128 * 4096, 4096, 8) == shuffle.BLOCK_MAX
    with shuffle.using("sort"):
        assert shuffle.block_size(128 * 4096, 4096, 8) == 1  # the method alone does not make blocks
    with shuffle.using("sort"), platform.fast_paths(False):
        assert shuffle.method() == "sort"
        assert shuffle.block_size(128 * 4096, 4096, 8) == shuffle.BLOCK_MAX
        assert shuffle.block_size(128 * 48, 48, 4) == 4  # blocks of 8 would leave 192 units per minibatch
        assert shuffle.block_size(128 * 1, 1, 4) == 1
        assert shuffle.block_size(1000, None, 4) == 1  # layout unknown
        assert shuffle.block_size(128 * 6, 6, 4) == 1  # 6 rows a step: blocks of 2 would leave 96 units per minibatch
        assert shuffle.block_size(4096 * 6, 6, 4) == 2
    with shuffle.using("feistel", 8):
        assert shuffle.block_size(128 * 4096, 4096, 8) == 8  # forced
        assert shuffle.block_size(128 * 12, 12, 4) == 1  # 8 does not divide a step's 12 rows: row by row
    with pytest.raises(ValueError, match="shuffle method 'bogus'"):
        shuffle.set_method("bogus")


def test_the_configs_shuffle_block_overrides_the_backend_and_is_refused_where_it_does_not_fit():
    from agents.ppo import PPOConfig
    from agents.pqn import PQNConfig
    from agents.ppo_rnn import RecurrentPPOConfig

    from rlpar.core import platform

    with platform.fast_paths(False):  # the backend would pick blocks of 64 here
        assert shuffle.rows_per_unit(PPOConfig(num_minibatches=8), 128 * 4096, 4096) == shuffle.BLOCK_MAX
        assert shuffle.rows_per_unit(PPOConfig(num_minibatches=8, shuffle_block=1), 128 * 4096, 4096) == 1
        assert shuffle.rows_per_unit(PQNConfig(num_minibatches=8, shuffle_block=16), 128 * 4096, 4096) == 16
    with pytest.raises(ValueError, match="a batch laid out None rows per time step"):
        shuffle.rows_per_unit(PPOConfig(shuffle_block=4), 1024, None)
    assert PPOConfig(num_envs=8, num_steps=16, shuffle_block=4).validate(2).shuffle_block == 4
    for config, devices, message in (
            (PPOConfig(num_envs=8, shuffle_block=8), 2, "shuffle_block=8: must divide the environments per device (4)"),
            (PPOConfig(num_envs=8, num_steps=2, num_minibatches=4, shuffle_block=8), 1, "each of the 4 minibatches"),
            (PQNConfig(shuffle_block=-1), 1, "shuffle_block=-1: must be 0 (the backend's choice), 1 (single rows)"),
            (RecurrentPPOConfig(shuffle_block=1), 1, "ppo_rnn's minibatches are whole sequences")):
        with pytest.raises(ValueError, match=re.escape(message)):
            config.validate(devices)


def test_ppo_trains_with_the_configs_block_as_with_the_platforms_forced_one():
    """``shuffle_block=4`` trains bit for bit as the platform forced to blocks of 4, and not as single rows (these
    tests' CPU backend moves single rows by default: ``rows_per_unit`` gives 1 for ``shuffle_block=0``)."""
    import agents
    from agents.ppo import PPOConfig

    config = PPOConfig(num_envs=8, num_steps=16, total_timesteps=8 * 16 * 2, num_minibatches=2, update_epochs=2,
                       hidden_sizes=(16,))

    def params(config, **forced):
        with shuffle.using(None, **forced):
            return jax.tree.leaves(agents.ppo.train(config, "CartPole-v1", devices=1).params)

    assert shuffle.rows_per_unit(config, config.batch_size, config.num_envs) == 1
    single = params(config.replace(shuffle_block=1))
    blocks, forced = params(config.replace(shuffle_block=4)), params(config, block=4)
    assert all(np.array_equal(a, b) for a, b in zip(blocks, forced))
    assert not all(np.array_equal(a, b) for a, b in zip(single, blocks))


@pytest.mark.parametrize("block", [1, 4, 16])
@METHODS
def test_minibatches_of_blocks_use_every_row_once_and_keep_blocks_within_a_step(method, block):
    """A batch of T steps x B envs (flat index t * B + r): each epoch uses every row once; a block is B / (B / block)
    consecutive envs of one step, whole; flat and shaped gathers agree; restore gives rows their shape back."""
    steps, envs, minibatches, epochs = 8, 64, 4, 3
    n = steps * envs
    index = jnp.arange(n)
    obs = jnp.arange(n * 6, dtype=jnp.float32).reshape(n, 3, 2)
    orders = shuffle.epoch_orders(jax.random.PRNGKey(3), n, epochs, block)
    assert orders.shape == (epochs, n // block)
    for order in orders:
        got = np.asarray(shuffle.minibatches(index, order, minibatches, block))
        assert got.shape == (minibatches, n // minibatches, 1)
        rows = got.reshape(-1)
        np.testing.assert_array_equal(np.sort(rows), np.arange(n))
        units = rows.reshape(-1, block)
        np.testing.assert_array_equal(units - units[:, :1], np.tile(np.arange(block), (len(units), 1)))
        assert (units[:, 0] // envs == units[:, -1] // envs).all()  # one time step per block
        flat = shuffle.minibatches(obs, order, minibatches, block)
        assert flat.shape == (minibatches, n // minibatches, 6)
        with shuffle.using(method, layout="shaped"):
            shaped = shuffle.minibatches(obs, order, minibatches, block)
        with shuffle.using(method, layout="blocks"):
            np.testing.assert_array_equal(np.asarray(shuffle.minibatches(obs, order, minibatches, block)), flat)
        np.testing.assert_array_equal(np.asarray(shuffle.restore(flat[1], obs)), np.asarray(shaped[1]))
        np.testing.assert_array_equal(np.asarray(shaped).reshape(n, 3, 2), np.asarray(obs)[rows])


@pytest.mark.parametrize("method", ["sort"])
def test_block_orders_equally_likely(method):
    """With blocks of 8 of 256 rows (32 blocks), each block is equally likely at each block position: the chi-square
    test of the permutation, on the blocks' order."""
    n, block, draws, buckets = 256, 8, 6000, 8
    orders = np.asarray(jax.jit(lambda k: shuffle.epoch_orders(k, n, draws, block))(jax.random.PRNGKey(5)))
    units = n // block
    bucket = np.arange(units) * buckets // units
    counts = np.zeros((buckets, buckets))
    for position in range(units):
        np.add.at(counts, (bucket[orders[:, position]], bucket[position]), 1)
    expected = np.full((buckets, buckets), draws * (units / buckets) ** 2 / units)
    chi2 = ((counts - expected) ** 2 / expected).sum()
    dof = (buckets - 1) ** 2
    assert chi2 < dof + 3.1 * np.sqrt(2 * dof) + 10


def test_pack_gives_every_leaf_back_bit_for_bit_whatever_its_dtype_and_shape():
    """``pack`` lays leaves of every dtype a batch may hold side by side as 32-bit words; ``unpack`` of any rows
    gives those rows of every leaf back, bits, dtype and shape (negative small integers, NaN payloads, empty leaves)."""
    n = 10
    key = jax.random.PRNGKey(0)
    tree = {
        "obs": jax.random.normal(key, (n, 3, 2)),
        "action": jnp.arange(n, dtype=jnp.int32) - 5,
        "done": jnp.arange(n) % 3 == 0,
        "int8": (jnp.arange(n) - 6).astype(jnp.int8),
        "uint8": (jnp.arange(n) * 25).astype(jnp.uint8),
        "bf16": jax.random.normal(key, (n,)).astype(jnp.bfloat16),
        "nan": jnp.full((n,), jnp.nan, jnp.float32).at[0].set(-jnp.inf),
        "empty": jnp.zeros((n, 0)),
    }
    packed, unpack = shuffle.pack(tree)
    assert packed.dtype == jnp.uint32 and packed.shape == (n, 6 + 6)
    rows = jnp.array([7, 0, 3])
    got = unpack(packed[rows])
    for name, leaf in tree.items():
        want = np.asarray(leaf)[np.asarray(rows)]
        assert got[name].dtype == leaf.dtype and got[name].shape == want.shape, name
        np.testing.assert_array_equal(np.asarray(got[name]).view(np.uint8), want.view(np.uint8), err_msg=name)


@pytest.mark.parametrize("agent", ["ppo", "pqn"])
def test_a_packed_gather_fits_bit_for_bit_as_one_gather_per_leaf(agent):
    """The packed gather (``rlpar.core.platform.packed_gather``) changes how an epoch's rows are read, not which: PPO's
    fit and PQN's give the same parameters and optimizer state, with single rows and with blocks, over two devices (a
    vmapped axis: the collectives run as on devices): PQN's bit for bit, PPO's to float rounding (its advantage
    moments are then summed per epoch, not for all epochs at once); the loss statistics (means XLA may sum in another
    order) to float rounding."""
    import gymnax

    import agents
    from rlpar.core import platform

    env, env_params = gymnax.make("CartPole-v1")
    steps, envs, devices = 16, 8, 2
    n = steps * envs
    config = (agents.ppo.PPOConfig if agent == "ppo" else agents.pqn.PQNConfig)(
        num_envs=envs, num_steps=steps, num_minibatches=4, update_epochs=2, hidden_sizes=(16,))
    make = agents.ppo.learner.make_ppo if agent == "ppo" else agents.pqn.learner.make_pqn
    keys = jax.random.split(jax.random.PRNGKey(1), 6)
    obs = jax.random.normal(keys[0], (devices, n, 4))
    action = jax.random.randint(keys[1], (devices, n), 0, 2)
    floats = [jax.random.normal(k, (devices, n)) for k in keys[2:]]
    if agent == "ppo":
        batch = agents.ppo.learner.Batch(obs, action, -jnp.abs(floats[0]), *floats[1:])
    else:
        batch = agents.pqn.learner.Batch(obs, action, floats[0])

    def fit(block, packed):
        with platform.forcing(packed_gather=packed):
            learner = make(config.replace(shuffle_block=block), env, env_params, envs, axis_name="d")
            state = learner.init(jax.random.PRNGKey(2), jax.random.PRNGKey(3))
            run = jax.vmap(lambda b, k: learner.fit(state.params, state.opt_state, b, k, step_rows=envs),
                           axis_name="d")
            return jax.jit(run)(batch, jax.random.split(jax.random.PRNGKey(4), devices))

    for block in (1, 4):
        (params, opt_state, stats), (params_p, opt_state_p, stats_p) = fit(block, False), fit(block, True)
        for a, b in zip(jax.tree.leaves((params, opt_state)), jax.tree.leaves((params_p, opt_state_p)), strict=True):
            if agent == "pqn":
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=f"block {block}")
            else:  # the advantage moments summed per epoch rather than for all epochs at once: float rounding
                np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-8, err_msg=f"block {block}")
        for a, b in zip(jax.tree.leaves(stats), jax.tree.leaves(stats_p), strict=True):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-7, err_msg=f"block {block}")
