"""Network building blocks."""

import jax
import numpy as np


def test_conv_torso_equals_a_3x3_same_convolution():
    import flax.linen as nn

    from agents.networks import ConvTorso

    x = jax.random.normal(jax.random.PRNGKey(0), (2, 5, 6, 3))
    torso = ConvTorso(channels=4)
    params = torso.init(jax.random.PRNGKey(1), x)
    kernel = params["params"]["Conv3x3_0"]["kernel"]  # (dy, dx, C_in, C_out), nn.Conv's layout
    bias = params["params"]["Conv3x3_0"]["bias"]
    conv = nn.Conv(4, (3, 3), padding="SAME")
    expected = nn.relu(conv.apply({"params": {"kernel": kernel, "bias": bias}}, x)).reshape(2, -1)
    np.testing.assert_allclose(torso.apply(params, x), expected, atol=1e-5)


def test_dense_matches_flax_dense_in_value_gradient_and_parameters():
    import flax.linen as nn
    import jax.numpy as jnp

    from agents.layers import Dense, dense

    # By hand: x = [[1, 2]], kernel = [[1, 0, 2], [0, 1, 3]], bias = [1, 1, 1] -> [[2, 3, 9]]; for loss = sum(y * c)
    # the kernel gradient is x^T c, the bias gradient c, the input gradient c kernel^T.
    x, kernel, bias = jnp.array([[1.0, 2.0]]), jnp.array([[1.0, 0, 2], [0, 1, 3]]), jnp.ones(3)
    c = jnp.array([[1.0, -1.0, 2.0]])
    np.testing.assert_array_equal(dense(x, kernel, bias), [[2, 3, 9]])
    gx, gk, gb = jax.grad(lambda *a: jnp.sum(dense(*a) * c), argnums=(0, 1, 2))(x, kernel, bias)
    np.testing.assert_array_equal(gk, [[1, -1, 2], [2, -2, 4]])
    np.testing.assert_array_equal(gb, [1, -1, 2])
    np.testing.assert_array_equal(gx, [[5, 5]])

    # Against nn.Dense on a batch with two leading axes: same parameter tree, values and gradients.
    x = jax.random.normal(jax.random.PRNGKey(0), (5, 3, 4))
    ours, theirs = Dense(7, kernel_init=nn.initializers.orthogonal()), nn.Dense(7, kernel_init=nn.initializers.orthogonal())
    params = theirs.init(jax.random.PRNGKey(1), x)
    assert jax.tree.map(jnp.shape, ours.init(jax.random.PRNGKey(1), x)) == jax.tree.map(jnp.shape, params)
    loss = lambda module: (lambda p, x: jnp.sum(jnp.tanh(module.apply(p, x)) ** 2))
    np.testing.assert_allclose(ours.apply(params, x), theirs.apply(params, x), rtol=1e-6, atol=1e-6)
    ours_grad = jax.grad(loss(ours), argnums=(0, 1))(params, x)
    theirs_grad = jax.grad(loss(theirs), argnums=(0, 1))(params, x)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), ours_grad, theirs_grad)


def test_mlp_torso_reads_a_flattened_image_and_auto_convolves():
    import envs
    from agents.networks import make_network

    env, params = envs.make("Breakout-MinAtar")
    obs = np.random.default_rng(0).random((5, 10, 10, 4)).astype(np.float32)
    for torso, first_kernel in (("auto", (3, 3, 4, 16)), ("mlp", (400, 32))):
        net = make_network(env.observation_space(params), env.action_space(params), (32,), "relu", torso)
        variables = net.init(jax.random.PRNGKey(0), obs)
        kernels = [x.shape for path, x in jax.tree_util.tree_leaves_with_path(variables["params"]["actor"])
                   if path[-1].key == "kernel"]
        assert kernels[0] == first_kernel
        logits, value = net.apply(variables, obs)
        assert logits.shape == (5, 3) and value.shape == (5,)
    # the flattened MLP equals a plain dense layer on obs.reshape(5, 400)
    net = make_network(env.observation_space(params), env.action_space(params), (32,), "relu", "mlp")
    variables = net.init(jax.random.PRNGKey(1), obs)
    critic = variables["params"]["critic"]["MLP_0"]
    hidden = np.maximum(obs.reshape(5, 400) @ critic["Dense_0"]["kernel"] + critic["Dense_0"]["bias"], 0)
    expected = hidden @ critic["Dense_1"]["kernel"] + critic["Dense_1"]["bias"]
    np.testing.assert_allclose(net.apply(variables, obs, method="value"), expected[:, 0], rtol=1e-5, atol=1e-5)
