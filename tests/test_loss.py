import jax.numpy as jnp
import numpy as np
import pytest

from agents.ppo.loss import clipped_surrogate, ppo_loss, value_loss


def test_clipped_surrogate_hand_worked():
    # ratios [1.5, 0.5, 0.5, 1.1], advantages [+1, +1, -1, -1], eps 0.2:
    #   min(1.5, 1.2) = 1.2; min(0.5, 0.8) = 0.5; min(-0.5, -0.8) = -0.8; min(-1.1, -1.1) = -1.1
    #   loss = -mean(1.2, 0.5, -0.8, -1.1) = -(-0.2 / 4) = 0.05; ratios outside [0.8, 1.2]: 3 of 4
    ratio = jnp.array([1.5, 0.5, 0.5, 1.1])
    old = jnp.zeros(4)
    loss, approx_kl, clip_fraction = clipped_surrogate(jnp.log(ratio), old, jnp.array([1.0, 1.0, -1.0, -1.0]), 0.2)
    assert float(loss) == pytest.approx(0.05, abs=1e-6)
    assert float(clip_fraction) == pytest.approx(0.75)
    expected_kl = np.mean((np.array(ratio) - 1) - np.log(np.array(ratio)))
    assert float(approx_kl) == pytest.approx(expected_kl, rel=1e-5)


def test_value_loss_clipped_and_unclipped():
    # V = 2, old V = 1, target 3, eps 0.5: unclipped 0.5 * (2 - 3)^2 = 0.5;
    # clipped V = 1 + clip(1, -.5, .5) = 1.5 -> (1.5 - 3)^2 = 2.25; loss = 0.5 * max(1, 2.25) = 1.125
    v, old, target = jnp.array([2.0]), jnp.array([1.0]), jnp.array([3.0])
    assert float(value_loss(v, old, target, None)) == pytest.approx(0.5)
    assert float(value_loss(v, old, target, 0.5)) == pytest.approx(1.125)


def test_ppo_loss_combines_terms():
    n = 4
    total, info = ppo_loss(
        jnp.zeros(n), jnp.full(n, 0.7), jnp.full(n, 2.0), jnp.zeros(n), jnp.full(n, 2.0), jnp.ones(n),
        jnp.full(n, 3.0), clip_eps=0.2, vf_clip_eps=None, vf_coef=0.5, ent_coef=0.01,
    )
    # policy: ratio 1, A 1 -> -1; value: 0.5 * 1 = 0.5; total = -1 + 0.5 * 0.5 - 0.01 * 0.7
    assert float(info.policy) == pytest.approx(-1.0)
    assert float(info.value) == pytest.approx(0.5)
    assert float(total) == pytest.approx(-1.0 + 0.25 - 0.007)
