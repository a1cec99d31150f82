"""Network building blocks."""

import jax
import numpy as np


def test_conv_torso_equals_a_3x3_same_convolution():
    import flax.linen as nn

    from agents.ppo.network import ConvTorso

    x = jax.random.normal(jax.random.PRNGKey(0), (2, 5, 6, 3))
    torso = ConvTorso(channels=4)
    params = torso.init(jax.random.PRNGKey(1), x)
    kernel = params["params"]["Dense_0"]["kernel"].reshape(3, 3, 3, 4)  # (dy, dx, C_in, C_out)
    bias = params["params"]["Dense_0"]["bias"]
    conv = nn.Conv(4, (3, 3), padding="SAME")
    expected = nn.relu(conv.apply({"params": {"kernel": kernel, "bias": bias}}, x)).reshape(2, -1)
    np.testing.assert_allclose(torso.apply(params, x), expected, atol=1e-5)
