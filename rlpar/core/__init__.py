"""The engine core: what runs on the devices, and how it is mapped onto them.

Owns the agent contract (``agent``), the collector (``rollout``), the per-device training program (``program``), the
evaluation episodes (``episodes``), the collectives (``collectives``), the device mapping (``parallel``: pmap or
shard_map) and the processes and devices it maps onto (``hosts``), seeds, sweeps and populations (``seeds``,
``population``), and every per-backend choice (``platform``, with XLA:CPU's own mechanisms in ``cpu_paths`` and
facts about this host's CPU in ``host_cpu``).

May import: ``envs`` and ``rlpar.core``. Never ``rlpar.run``, ``rlpar.tools`` or ``agents``: agents are built on
this package, and the run shell and the tools on both. Writes no files and reads no command line.
"""
