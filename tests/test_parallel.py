"""Multi-device behaviour on 4 fake CPU devices (see conftest.py)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents
import envs
from agents.ppo import PPOConfig, make_ppo
from rlpar.core import hosts, parallel
from rlpar.run.runner import RunConfig, run
from tests.helpers import random_batch as _random_batch

SMALL = PPOConfig(num_envs=8, num_steps=16, total_timesteps=8 * 16 * 6, num_minibatches=2, update_epochs=2)


def test_four_fake_devices_are_available():
    assert len(jax.devices()) == 4


def test_params_bit_identical_across_devices_after_updates():
    result = run(agents.ppo.SPEC, SMALL, RunConfig(env="CartPole-v1", devices=4, log_every=3))
    assert len(result.metrics) == 2
    copies = parallel.replicas(result.state.agent.params)
    assert len(copies) == 4
    for other in copies[1:]:
        jax.tree.map(np.testing.assert_array_equal, copies[0], other)
    opt_copies = parallel.replicas(result.state.agent.opt_state)
    for other in opt_copies[1:]:
        jax.tree.map(np.testing.assert_array_equal, opt_copies[0], other)
    # the per-device env states must differ: each device steps its own envs
    obs = parallel.replicas(result.state.rollout.obs)
    assert not np.array_equal(obs[0], obs[1])
    # and the params actually moved away from their initial values
    init = parallel.map_init(
        lambda ax: make_ppo(SMALL, *envs.make("CartPole-v1"), 2, ax).init, hosts.select_devices(4)
    )(*jax.random.split(jax.random.PRNGKey(SMALL.seed)))
    before = parallel.first_replica(init.params)
    diffs = jax.tree.leaves(jax.tree.map(lambda a, b: np.abs(a - b).max(), before, copies[0]))
    assert max(diffs) > 1e-4


def test_pmean_gradient_equals_single_device_gradient_on_concatenated_batch():
    env, env_params = envs.make("CartPole-v1")
    config = PPOConfig()
    single = make_ppo(config, env, env_params, 4, axis_name=None)
    params = single.network.init(jax.random.PRNGKey(0), jnp.zeros((1, 4)))
    batch = _random_batch(jax.random.PRNGKey(1), 64)
    grads_one, info_one = jax.jit(single.grad)(params, batch)

    devices = hosts.select_devices(4)
    grad_fn = lambda ax: (lambda p, b: make_ppo(config, env, env_params, 1, ax).grad(p, b))
    mapped = jax.pmap(grad_fn(parallel.AXIS_NAME), axis_name=parallel.AXIS_NAME, in_axes=(None, 0),
                      out_axes=None, devices=devices)
    grads_many, info_many = mapped(params, jax.tree.map(lambda x: x.reshape((4, 16) + x.shape[1:]), batch))
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-5, rtol=1e-5), grads_one, grads_many)
    np.testing.assert_allclose(info_one.total, info_many.total, atol=1e-5)
    # sanity: the gradient is not trivially zero
    assert max(float(jnp.abs(g).max()) for g in jax.tree.leaves(grads_one)) > 1e-3


def test_num_envs_not_divisible_by_devices_is_a_clear_error():
    with pytest.raises(ValueError, match=r"num_envs=6 is not divisible by the device count 4"):
        run(agents.ppo.SPEC, SMALL.replace(num_envs=6), RunConfig(devices=4))


def test_more_devices_than_exist_is_a_clear_error():
    # Past the bound on CPU devices (threads sharing the cores): refused whatever JAX has started.
    with pytest.raises(ValueError, match=r"devices=64: at most 8 CPU devices on this host"):
        hosts.select_devices(64)
    # Within it, but the backend already started with 4 (tests/conftest.py): say how to ask before any JAX work.
    with pytest.raises(ValueError, match=r"devices=6: JAX's CPU backend already started in this process with 4 "
                                         r"device\(s\).*request_cpu_devices\(6\)"):
        hosts.select_devices(6)


def test_results_read_via_addressable_shards():
    devices = hosts.select_devices(4)
    step = parallel.map_step(lambda ax: (lambda s: (s + 1, {"m": jax.lax.psum(s.sum(), ax)})), devices)
    state, metrics = step(jnp.arange(8.0).reshape(4, 2))
    assert [r.tolist() for r in parallel.replicas(state)] == [[1, 2], [3, 4], [5, 6], [7, 8]]
    assert float(parallel.to_host(metrics)["m"]) == 28.0


def test_fused_collectives_equal_leafwise_ones_and_keep_dtypes_and_shapes():
    from rlpar.core import collectives

    tree = {"w": jnp.arange(24.0).reshape(4, 2, 3), "n": jnp.arange(4, dtype=jnp.int32) * 3,
            "b": jnp.arange(8.0).reshape(4, 2) ** 2, "s": jnp.arange(4.0)}

    def per_device(t):
        return (collectives.pmean(t, "i"), jax.tree.map(lambda x: jax.lax.pmean(x, "i"), t),
                collectives.psum(t, "i"), jax.tree.map(lambda x: jax.lax.psum(x, "i"), t))

    fused_mean, leaf_mean, fused_sum, leaf_sum = jax.pmap(per_device, axis_name="i", devices=jax.devices()[:4])(tree)
    for fused, leafwise in ((fused_mean, leaf_mean), (fused_sum, leaf_sum)):
        for name in tree:
            assert fused[name].dtype == leafwise[name].dtype and fused[name].shape == leafwise[name].shape
            np.testing.assert_array_equal(fused[name], leafwise[name], err_msg=name)
    np.testing.assert_array_equal(fused_sum["n"][0], 18)  # 0 + 3 + 6 + 9, still int32
    assert collectives.pmean(tree, None) is tree


# the default run keeps devices bit-identical in test_params_bit_identical_across_devices_after_updates
@pytest.mark.slow
def test_without_advantage_normalisation_devices_stay_identical_and_the_update_differs():
    raw = run(agents.ppo.SPEC, SMALL.replace(normalize_advantages=False), RunConfig(devices=4, log_every=3))
    copies = parallel.replicas(raw.state.agent.params)
    for other in copies[1:]:
        jax.tree.map(np.testing.assert_array_equal, copies[0], other)
    normalised = run(agents.ppo.SPEC, SMALL, RunConfig(devices=4, log_every=3))
    differences = jax.tree.leaves(jax.tree.map(lambda a, b: float(np.abs(a - b).max()), raw.params, normalised.params))
    assert max(differences) > 1e-6 and all(np.isfinite(differences))


@pytest.mark.parametrize("groups", [1, 2])
def test_trace_init_at_gives_the_compiled_inits_shapes_and_each_device_its_position(groups):
    """One trace serves both: the shapes (with the row sharding a step is lowered for) are those of the state the
    compiled init returns, on each backend's mesh; each device computed its own row from its position."""
    devices = hosts.select_devices(4)

    def make_init(axis_name):
        def init(shared, position):
            key = parallel.device_key(jax.random.PRNGKey(shared), position, len(devices), groups)
            return {"position": position, "draw": jax.random.uniform(key, (3,)), "shared": shared + jnp.zeros(2)}

        return init

    shared, positions = parallel.replicate(np.uint32(7), devices, groups), parallel.device_positions(devices, groups)
    traced, shapes = parallel.trace_init_at(make_init, devices, shared, positions, groups, "shard_map")
    state = traced.lower().compile()(shared, positions)
    for leaf, shape in zip(jax.tree.leaves(state), jax.tree.leaves(shapes)):
        assert (leaf.shape, leaf.dtype) == (shape.shape, shape.dtype) and leaf.shape[0] == 4
        assert leaf.sharding.is_equivalent_to(shape.sharding, leaf.ndim)
    rows = parallel.rows_to_host(state, groups) if groups == 1 else jax.tree.map(np.asarray, state)
    np.testing.assert_array_equal(rows["position"], np.arange(4))
    size = 4 // groups
    expected = [jax.random.uniform(jax.random.split(jax.random.PRNGKey(7), size)[i % size], (3,)) for i in range(4)]
    np.testing.assert_array_equal(rows["draw"], np.stack(expected))
    np.testing.assert_array_equal(rows["shared"], np.full((4, 2), 7.0))


def test_trace_init_at_maps_as_pmap_does_on_the_pmap_backend():
    """Under pmap an init may return a per-device value from one cond branch and a constant from the other (JaxMARL's
    SMAX observation code does); shard_map's type check refuses that, so the pmap backend's init runs without it."""
    devices = hosts.select_devices(2)

    def make_init(axis_name):
        def init(shared, position):
            return jax.lax.cond(position > 0, lambda: position.astype(jnp.float32), lambda: jnp.float32(0.0))

        return init

    shared, positions = parallel.replicate(np.uint32(0), devices), parallel.device_positions(devices)
    traced, _ = parallel.trace_init_at(make_init, devices, shared, positions)
    np.testing.assert_array_equal(parallel.rows_to_host(traced.lower().compile()(shared, positions)), [0.0, 1.0])
    with pytest.raises(TypeError, match="cond branches"):
        parallel.trace_init_at(make_init, devices, shared, positions, backend="shard_map")
