"""The run shell: one training run on the host, around the engine core's compiled program.

Owns the host loop (``runner`` runs its phases in order: ``prepare``, ``state``, ``build``, ``chunks``; the
settings are ``config.RunConfig``, a chunk's log record ``records``), the run dir and its files (``rundir``,
``checkpoint``, ``logs``, ``progress``), the non-finite guard (``guard``), preemption (``preemption``), the waits for
compiles that keep signals working (``compiling``) and JAX's persistent cache of compiled programs
(``compile_cache``). ``runner.make_train`` is the ``train`` every agent package exports.

May import: ``envs``, ``rlpar.core`` and ``rlpar.run``. Never ``rlpar.tools`` or ``agents``: agents import this
package (their ``train``), and the run shell takes an agent as an ``rlpar.core.agent.AgentSpec`` value.
"""
