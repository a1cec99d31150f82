"""One process of a multi-process run, for tests/test_distributed.py (which starts two of these).

usage: python tests/distributed_worker.py OUT_FILE [--agent NAME] [python -m rlpar.train NAME flags]

``NAME`` is one of rlpar's agents (default ``ppo``). Takes the same flags as the CLI (``--coordinator``,
``--num-processes``, ``--process-id``, ...), trains with
``rlpar.run.runner.run`` and saves what the test compares into ``OUT_FILE`` (an ``.npz``):

- ``param:<tree path>``: the final parameters, one array per leaf;
- ``replicas_identical``: whether every device of this process holds bit-identical parameters;
- ``process_count``, ``process_index``, ``global_devices``, ``local_devices``: what JAX saw.
"""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str]) -> int:
    out_file, flags = argv[0], argv[1:]
    agent_name = "ppo"
    if flags[:1] == ["--agent"]:
        agent_name, flags = flags[1], flags[2:]
    from rlpar.tools import cli, registry, train

    train.start_devices(flags)  # CPU devices and jax.distributed, before anything starts JAX's backends

    import jax
    import numpy as np

    from rlpar.core import parallel
    from rlpar.run.runner import RunConfig, run

    spec = registry.get(agent_name)
    parser = argparse.ArgumentParser()
    cli.add_dataclass_flags(parser, RunConfig, "run")
    cli.add_dataclass_flags(parser, spec.config_cls, spec.name)
    args = parser.parse_args(flags)
    run_config = cli.build_dataclass(RunConfig, args)
    config = cli.build_dataclass(spec.config_cls, args)

    result = run(spec, config, run_config)

    copies = [jax.tree.leaves(c) for c in parallel.replicas(result.state.agent.params)]
    identical = all(np.array_equal(a, b) for other in copies[1:] for a, b in zip(copies[0], other))
    params = {f"param:{jax.tree_util.keystr(path)}": leaf
              for path, leaf in jax.tree_util.tree_leaves_with_path(result.params)}
    np.savez(
        out_file,
        replicas_identical=identical,
        process_count=jax.process_count(),
        process_index=jax.process_index(),
        global_devices=len(jax.devices()),
        local_devices=len(jax.local_devices()),
        **params,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
