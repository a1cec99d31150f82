"""The tools: the commands a user runs, and what only they need.

Owns the training command (``train``, started as ``python -m rlpar.train``), its flags generated from config
dataclasses (``cli``), agent names (``registry``), ``--resume`` (``resume``), one-line errors on the command line
(``errors``), scoring a run's policy (``evaluate``, with ``policy``: loading it from a run dir, and ``gif``: drawing an
episode) and learning-curve plots (``plot``).

May import anything below it: ``envs``, ``rlpar.core``, ``rlpar.run`` and ``agents`` (the registry imports an agent
package by name when it is asked for one). Nothing below imports this package.
"""
