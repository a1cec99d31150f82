"""The two device backends, pmap and shard_map, run the same per-device code to the same result (4 fake CPU devices)."""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import agents
import envs
from agents.ppo import Batch, PPOConfig, make_ppo
from rlpar.core import hosts, parallel
from rlpar.run.runner import RunConfig, run
from rlpar.tools import train as train_cli
from tests.helpers import random_batch as _random_batch

SMALL = PPOConfig(num_envs=8, num_steps=16, total_timesteps=8 * 16 * 6, num_minibatches=2, update_epochs=2,
                  hidden_sizes=(16, 16))


def test_shard_map_gives_the_params_pmap_gives_after_updates():
    results = {
        backend: run(agents.ppo.SPEC, SMALL, RunConfig(env="CartPole-v1", devices=4, log_every=3, backend=backend))
        for backend in parallel.BACKENDS
    }
    pmap, shard_map = results["pmap"], results["shard_map"]
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6, rtol=0), pmap.params, shard_map.params)
    for a, b in zip(pmap.metrics, shard_map.metrics):
        assert a["episodes"] == b["episodes"]
        np.testing.assert_allclose(a["loss/total"], b["loss/total"], rtol=1e-5)
    # shard_map keeps one copy of the parameters per device, and the copies stay bit-identical
    copies = parallel.replicas(shard_map.state.agent.params)
    assert len(copies) == 4
    for other in copies[1:]:
        jax.tree.map(np.testing.assert_array_equal, copies[0], other)
    # each device still steps its own environments
    obs = parallel.replicas(shard_map.state.rollout.obs)
    assert not np.array_equal(obs[0], obs[1])


@struct.dataclass
class SGDState:
    """One plain gradient step's input: per-device params (identical copies) and this device's share of a batch."""

    params: Any
    batch: Batch




@pytest.mark.parametrize("backend", parallel.BACKENDS)
def test_update_size_equals_one_device_on_the_whole_batch(backend):
    """``params - grad`` on 4 devices (each a quarter of the batch) moves the params exactly as far as one device on
    the whole batch. A backend that summed the gradients over devices (or averaged an already summed gradient) moves
    them 4 times (or a quarter) as far. Plain SGD with step 1: Adam and gradient clipping would hide a scale error."""
    env, env_params = envs.make("CartPole-v1")
    config = PPOConfig(hidden_sizes=(16, 16))
    params = make_ppo(config, env, env_params, 1).network.init(jax.random.PRNGKey(0), jnp.zeros((1, 4)))
    batch = _random_batch(jax.random.PRNGKey(1), 64)

    def make_sgd_step(axis_name):
        grad = make_ppo(config, env, env_params, 1, axis_name).grad

        def step(state: SGDState):
            grads, _ = grad(state.params, state.batch)
            new_params = jax.tree.map(lambda p, g: p - g, state.params, grads)
            return SGDState(new_params, state.batch), {}

        return step

    one_device, _ = jax.jit(make_sgd_step(None))(SGDState(params, batch))
    expected_delta = jax.tree.map(lambda new, old: np.asarray(new - old), one_device.params, params)

    devices = hosts.select_devices(4)
    state = SGDState(
        params=jax.tree.map(lambda x: jnp.stack([x] * 4), params),  # one copy per device, as map_init lays them out
        batch=jax.tree.map(lambda x: x.reshape((4, 16) + x.shape[1:]), batch),
    )
    mapped, _ = parallel.map_step(make_sgd_step, devices, donate=False, backend=backend)(state)
    for copy in parallel.replicas(mapped.params):
        delta = jax.tree.map(lambda new, old: new - np.asarray(old), copy, params)
        jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-4), delta, expected_delta)
    assert max(float(np.abs(d).max()) for d in jax.tree.leaves(expected_delta)) > 1e-3  # the step is not trivial


def test_why_parameters_stay_per_device_under_shard_map():
    """The trap the design avoids: under shard_map (check_vma on), the gradient of a parameter passed replicated,
    ``P()``, comes back already summed over devices, so the learner's pmean leaves it 4x too large on 4 devices.
    Passed per device (``P("devices")``, as ``parallel`` does) it is the per-device gradient and pmean is right.
    Loss mean((w * x)^2) over x = 0..7 at w = 1: d/dw = 2 * mean(x^2) = 2 * 17.5 = 35."""
    mesh = parallel.make_mesh(hosts.select_devices(4))
    axis, spec = parallel.AXIS_NAME, jax.sharding.PartitionSpec
    loss = lambda w, x: jnp.mean((w * x) ** 2)
    pmean_grad = lambda w, x: jax.lax.pmean(jax.grad(loss)(w, x), axis)
    w, x = jnp.float32(1.0), jnp.arange(8.0)
    assert float(jax.grad(loss)(w, x)) == 35.0
    replicated = jax.jit(jax.shard_map(pmean_grad, mesh=mesh, in_specs=(spec(), spec(axis)), out_specs=spec()))
    assert float(replicated(w, x)) == 4 * 35.0
    per_device = jax.jit(jax.shard_map(lambda ws, x: pmean_grad(ws[0], x)[None], mesh=mesh,
                                       in_specs=(spec(axis), spec(axis)), out_specs=spec(axis)))
    assert per_device(jnp.stack([w] * 4), x).tolist() == [35.0] * 4


def test_shard_map_rejects_metrics_that_were_not_reduced_over_devices():
    devices = hosts.select_devices(4)
    unreduced = parallel.map_step(lambda ax: (lambda s: (s + 1, {"m": s.sum()})), devices, backend="shard_map")
    with pytest.raises(Exception, match="(?i)vma|varying|replicat"):
        unreduced(jnp.arange(8.0).reshape(4, 2))


def test_shard_map_results_read_via_addressable_shards():
    devices = hosts.select_devices(4)
    step = parallel.map_step(lambda ax: (lambda s: (s + 1, {"m": jax.lax.psum(s.sum(), ax)})), devices,
                             backend="shard_map")
    state, metrics = step(jnp.arange(8.0).reshape(4, 2))
    assert [r.tolist() for r in parallel.replicas(state)] == [[1, 2], [3, 4], [5, 6], [7, 8]]
    assert float(parallel.to_host(metrics)["m"]) == 28.0


def test_unknown_backend_is_a_clear_error(capsys):
    with pytest.raises(ValueError, match="backend='xla': must be one of auto, pmap, shard_map"):
        RunConfig(backend="xla").validate()
    assert train_cli.main(["ppo", "--backend", "xla"]) == 2
    assert "backend='xla': must be one of auto, pmap, shard_map" in capsys.readouterr().err
