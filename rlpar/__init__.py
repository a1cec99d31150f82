"""rlpar: Anakin-style RL experience collection and training in JAX (gymnax envs, vmap + scan, pmap)."""

__version__ = "0.1.0"
