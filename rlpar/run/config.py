"""A run's settings: ``RunConfig`` (where and how a run executes, each field a CLI flag) and its validation.

It imports only the engine modules below it (episodes, parallel, population, preemption, seeds), never the rest of the
host loop's modules.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from rlpar.core import collectives, episodes, parallel, population, seeds
from rlpar.run import preemption


def _f(default, help: str, repeatable: bool = False):  # noqa: A002
    """A ``RunConfig`` field: its default and its flag's help; ``repeatable``: the flag may be given several times,
    each value adding fields to the space-separated string (``rlpar.tools.cli.Fields``)."""
    return field(default=default, metadata={"help": help, **({"repeatable": True} if repeatable else {})})


@dataclass(frozen=True)
class RunConfig:
    """Where and how a run executes (not what it learns). Each field is a CLI flag too."""

    env: str = _f("CartPole-v1", "environment id: a gymnax id, a probe id, an id added with envs.register, or "
                                 "package.module:factory")
    devices: int = _f(0, "local devices to use; 0 = all local devices (on a CPU-only host that is 1). On a "
                         "CPU-only host N > 1 creates N CPU devices (at most max(8, cores))")
    run_dir: str = _f("", "directory for config.json, metrics.jsonl and checkpoints; empty = write nothing")
    log_every: int = _f(10, "updates per call of the compiled program (one program whatever the chunk lengths); "
                            "one log line and metrics.jsonl record per call")
    checkpoint_every: int = _f(100, "with --run-dir: save a checkpoint after the chunk that reaches each multiple "
                                    "of this many updates, and at the end; 0 = no checkpoints")
    eval_every: int = _f(-1, "greedy evaluation during training: after the chunk that reaches each multiple of this "
                             "many updates, and at the end; -1 = about ten per run (every ceil(updates / 10)); "
                             "0 = none. Each episode runs to its end: the env's time limit "
                             f"(max_steps_in_episode), or {episodes.STEP_CAP} steps for an env without one")
    eval_episodes: int = _f(64, "episodes per evaluation, on environments of their own, split evenly over the "
                                "devices (a multiple of the device count)")
    tensorboard: bool = _f(False, "with --run-dir: also write TensorBoard event files to RUN_DIR/tensorboard")
    wandb: bool = _f(False, "with --run-dir: also log to Weights & Biases (the same scalars as --tensorboard, "
                            "config.json as the run's config); --resume continues the same wandb run. "
                            "WANDB_MODE=offline keeps it on disk for wandb sync")
    wandb_project: str = _f("", "with --wandb: the wandb project; empty = $WANDB_PROJECT, or rlpar")
    num_seeds: int = _f(1, "independent trainings (seeds) vmapped in one compiled program; metrics keep each one")
    sweep: str = _f("", "vmap over hyperparameters too: FIELD=V1,V2,... (FIELD: one the agent's config declares "
                        "sweepable, e.g. lr); several fields, separated by spaces in one value or given by repeating "
                        "--sweep, sweep their grid; runs num_seeds x grid slots", repeatable=True)
    search: str = _f("", "search several sweepable fields: FIELD=V1,V2 (a list), FIELD=LOW..HIGH (uniform) or "
                         "FIELD=log:LOW..HIGH (log-uniform), separated by spaces in one value or given by repeating "
                         "--search; without --population the grid of the lists, with it that many seeded draws. Each "
                         "member's values live in its training state: one compile serves them all", repeatable=True)
    population: int = _f(0, "members drawn from --search (each trained num_seeds times); 0 = the grid of --search")
    pbt: bool = _f(False, "population-based training: every --pbt-interval updates the bottom --pbt-quantile of the "
                          "members copy the agent state of a top one and perturb its --search values (x0.8 or x1.2, "
                          "or redrawn with probability --pbt-resample), all inside the compiled program")
    pbt_interval: int = _f(0, "updates between PBT rounds; 0 = about ten rounds per run (ceil(updates / 10))")
    pbt_quantile: float = _f(0.25, "fraction of members replaced each PBT round (0 < Q <= 0.5), and of the best "
                                   "members they copy from")
    pbt_resample: float = _f(0.25, "probability that PBT's explore redraws a copied value from --search instead of "
                                   "multiplying it by 0.8 or 1.2")
    pbt_fitness: str = _f("train", "how PBT ranks members: train (mean training return since the last round) or "
                                   "eval (a greedy evaluation of --eval-episodes at each round)")
    population_devices: int = _f(1, "spread the slots (members x seeds) over this many groups of devices: a 2-D "
                                    "mesh, groups x devices-per-group; each group trains its own members on all of "
                                    "their environments, so a gradient's all-reduce spans only its group (none with "
                                    "one device per group). Must divide the device count and the slot count; 1 = "
                                    "every device trains every slot on its share of the environments")
    backend: str = _f("auto", "device backend: pmap, or shard_map (jax.jit over jax.shard_map on a device mesh); "
                              "auto = pmap, or shard_map with --population-devices > 1 (a 2-D mesh, which pmap "
                              "cannot map)")
    profile: str = _f("", "write a jax.profiler trace of one chunk of updates (the second: compiled and warm) to "
                          "this directory, for TensorBoard's profile plugin or Perfetto; empty = none")
    compile_cache: str = _f("", "directory of the compilation caches (JAX's persistent cache, and rlpar's saved "
                                "programs in DIR/programs), so an identical run loads its programs instead of "
                                "compiling them; empty = $RLPAR_CACHE_DIR or ~/.cache/rlpar/jax; off (or "
                                "--no-compile-cache) = none")
    # Multi-process runs (see README "Past one machine"); every process gets the same flags except process_id.
    coordinator: str = _f("", "multi-process: HOST:PORT of process 0's coordinator; 'auto' = read the cluster's "
                              "environment (SLURM, Open MPI, JAX_COORDINATOR_ADDRESS); empty = single process")
    num_processes: int = _f(1, "multi-process: processes in the run (ignored with --coordinator auto)")
    process_id: int = _f(0, "multi-process: this process's rank, 0..num_processes-1 (ignored with --coordinator auto)")
    init_timeout_s: int = _f(300, "multi-process: seconds to wait for every process to join")
    heartbeat_timeout_s: int = _f(100, "multi-process: seconds of silence after which a process is declared dead "
                                       "and the others exit with an error")
    preemption_grace_s: int = _f(preemption.GRACE_S, "on SIGTERM or SIGUSR1 (a scheduler's notice): finish the "
                                                     "chunk in progress, save a checkpoint and stop (exit "
                                                     f"{preemption.EXIT_CODE}); after this many seconds, or a second "
                                                     "signal, stop at once. 0 = leave those signals alone")

    def validate(self) -> "RunConfig":
        for name in ("devices", "checkpoint_every", "preemption_grace_s"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name}={value!r}: must be a positive integer, or 0 (see --help)")
        if not isinstance(self.eval_every, int) or isinstance(self.eval_every, bool) or self.eval_every < -1:
            raise ValueError(f"eval_every={self.eval_every!r}: must be a positive integer, 0 (no evaluation) or -1 "
                             "(about ten evaluations per run)")
        for name in ("log_every", "eval_episodes", "num_processes", "init_timeout_s", "heartbeat_timeout_s"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name}={value!r}: must be a positive integer")
        # a ValueError naming a bad num_seeds, sweep or search syntax
        slots = seeds.make_slots(self.num_seeds, self.sweep, search=self.search, population=self.population)
        self._validate_pbt(slots.count)
        if self.backend not in ("auto", *parallel.BACKENDS):
            raise ValueError(f"backend={self.backend!r}: must be one of auto, {', '.join(parallel.BACKENDS)}")
        self._validate_groups(slots.count)
        if not isinstance(self.process_id, int) or not 0 <= self.process_id < self.num_processes:
            raise ValueError(f"process_id={self.process_id!r}: must be in 0..{self.num_processes - 1} "
                             f"(num_processes={self.num_processes})")
        if self.num_processes > 1 and not self.coordinator:
            raise ValueError(f"num_processes={self.num_processes} needs --coordinator HOST:PORT (or auto)")
        _check_run_dir_options(self)
        return self

    def _validate_groups(self, num_slots: int) -> None:
        groups = self.population_devices
        if isinstance(groups, bool) or not isinstance(groups, int) or groups <= 0:
            raise ValueError(f"population_devices={groups!r}: must be a positive integer (1 = no population groups)")
        if groups == 1:
            return
        if self.backend == "pmap":
            raise ValueError(f"backend='pmap' maps one device axis; population_devices={groups} needs a 2-D device "
                             "mesh: use --backend shard_map (or auto, the default)")
        if num_slots % groups:
            raise ValueError(f"population_devices={groups}: the run's {num_slots} slot(s) (members x --num-seeds) do "
                             f"not split evenly into {groups} device groups: use a --population (times --num-seeds) "
                             f"divisible by {groups}")

    @property
    def device_backend(self) -> str:
        """The backend that maps the devices: ``backend``, with ``auto`` resolved."""
        if self.backend != "auto":
            return self.backend
        return "shard_map" if self.population_devices > 1 else "pmap"

    @property
    def member_groups(self) -> collectives.MemberGroups:
        """How the slots sit on the device groups (``rlpar.core.collectives.MemberGroups``)."""
        return collectives.MemberGroups(self.population_devices)

    def _validate_pbt(self, num_slots: int) -> None:
        if not isinstance(self.pbt_interval, int) or isinstance(self.pbt_interval, bool) or self.pbt_interval < 0:
            raise ValueError(f"pbt_interval={self.pbt_interval!r}: must be a positive integer, or 0 (about ten "
                             "rounds per run)")
        if not isinstance(self.pbt_quantile, (int, float)) or not 0 < self.pbt_quantile <= 0.5:
            raise ValueError(f"pbt_quantile={self.pbt_quantile!r}: must be in (0, 0.5]")
        if not isinstance(self.pbt_resample, (int, float)) or not 0 <= self.pbt_resample <= 1:
            raise ValueError(f"pbt_resample={self.pbt_resample!r}: must be in [0, 1]")
        if self.pbt_fitness not in population.FITNESS:
            raise ValueError(f"pbt_fitness={self.pbt_fitness!r}: must be one of {', '.join(population.FITNESS)}")
        if not self.pbt:
            return
        if not self.search:
            raise ValueError("pbt needs --search: the fields and spaces its explore perturbs, e.g. --search "
                             "'lr=log:1e-4..1e-2' --population 8")
        if num_slots < 2:
            raise ValueError(f"pbt with {num_slots} member: a population needs at least 2 (--population N, or more "
                             "values in --search)")
        if self.pbt_fitness == "eval" and self.eval_every == 0:
            raise ValueError("pbt_fitness='eval' evaluates at each PBT round: give --eval-every -1 or N (not 0)")

    def pbt_settings(self, num_updates: int) -> population.PBT | None:
        """PBT's settings for a run of ``num_updates``; ``None`` without ``--pbt``. ``ValueError`` for an interval
        that leaves no round."""
        if not self.pbt:
            return None
        interval = self.pbt_interval or -(-num_updates // 10)
        if interval >= num_updates:
            raise ValueError(f"pbt_interval={interval} is not shorter than the run ({num_updates} updates): no PBT "
                             f"round would happen; use at most {max(1, num_updates - 1)}")
        return population.PBT(interval, float(self.pbt_quantile), float(self.pbt_resample), self.pbt_fitness,
                              num_updates)

    def validate_devices(self, num_devices: int) -> "RunConfig":
        """What depends on the device count: evaluation episodes split evenly over the devices."""
        if self.eval_every != 0 and self.eval_episodes % num_devices:
            raise ValueError(
                f"eval_episodes={self.eval_episodes} is not divisible by the device count {num_devices}: use a "
                f"multiple of {num_devices} (e.g. {num_devices * -(-self.eval_episodes // num_devices)}), or "
                "eval_every=0 for no evaluation"
            )
        return self

    def eval_interval(self, num_updates: int) -> int:
        """Updates between evaluations for a run of ``num_updates`` (``eval_every``, or ``ceil(num_updates / 10)``
        for -1); 0: no evaluation."""
        return -(-num_updates // 10) if self.eval_every == -1 else self.eval_every


def _check_run_dir_options(run_config: RunConfig) -> None:
    """A run dir that is a file or cannot be created, TensorBoard or wandb without their package, wandb without a
    run dir: refused before anything runs."""
    if run_config.run_dir and Path(run_config.run_dir).exists() and not Path(run_config.run_dir).is_dir():
        raise ValueError(f"run_dir={run_config.run_dir!r} is a file, not a directory: give a directory path "
                         "(it is created if missing)")
    if run_config.run_dir:
        check_creatable(run_config.run_dir, "run_dir", "give a directory path that can be written")
    if run_config.tensorboard:
        import importlib.util

        if importlib.util.find_spec("tensorboardX") is None:
            raise ValueError("--tensorboard needs the tensorboardX package: pip install -e \".[extras]\" "
                             "(or pip install tensorboardX)")
    if run_config.wandb:
        import importlib.util

        if not run_config.run_dir:
            raise ValueError("--wandb needs --run-dir DIR: the wandb run's id is kept there, so that --resume "
                             "continues the same wandb run")
        if importlib.util.find_spec("wandb") is None:
            raise ValueError("--wandb needs the wandb package: pip install -e \".[wandb]\" (or pip install wandb)")


def check_creatable(path: str | Path, name: str, fix: str) -> None:
    """``ValueError`` naming ``name`` unless ``path`` is a directory, or its nearest existing parent is a directory
    this process may write into (where it would be created); nothing is created."""
    target = Path(path).expanduser().absolute()
    existing = next(p for p in (target, *target.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        what = "a file" if not existing.is_dir() else "not writable"
        where = "it" if existing == target else f"{str(existing)!r}"
        raise ValueError(f"{name}={str(path)!r} cannot be written: {where} is {what}; {fix}")
