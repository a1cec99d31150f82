"""rlpar.core.cpu_paths: with the fast paths on, XLA:CPU runs threefry without its round loop in the programs rlpar
lowers (inside ``cpu_paths.lowering()``), JAX's own loop in every other program, and every draw is the same."""

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rlpar.core import cpu_paths

# The programs as XLA:CPU optimises them for a user's run, whose loops the fast paths change.
pytestmark = pytest.mark.full_optimization


@pytest.fixture(autouse=True)
def switch_unset(monkeypatch):
    monkeypatch.delenv(cpu_paths.PLAIN_LAYERS_ENV, raising=False)
    assert cpu_paths.install()  # a JAX of jax_internals.CHECKED: the rule is registered
    with cpu_paths.fast_paths(None):
        yield


def draws(key):
    """What a collector draws in a step: a split, uniform and categorical samples, vmapped over 8 environments."""
    keys = jax.random.split(key, 8)
    uniform = jax.vmap(lambda k: jax.random.uniform(k, (4,), minval=-0.05, maxval=0.05))(keys)
    actions = jax.vmap(lambda k: jax.random.categorical(k, jnp.array([0.2, -0.1, 0.4])))(keys)
    bits = jax.random.bits(jax.random.fold_in(key, 7), (3, 5), jnp.uint32)
    return keys, uniform, actions, bits


def compiled(fast: bool | None = None, rlpar_program: bool = True):
    """``draws`` compiled with the switch at ``fast``, as rlpar lowers its programs (``rlpar_program``) or as any
    other code does; a new function each time, so that JAX's caches of traced and lowered functions cannot hand back a
    program lowered under the other setting."""
    scope = cpu_paths.lowering() if rlpar_program else contextlib.nullcontext()
    with cpu_paths.fast_paths(fast), scope:
        return jax.jit(lambda key: draws(key)).lower(jax.random.PRNGKey(0)).compile()


def test_same_values_both_ways_and_as_jax_draws_them():
    fast, plain = compiled(True), compiled(False)
    for seed in (0, 1, 2**31 + 5):
        key = jax.random.PRNGKey(seed)
        expected = draws(key)  # op by op: JAX's own lowering of each primitive
        for program in (fast, plain):
            for got, want in zip(program(key), expected):
                np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_fast_path_has_no_round_loop_plain_path_keeps_jaxs():
    assert "while" not in compiled(True).as_text()
    assert "while" in compiled(False).as_text()  # JAX's rolled loop: the plain path is JAX's own program


def test_other_programs_keep_jaxs_loop_on_the_fast_paths():
    assert "while" in compiled(True, rlpar_program=False).as_text()
    with cpu_paths.lowering():
        with cpu_paths.lowering():  # nested blocks: still inside until the outer one ends
            pass
        assert "while" not in compiled(True, rlpar_program=False).as_text()
    assert "while" in compiled(True, rlpar_program=False).as_text()


def test_environment_variable_turns_it_off(monkeypatch):
    monkeypatch.setenv(cpu_paths.PLAIN_LAYERS_ENV, "1")
    assert "while" in compiled().as_text()
    monkeypatch.setenv(cpu_paths.PLAIN_LAYERS_ENV, "0")
    assert "while" not in compiled().as_text()


def test_rolled_threefry_is_for_this_thread_only():
    import threading

    seen = {}

    def other():
        seen["other"] = compiled().as_text()

    with cpu_paths.rolled_threefry():
        assert "while" in compiled().as_text()
        thread = threading.Thread(target=other)
        thread.start()
        thread.join()
    assert "while" not in seen["other"]
    assert "while" not in compiled().as_text()


def test_an_empty_draw_on_the_fast_path_is_empty():
    with cpu_paths.fast_paths(True), cpu_paths.lowering():
        program = jax.jit(lambda key: jax.random.bits(key, (0, 3), jnp.uint32)).lower(jax.random.PRNGKey(0)).compile()
    assert program(jax.random.PRNGKey(0)).shape == (0, 3)
