"""Recurrent PPO: hidden state resets at episode boundaries, and memory solves a partially observable probe."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import agents
from agents.ppo_rnn import RecurrentActorCritic, RecurrentPPOConfig, unroll
from rlpar.core import parallel
from rlpar.run.runner import RunConfig, run
from rlpar.run.records import mean_recent_return


def test_hidden_state_resets_where_episodes_end():
    net = RecurrentActorCritic(num_actions=2, gru_size=8, hidden_sizes=(8,))
    params = net.init(jax.random.PRNGKey(0), net.initial_hidden(1), jnp.zeros((1, 3)), jnp.ones(1, bool))
    obs = jax.random.normal(jax.random.PRNGKey(1), (6, 2, 3))
    reset = jnp.zeros((6, 2), bool).at[3, 0].set(True)  # env 0 starts a new episode at t=3; env 1 never does
    h0 = jax.random.normal(jax.random.PRNGKey(2), (2, 8))  # a non-zero carried-in state
    _, logits, value = unroll(net, params, h0, obs, reset)
    # From t=3 on, env 0 must behave exactly like a fresh episode fed obs[3:] from a zero state...
    _, fresh_logits, fresh_value = unroll(net, params, jnp.zeros((2, 8)), obs[3:], jnp.zeros((3, 2), bool))
    np.testing.assert_allclose(logits[3:, 0], fresh_logits[:, 0], atol=1e-6)
    np.testing.assert_allclose(value[3:, 0], fresh_value[:, 0], atol=1e-6)
    # ...while env 1 (no reset) still carries its past: its outputs differ from a fresh start.
    assert not np.allclose(value[3:, 1], fresh_value[:, 1], atol=1e-4)
    # and before the reset env 0 depended on the carried-in state
    _, _, value_zero_h = unroll(net, params, jnp.zeros((2, 8)), obs, reset)
    assert not np.allclose(value[:3, 0], value_zero_h[:3, 0], atol=1e-4)


def test_minibatch_count_must_divide_envs_per_device():
    with pytest.raises(ValueError, match="num_minibatches=3 does not divide the environments per device"):
        RecurrentPPOConfig(num_envs=8, num_minibatches=3, num_steps=12).validate(2)


# The learning rate anneals to 0: at a constant 3e-3 the policy learnt the probe (training return 0.998) and then, on
# an AVX2 host with 2 devices, the last updates broke it (greedy evaluation 0.5 after update 250, 1.0 after every
# earlier 25); annealed, every greedy evaluation from update 50 on is 1.0 there.
MEMORY = RecurrentPPOConfig(num_envs=16, num_steps=12, total_timesteps=16 * 12 * 250, num_minibatches=4,
                            update_epochs=4, lr=3e-3, anneal_lr=True, ent_coef=0.01, gru_size=32,
                            hidden_sizes=(32,))


@pytest.mark.slow
def test_recurrent_policy_remembers_the_cue():
    # Probe-Memory-v0: a memoryless policy earns 0.5 per episode, a recurrent one can earn 1.
    result = run(agents.ppo_rnn.SPEC, MEMORY, RunConfig(env="Probe-Memory-v0", devices=2, log_every=50))
    assert mean_recent_return(result.metrics, last=1) > 0.9
    assert result.metrics[-1]["eval/episode_return"] > 0.9  # the greedy policy export remembers too
    copies = parallel.replicas(result.state.agent.params)
    jax.tree.map(np.testing.assert_array_equal, copies[0], copies[1])
    # The same budget without memory stays near chance: the probe really needs the GRU.
    flat = agents.PPOConfig(num_envs=16, num_steps=12, total_timesteps=16 * 12 * 250, num_minibatches=4, lr=3e-3,
                            anneal_lr=False, hidden_sizes=(32,))
    mlp = run(agents.ppo.SPEC, flat, RunConfig(env="Probe-Memory-v0", devices=2, log_every=50))
    assert mean_recent_return(mlp.metrics, last=1) < 0.7
    assert mlp.metrics[-1]["eval/episode_return"] < 0.7
