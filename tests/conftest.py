"""Four fake CPU devices for every test, set before the first JAX computation."""

import jax

NUM_TEST_DEVICES = 4
jax.config.update("jax_num_cpu_devices", NUM_TEST_DEVICES)
