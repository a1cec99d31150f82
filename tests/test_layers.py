"""agents.layers and agents.platform: the fast and plain paths of each layer agree, and the switch picks one."""

from pathlib import Path

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agents import platform
from agents.layers import Conv3x3, Dense, patches3x3
from rlpar.core import host_cpu


@pytest.fixture(autouse=True)
def switch_unset(monkeypatch):
    """Every test starts with no override and no environment variable, and leaves the override as it found it."""
    monkeypatch.delenv(platform.PLAIN_LAYERS_ENV, raising=False)
    with platform.fast_paths(None):
        yield


def assert_close(actual, expected, rtol=1e-5):
    """Equal within ``rtol`` of the larger of each entry and the array's largest entry (summation order differs)."""
    for a, e in zip(jax.tree.leaves(actual), jax.tree.leaves(expected)):
        e = np.asarray(e)
        np.testing.assert_allclose(a, e, rtol=rtol, atol=rtol * float(np.max(np.abs(e))))


def jaxpr_text(module, params, x):
    return str(jax.make_jaxpr(lambda p, x: module.apply(p, x))(params, x))


def takes_fast_path(module, params, x) -> bool:
    """Whether applying ``module`` traces its fast path: a custom_vjp (Dense) or no convolution (Conv3x3)."""
    text = jaxpr_text(module, params, x)
    return "custom_vjp" in text if isinstance(module, Dense) else "conv_general_dilated" not in text


def random_params(key, params):
    """``params``' tree with every leaf normal(0, 1), so biases are not zero and every weight matters."""
    leaves, treedef = jax.tree.flatten(params)
    keys = jax.random.split(key, len(leaves))
    return jax.tree.unflatten(treedef, [jax.random.normal(k, l.shape, l.dtype) for k, l in zip(keys, leaves)])


def shapes(tree):
    return jax.tree.map(lambda a: (a.shape, a.dtype), tree)


# --- the switch ------------------------------------------------------------------------------------------------------


def test_cpu_fast_paths_by_platform_and_environment_variable(monkeypatch):
    assert jax.default_backend() == "cpu"
    assert platform.cpu_fast_paths() and platform.cpu_fast_paths("cpu")
    assert not platform.cpu_fast_paths("gpu") and not platform.cpu_fast_paths("tpu")
    monkeypatch.setenv(platform.PLAIN_LAYERS_ENV, "1")
    assert not platform.cpu_fast_paths()
    monkeypatch.setenv(platform.PLAIN_LAYERS_ENV, "0")
    assert platform.cpu_fast_paths()
    monkeypatch.setenv(platform.PLAIN_LAYERS_ENV, "maybe")
    with pytest.raises(ValueError, match="RLPAR_PLAIN_LAYERS"):
        platform.cpu_fast_paths()


def test_override_beats_environment_and_platform_and_is_restored(monkeypatch):
    monkeypatch.setenv(platform.PLAIN_LAYERS_ENV, "1")
    with platform.fast_paths(True):
        assert platform.cpu_fast_paths() and platform.cpu_fast_paths("gpu")
        with platform.fast_paths(False):
            assert not platform.cpu_fast_paths("cpu")
        assert platform.cpu_fast_paths("gpu")
    assert not platform.cpu_fast_paths()
    with pytest.raises(TypeError):
        platform.set_fast_paths("no")


@pytest.fixture
def avx512(monkeypatch):
    """As on a host where XLA:CPU emits AVX-512 code, whatever this one is (the Dense fast path's condition)."""
    monkeypatch.setattr(host_cpu, "cpu_flags", lambda: frozenset({"avx2", "avx512f"}))
    monkeypatch.delenv("XLA_FLAGS", raising=False)


def test_layers_read_the_switch_when_applied_and_their_field_beats_it(monkeypatch, avx512):
    x = jnp.ones((2, 4, 4, 3))
    for module in (Dense(5), Conv3x3(5)):
        params = module.init(jax.random.key(0), x)
        assert takes_fast_path(module, params, x)
        assert not takes_fast_path(module.clone(fast=False), params, x)
        with platform.fast_paths(False):
            assert not takes_fast_path(module, params, x)
            assert takes_fast_path(module.clone(fast=True), params, x)
        with monkeypatch.context() as patch:
            patch.setenv(platform.PLAIN_LAYERS_ENV, "1")
            assert not takes_fast_path(module, params, x)
        with monkeypatch.context() as patch:
            patch.setattr(jax, "default_backend", lambda: "gpu")  # read at trace time, not at import
            assert not takes_fast_path(module, params, x)


def test_dense_fast_path_by_isa_and_batch_rows(monkeypatch):
    small, large = jnp.ones((2, 3)), jnp.ones((4, 256, 3))  # 2 rows; 1,024 rows (batch dimensions flattened)
    dense = Dense(4)
    params = dense.init(jax.random.key(0), small)
    flags = {"avx512": frozenset({"avx2", "avx512f"}), "avx2": frozenset({"avx", "avx2", "fma"})}
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    monkeypatch.setattr(host_cpu, "cpu_flags", lambda: flags["avx512"])
    assert platform.xla_cpu_avx512()
    assert takes_fast_path(dense, params, small) and takes_fast_path(dense, params, large)  # any batch
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=1 --xla_cpu_max_isa=AVX2")  # capped
    assert not platform.xla_cpu_avx512()
    assert takes_fast_path(dense, params, small) and not takes_fast_path(dense, params, large)
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_max_isa=avx512")
    assert platform.xla_cpu_avx512()
    monkeypatch.delenv("XLA_FLAGS")
    monkeypatch.setattr(host_cpu, "cpu_flags", lambda: flags["avx2"])  # an AVX2 host
    rows = platform.DENSE_FAST_ROWS_AVX2
    assert platform.dense_fast_path(rows=rows - 1) and not platform.dense_fast_path(rows=rows)
    assert not platform.dense_fast_path()  # rows unknown
    assert takes_fast_path(dense, params, small) and not takes_fast_path(dense, params, large)
    assert takes_fast_path(dense.clone(fast=True), params, large)  # the field still forces it
    with platform.fast_paths(True):  # and so does the switch
        assert takes_fast_path(dense, params, large)
    with platform.fast_paths(False):
        assert not takes_fast_path(dense, params, small)
    with monkeypatch.context() as patch:
        patch.setattr(jax, "default_backend", lambda: "gpu")  # off XLA:CPU: plain, whatever the rows
        assert not takes_fast_path(dense, params, small)
    conv_x = jnp.ones((1, 3, 3, 2))  # the convolution's fast path does not depend on the ISA (AVX2 here)
    conv = Conv3x3(2)
    assert takes_fast_path(conv, conv.init(jax.random.key(0), conv_x), conv_x)


def test_cpu_flags_are_read_from_this_host():
    flags = host_cpu.cpu_flags()
    if Path("/proc/cpuinfo").exists():
        text = Path("/proc/cpuinfo").read_text()
        assert ("avx512f" in flags) == (" avx512f" in text) and ("avx2" in flags) == (" avx2" in text)
    else:
        assert flags == frozenset()


# --- the layers ------------------------------------------------------------------------------------------------------


def check_paths_agree(make, x, key):
    """``make(fast)`` on both paths: same parameter tree from the same key, each path applies the other's tree, and
    outputs and gradients (parameters and input) agree on random parameters."""
    fast, plain = make(True), make(False)
    params_fast, params_plain = fast.init(key, x), plain.init(key, x)
    assert shapes(params_fast) == shapes(params_plain)
    assert_close(params_fast, params_plain, rtol=0)
    assert takes_fast_path(fast, params_plain, x) and not takes_fast_path(plain, params_fast, x)

    params = random_params(jax.random.fold_in(key, 1), params_fast)
    assert_close(fast.apply(params, x), plain.apply(params, x))
    cotangent = jax.random.normal(jax.random.fold_in(key, 2), fast.apply(params, x).shape)

    def loss(module):
        return lambda p, x: jnp.sum(module.apply(p, x) * cotangent)

    grads_fast = jax.grad(loss(fast), argnums=(0, 1))(params, x)
    grads_plain = jax.grad(loss(plain), argnums=(0, 1))(params, x)
    assert shapes(grads_fast) == shapes(grads_plain)
    assert_close(grads_fast, grads_plain)
    return params


def test_dense_paths_agree_and_match_nn_dense():
    x = jax.random.normal(jax.random.key(1), (2, 5, 6))
    params = check_paths_agree(lambda fast: Dense(7, fast=fast), x, jax.random.key(2))
    assert shapes(params) == shapes(nn.Dense(7).init(jax.random.key(0), x))
    assert_close(Dense(7, fast=False).apply(params, x), nn.Dense(7).apply(params, x), rtol=0)


@pytest.mark.parametrize("batch_shape", [(), (3,), (2, 3)])
def test_conv3x3_paths_agree(batch_shape):
    x = jax.random.normal(jax.random.key(1), batch_shape + (5, 4, 3))  # H != W: a swapped axis would show
    check_paths_agree(lambda fast: Conv3x3(6, fast=fast), x, jax.random.key(2))


def test_conv3x3_is_nn_conv_same_padding():
    x = jax.random.normal(jax.random.key(1), (2, 5, 4, 3))
    conv = nn.Conv(6, (3, 3), padding="SAME")
    params = random_params(jax.random.key(3), conv.init(jax.random.key(0), x))
    assert shapes(params) == shapes(Conv3x3(6).init(jax.random.key(0), x))
    for fast in (False, True):
        assert_close(Conv3x3(6, fast=fast).apply(params, x), conv.apply(params, x))


def test_conv3x3_kernel_orientation_by_hand():
    # One channel, kernel 1 at (i, j) = (0, 0) only: output (y, x) = input (y - 1, x - 1), zero off the border.
    # Input 1..9 row-major in a 3x3 image; output [[0, 0, 0], [0, 1, 2], [0, 4, 5]].
    x = jnp.arange(1.0, 10.0).reshape(3, 3, 1)
    params = {"params": {"kernel": jnp.zeros((3, 3, 1, 1)).at[0, 0, 0, 0].set(1.0), "bias": jnp.zeros(1)}}
    for fast in (False, True):
        np.testing.assert_array_equal(Conv3x3(1, fast=fast).apply(params, x)[..., 0], [[0, 0, 0], [0, 1, 2], [0, 4, 5]])


def test_patches3x3_entry_order_matches_kernel_reshape():
    x = jax.random.normal(jax.random.key(0), (2, 4, 5, 3))
    padded = np.pad(np.asarray(x), ((0, 0), (1, 1), (1, 1), (0, 0)))
    p = np.asarray(patches3x3(x))
    assert p.shape == (2, 4, 5, 27)
    for i in range(3):
        for j in range(3):
            for c in range(3):
                np.testing.assert_array_equal(p[:, :, :, (i * 3 + j) * 3 + c], padded[:, i:i + 4, j:j + 5, c])
    kernel = np.arange(27 * 2).reshape(3, 3, 3, 2)
    assert kernel.reshape(27, 2)[(1 * 3 + 2) * 3 + 0, 1] == kernel[1, 2, 0, 1]


# --- what the plain path gives a JAX user ----------------------------------------------------------------------------


@pytest.mark.parametrize("module,shape", [(Dense(3), (4,)), (Conv3x3(2), (3, 3, 2))])
def test_plain_path_supports_jvp_and_hessian(module, shape):
    x = jax.random.normal(jax.random.key(0), shape)
    params = random_params(jax.random.key(1), module.init(jax.random.key(2), x))
    tangent = jax.random.normal(jax.random.key(3), shape)
    with platform.fast_paths(False):  # asked for globally: the modules' fast field is None
        f = lambda x: module.apply(params, x)
        y, y_dot = jax.jvp(f, (x,), (tangent,))
        jacobian = jax.jacrev(f)(x)  # [*out, *in]
        assert_close(y_dot, jnp.tensordot(jacobian, tangent, axes=len(shape)))

        scalar = lambda x: jnp.sum(jnp.tanh(f(x)) ** 2)
        hessian = jax.hessian(scalar)(x).reshape(x.size, x.size)
        assert np.all(np.isfinite(hessian)) and np.any(hessian != 0)
        assert_close(hessian, hessian.T)


@pytest.mark.parametrize("make", [lambda **kw: Dense(3, **kw), lambda **kw: Conv3x3(3, **kw)])
def test_bfloat16_runs_the_plain_path(make, avx512):
    x = jax.random.normal(jax.random.key(0), (2, 4, 4, 2))
    bf16 = make(dtype=jnp.bfloat16, param_dtype=jnp.bfloat16, fast=True)  # fast asked, but float32 only
    params = bf16.init(jax.random.key(1), x)
    assert all(leaf.dtype == jnp.bfloat16 for leaf in jax.tree.leaves(params))
    assert not takes_fast_path(bf16, params, x)
    y = bf16.apply(params, x)
    assert y.dtype == jnp.bfloat16
    as_f32 = jax.tree.map(lambda a: a.astype(jnp.float32), params)
    assert_close(y.astype(jnp.float32), make(fast=True).apply(as_f32, x), rtol=2e-2)
    # bf16 input, float32 parameters: computed in float32 (nn's promotion), on the fast path, as float32 input would be.
    assert make().apply(as_f32, x.astype(jnp.bfloat16)).dtype == jnp.float32
    assert takes_fast_path(make(), as_f32, x.astype(jnp.bfloat16))
