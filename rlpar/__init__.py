"""rlpar: Anakin-style RL experience collection and training in JAX (gymnax envs, vmap + scan, pmap).

Layers, each importing only the ones above it in this list (``tests/test_layering.py`` checks it):

- ``envs`` (its own package): environments; imports nothing of ``rlpar`` or ``agents``.
- ``rlpar.core``: the engine core, on the devices: the agent contract, collector, per-device program, episodes,
  collectives, device mapping, seeds and populations, per-backend choices.
- ``rlpar.run``: the run shell, on the host: the run loop, checkpoints, run dir, logs, progress, preemption, caches.
- ``agents`` (its own package): the agent library, on ``rlpar.core``'s contract; its ``train`` is ``rlpar.run``'s.
- ``rlpar.tools``: the commands (train, evaluate, plot), their flags, agent names and ``--resume``.

The modules at this level re-export for paths users already type: ``rlpar.agent`` (the contract),
``python -m rlpar.train``, ``python -m rlpar.evaluate`` (and ``rlpar.evaluate.load_policy``), ``python -m rlpar.plot``.
"""

__version__ = "0.1.0"
