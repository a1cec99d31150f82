"""Every choice rlpar makes per backend, each with the measurement that chose it.

The mechanisms live elsewhere (threefry's unrolled lowering in ``rlpar.core.cpu_paths``, the Feistel walk and the gathers
in ``agents.shuffle``, the collector in ``rlpar.core.rollout``, the init's compile in ``rlpar.run.build``, the layers in
``agents.layers``); this module only answers which one runs. Each answer is a function read when a program is traced
or compiled, never at import, so importing this module starts no JAX backend. ``docs/accelerators.md`` ("What each
backend runs, and why") tabulates them: backend x choice x figure.

The switch: ``cpu_fast_paths()`` is True on XLA:CPU and False elsewhere; most choices below follow it. How to ask,
most specific first:

- a choice forced in code (``set_fast_paths``/``fast_paths`` for the switch itself; ``set_shuffle_method``,
  ``set_shuffle_block``, ``set_gather_layout``, ``set_keys_up_front``, ``set_collector_unroll``, or ``forcing(...)``
  for one block, for tests and benchmarks that compare the answers on one backend);
- the environment variable ``RLPAR_PLAIN_LAYERS=1``: every choice takes the accelerator's answer (``0`` or unset:
  decide by platform), to check those answers on a laptop;
- otherwise: by ``jax.default_backend()``.

A program already compiled keeps the answers it was traced with: change them before building and tracing.
"""

from __future__ import annotations

import contextlib
import os
import threading
from typing import Any, Iterator

import jax

PLAIN_LAYERS_ENV = "RLPAR_PLAIN_LAYERS"
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")

_override: bool | None = None  # set_fast_paths / fast_paths; None: decide by environment variable and platform
_forced: dict[str, Any] = {}  # a choice's name -> the answer forced for it (forcing); absent: the backend decides


# --- the switch ------------------------------------------------------------------------------------------------------

def forced() -> bool | None:
    """What ``set_fast_paths``/``fast_paths`` asked for (``None``: nothing; the environment and platform decide)."""
    return _override


def set_fast_paths(enabled: bool | None) -> None:
    """Force the fast paths on (``True``) or off (``False``) for everything traced from now on; ``None`` undoes it."""
    global _override
    if enabled is not None and not isinstance(enabled, bool):
        raise TypeError(f"set_fast_paths takes True, False or None, got {enabled!r}")
    _override = enabled


@contextlib.contextmanager
def fast_paths(enabled: bool | None) -> Iterator[None]:
    """``set_fast_paths(enabled)`` inside the ``with`` block, the previous setting restored after it."""
    previous = _override
    set_fast_paths(enabled)
    try:
        yield
    finally:
        set_fast_paths(previous)


def plain_layers_requested() -> bool:
    """Whether ``$RLPAR_PLAIN_LAYERS`` asks for the plain code; ``ValueError`` for a value that is not a boolean."""
    value = os.environ.get(PLAIN_LAYERS_ENV, "").strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ValueError(
        f"{PLAIN_LAYERS_ENV}={os.environ[PLAIN_LAYERS_ENV]!r}: expected one of 1/0, true/false, yes/no, on/off"
    )


def cpu_fast_paths(platform: str | None = None) -> bool:
    """Whether to use the XLA:CPU fast paths for code that runs on ``platform`` (default ``jax.default_backend()``).

    ``set_fast_paths``/``fast_paths`` win when set; then ``$RLPAR_PLAIN_LAYERS`` turns the fast paths off; otherwise
    they are on exactly when the platform is ``"cpu"``.
    """
    if _override is not None:
        return _override
    if plain_layers_requested():
        return False
    if platform is None:
        platform = jax.default_backend()
    return platform == "cpu"


def resolve(fast: bool | None, platform: str | None = None) -> bool:
    """A module's ``fast`` field resolved: itself when given, else ``cpu_fast_paths(platform)``."""
    return cpu_fast_paths(platform) if fast is None else fast


# --- forcing a choice ------------------------------------------------------------------------------------------------

SHUFFLE_METHODS = ("feistel", "sort")
GATHER_LAYOUTS = ("flat", "blocks", "shaped")
GAE_METHODS = ("scan", "associative")


def _check_method(name):
    if name is not None and name not in SHUFFLE_METHODS:
        raise ValueError(f"shuffle method {name!r}: expected one of {', '.join(SHUFFLE_METHODS)}")


def _check_block(rows):
    if rows is not None and (not isinstance(rows, int) or rows < 1):
        raise ValueError(f"shuffle block {rows!r}: expected a positive integer or None")


def _check_layout(name):
    if name is not None and name not in GATHER_LAYOUTS:
        raise ValueError(f"shuffle layout {name!r}: expected one of auto, {', '.join(GATHER_LAYOUTS)}")


def _check_bool(value):
    if value is not None and not isinstance(value, bool):
        raise ValueError(f"{value!r}: expected True, False or None")


def _check_gae(name):
    if name is not None and name not in GAE_METHODS:
        raise ValueError(f"gae method {name!r}: expected one of {', '.join(GAE_METHODS)}")


def _check_unroll(steps):
    if steps is not None and (not isinstance(steps, int) or steps < 1):
        raise ValueError(f"unroll {steps!r}: expected a positive integer or None")


_CHECKS = {"shuffle_method": _check_method, "shuffle_block": _check_block, "gather_layout": _check_layout,
           "packed_gather": _check_bool,
           "keys_up_front": _check_bool, "collector_unroll": _check_unroll, "raveled_update": _check_bool,
           "gae_method": _check_gae, "evaluation_in_chunk": _check_bool, "donate_state": _check_bool,
           "one_env_step": _check_bool}
CHOICES = tuple(_CHECKS)  # the choices ``forcing`` takes (the switch has its own ``fast_paths``)


def _force(choice: str, answer: Any) -> None:
    _CHECKS[choice](answer)
    if answer is None:
        _forced.pop(choice, None)
    else:
        _forced[choice] = answer


def force(choice: str, answer: Any) -> None:
    """Force ``choice``'s (one of ``CHOICES``) answer from now on; ``None`` lets the backend decide again.
    ``ValueError`` (one line) for an unknown choice or an answer it cannot take."""
    if choice not in _CHECKS:
        raise ValueError(f"choice {choice!r}: expected one of {', '.join(CHOICES)}")
    _force(choice, answer)


def forced_answer(choice: str) -> Any:
    """The answer forced for ``choice`` (one of ``CHOICES``), or ``None`` where the backend decides."""
    if choice not in _CHECKS:
        raise ValueError(f"choice {choice!r}: expected one of {', '.join(CHOICES)}")
    return _forced.get(choice)


@contextlib.contextmanager
def forcing(**answers: Any) -> Iterator[None]:
    """Inside the ``with`` block, each named choice (of ``CHOICES``) answers as given (``None``: as the backend
    decides); the previous answers are restored after it. ``forcing(shuffle_method="sort", shuffle_block=8)``."""
    unknown = set(answers) - set(_CHECKS)
    if unknown:
        raise ValueError(f"choices {sorted(unknown)}: expected some of {', '.join(CHOICES)}")
    previous = {choice: _forced.get(choice) for choice in answers}
    try:
        for choice, answer in answers.items():
            _force(choice, answer)
        yield
    finally:
        for choice, answer in previous.items():
            _force(choice, answer)


def set_shuffle_method(name: str | None) -> None:
    """Force ``shuffle_method``'s answer (one of ``SHUFFLE_METHODS``) from now on; ``None`` decides by platform."""
    _force("shuffle_method", name)


def set_shuffle_block(rows: int | None) -> None:
    """Force ``shuffle_block``'s answer (where it divides the step's rows); ``None`` lets it decide again."""
    _force("shuffle_block", rows)


def set_gather_layout(name: str | None) -> None:
    """Force ``gather_layout``'s answer (one of ``GATHER_LAYOUTS``); ``None`` lets it decide again."""
    _force("gather_layout", name)


def set_packed_gather(enabled: bool | None) -> None:
    """Force ``packed_gather``'s answer; ``None`` lets the backend decide again."""
    _force("packed_gather", enabled)


def set_keys_up_front(enabled: bool | None) -> None:
    """Force ``collector_keys_up_front``'s answer for collectors traced from now on; ``None`` decides by platform."""
    _force("keys_up_front", enabled)


def set_collector_unroll(steps: int | None) -> None:
    """Force ``collector_unroll``'s answer for collectors traced from now on; ``None`` decides by platform."""
    _force("collector_unroll", steps)


# --- random numbers --------------------------------------------------------------------------------------------------

_thread = threading.local()  # .rolled: this thread lowers threefry rolled whatever the switch says


def threefry_unrolled(platform: str = "cpu") -> bool:
    """Whether ``jax.random``'s threefry hash is lowered with its five key-schedule rounds unrolled
    (``rlpar.core.cpu_paths``'s lowering, registered for XLA:CPU only; elsewhere JAX's own lowering runs): on the fast
    paths, except in a thread inside ``rolled_threefry``.

    Why: JAX lowers threefry on CPU as a ``fori_loop`` over the rounds; on XLA:CPU each loop iteration costs a
    dispatch plus a copy of every loop-carried buffer, and a collector draws in every environment step. PPO on
    CartPole with 8 environments ran about 1.15x faster unrolled, bit-identical (``docs/benchmarks.md``, "Where a
    PPO update's time went")."""
    return cpu_fast_paths(platform) and not getattr(_thread, "rolled", False)


@contextlib.contextmanager
def rolled_threefry() -> Iterator[None]:
    """Inside the block, in this thread only, threefry is lowered as JAX's rolled loop whatever the switch says
    (``threefry_unrolled`` is False): for a program that runs once, whose compilation the unrolled rounds lengthen
    more than they shorten its run (PPO's init on CartPole: 2.0 s of compile CPU unrolled, 1.25 s rolled).
    Thread-local because the runner lowers the init in a thread of its own while the main thread may be lowering or
    compiling another program. Same values either way."""
    previous = getattr(_thread, "rolled", False)
    _thread.rolled = True
    try:
        yield
    finally:
        _thread.rolled = previous


# --- layers and the optimizer step (agents.layers, agents.optim, the learners) ---------------------------------------

DENSE_FAST_ROWS_AVX2 = 1024  # without AVX-512, Dense's fast path below this many rows (dense_fast_path)


def dense_fast_path(platform: str | None = None, rows: int | None = None) -> bool:
    """Whether ``agents.layers.Dense`` takes its fast path (the kernel gradient from an explicitly transposed input)
    when its ``fast`` field is ``None``, for an input of ``rows`` rows (the batch, flattened; ``None``: unknown):
    ``set_fast_paths`` when set; otherwise the fast paths on (``cpu_fast_paths``) and either XLA:CPU emitting AVX-512
    (``rlpar.core.host_cpu.xla_cpu_avx512``) or fewer than ``DENSE_FAST_ROWS_AVX2`` rows.

    The fast path was measured faster on an AVX-512 host (a whole PPO update about 7% faster,
    ``docs/benchmarks.md``). On an AVX2 host (JAX 0.10.2, whole PPO updates in one process, the two paths in turns,
    ``benchmarks/dense_paths.py``) the plain layer took 1.00-1.02x the fast path's time with minibatches of 256 rows
    (CartPole, 8 envs), but 0.91-0.99x with 1,024 (Breakout-MinAtar's 2 x 256 MLP) and 0.90-0.97x with 32,768
    (CartPole, 1024 envs): there the fast path is kept for small batches only."""
    if forced() is not None:
        return forced()
    if not cpu_fast_paths(platform):
        return False
    from rlpar.core.host_cpu import xla_cpu_avx512  # a fact about this host, probed there

    return xla_cpu_avx512() or (rows is not None and rows < DENSE_FAST_ROWS_AVX2)


def conv_as_patches(platform: str | None = None) -> bool:
    """Whether ``agents.layers.Conv3x3`` (``fast`` field ``None``) runs as a dense layer over 3x3 patches: on the
    fast paths. XLA:CPU ran convolutions inside ``lax.scan`` about 8x slower than the equal matmul (0.8 s vs 0.09 s
    for 4 minibatch gradients of 512 MinAtar frames; Breakout-MinAtar training went from about 50 to about 3000 SPS,
    ``docs/benchmarks.md``); on GPU/TPU the convolution is what the compilers are tuned for."""
    return cpu_fast_paths(platform)


def raveled_update(platform: str | None = None) -> bool:
    """Whether the learners take gradients and optimizer steps on all parameters raveled into one vector: on the fast
    paths. On XLA:CPU ``optax.flatten`` took a gradient step from 130 to 77 kernels, 372 -> 333 us at 256 rows, and
    the gradient with respect to the raveled vector 320-324 -> 260-274 us per step (``docs/benchmarks.md``, items 3
    and 6); elsewhere the per-array optax code runs. The optimizer state is the same either way. On a TPU v5e the
    raveled update took PPO on Breakout-MinAtar at one env x 128 steps from 15.1k to 15.4k SPS (forced, with
    ``forcing(raveled_update=True)``): within the spread, and not taken there (``docs/benchmarks.md``)."""
    raveled = _forced.get("raveled_update")
    return cpu_fast_paths(platform) if raveled is None else raveled


# --- the run's programs (rlpar.run.chunks) ---------------------------------------------------------------------------

def evaluation_in_chunk(platform: str | None = None) -> bool:
    """Whether a run's greedy evaluation is a ``lax.cond`` branch of its chunk program (one program to compile) or a
    program of its own (compiled beside the chunk's, ``rlpar.run.chunks``), called after the chunks it follows: the
    forced answer if set, else on the fast paths.

    Why: on XLA:CPU (2 cores, AVX-512) the one program compiled faster, and the branch cost the updates nothing
    measurable: PPO's CartPole preset (20 updates, evaluating every 10) compiled in 6.4-6.6 s with the branch and
    6.8-9.5 s as two programs (two rounds each, the same episodes and returns); per update, with and without the
    branch, 4.24 and 4.34 ms at CartPole's preset, 31.0 and 29.9 ms, then 34.9 and 39.1 ms, at Breakout-MinAtar's one
    env x 128 steps (``benchmarks/chunk_overhead.py``; ``benchmarks/results/2026-12-06/
    chunk_overhead_evaluation_cpu.jsonl``). On a TPU v5e the branch, never taken, made every update of the loop
    before it slower: PPO on Breakout-MinAtar at one env x 128 steps, two collector steps per iteration, 10 updates
    per call, the chunk program took 8.27-8.33 ms per update, jitted, pmapped or as the runner compiles it, and a bare
    ``scan`` of updates 7.52-7.73 (``benchmarks/results/2026-12-06/chunk_overhead_one_env_tpu_v5e.jsonl``); the
    same programs split apart: 8.33-8.41 ms with the branch against 7.66-7.69 without it, whether the loop was a
    ``fori_loop`` over the traced count or a ``lax.scan`` (``docs/accelerators.md``, "One env per device"). A GPU
    takes the accelerators' answer; it is not measured there."""
    inside = _forced.get("evaluation_in_chunk")
    return cpu_fast_paths(platform) if inside is None else inside


DONATE_FROM_BYTES = 1 << 30  # on accelerators, a state of this many bytes per device or more is donated


def donate_state(state_bytes: int, platform: str | None = None) -> bool:
    """Whether a run's chunk program takes its state donated, updated in place (one copy of the state on a device
    while a chunk runs, instead of the state it was given and the one it returns): the forced answer if set, else
    always on the fast paths, else only for a state of at least ``DONATE_FROM_BYTES`` per device (``state_bytes``).

    Why: on a TPU v5e donation made the runner's chunk program slower: PPO on Breakout-MinAtar at one env x 128
    steps (a state of about 4 MiB), 100 updates per call, 7.52 ms per update undonated against 8.46 donated
    (``benchmarks/chunk_overhead.py``, ``benchmarks/results/2026-12-06/chunk_overhead_one_env_tpu_v5e.jsonl``). Below
    1 GiB the second copy costs a chip of 16 GiB little; above it (a large replay buffer) memory counts first, and
    the state is donated as before. On XLA:CPU (2 cores, AVX-512) donation is kept as it was: it changed nothing past
    the host's noise, undonated against donated 44.4 / 44.9 and 38.2 / 41.1 ms per update at Breakout-MinAtar's
    one env x 128 steps, 4.2 / 5.6 and 4.5 / 4.3 ms at CartPole's preset, 10 updates per call
    (``benchmarks/results/2026-12-06/chunk_donation_cpu.jsonl``)."""
    donate = _forced.get("donate_state")
    if donate is not None:
        return donate
    return cpu_fast_paths(platform) or state_bytes >= DONATE_FROM_BYTES


# --- advantages (agents.advantages) ----------------------------------------------------------------------------------

def gae_method() -> str:
    """How ``agents.advantages.gae`` runs its backward recursion ``A_t = delta_t + gamma * lambda * c_t * A_{t+1}``:
    the forced answer if set, else ``"scan"`` (``lax.scan``, ``T`` steps one after another) on every backend;
    ``"associative"`` (``lax.associative_scan`` over the affine maps ``x -> c x + delta``, ``log2 T`` rounds of
    whole-array operations, the same values up to float rounding) only when forced.

    Why: on XLA:CPU (2 cores, AVX-512; GAE alone, 50 calls) the two were within noise at 128 x 1 (13.6 vs 11.2 us)
    and 128 x 64 (26.7 vs 27.0 us), the scan 1.6x faster at 128 x 8 and 3.3x at 128 x 4,096 (1.0 vs 3.5 ms); the
    associative form 2.6x faster at 16 x 1,024 (72 vs 27 us): a few microseconds of a PPO update of milliseconds. On a
    TPU v5e the scan timed alone took 1.15 ms at one env x 128 steps (``benchmarks/profile_update.py``), 0.19 ms
    inside the whole update's trace; PPO trained there at 15,320 SPS with the associative form against 14,957 with
    the scan (``benchmarks/train_sps.py --force gae_method=associative``, one run each,
    ``benchmarks/results/2026-12-06/one_env_paths_tpu_v5e.jsonl``). It is not measured at large env counts on the
    chip, so it is not the default anywhere."""
    method = _forced.get("gae_method")
    return "scan" if method is None else method


# --- minibatch shuffles (agents.shuffle) -----------------------------------------------------------------------------

BLOCK_MAX = 64  # rows of one time step moved as one unit at most, off XLA:CPU (shuffle_block)
MIN_UNITS = 256  # units each minibatch holds at least, for shuffle_block to grow a block
LANES = 128  # a TPU tile's minor dimension: blocks of rows at least this wide gather as [block, F] slabs


def shuffle_method(platform: str | None = None) -> str:
    """The permutation a trace takes: the forced one if set, else ``"feistel"`` (no sort) on the fast paths and on a
    TPU, ``"sort"`` (``jax.random.permutation``) elsewhere.

    Why: XLA:CPU sorts with a comparator call per comparison; on PPO's large CartPole config (1024 environments x 128
    steps, 4 epochs) the sorting shuffles took about a third of an update. On a TPU v5e the two were close, and the
    permutation was not where the update's time went (the row gathers were): whole PPO updates at 4,096 envs with
    single rows took 133.5 ms with the Feistel walk and 144.8 ms with the sort on CartPole, 1,499 and 1,509 ms on
    Breakout-MinAtar (``docs/benchmarks.md``, "Shuffles and the collector on a TPU v5e"). Once the gather of single
    rows was packed (``packed_gather``) the permutation was a large share of what was left, and the Feistel walk
    was the faster one there (``docs/accelerators.md``), so a TPU takes the walk. Not measured on a GPU: the sort
    there, JAX's own, no data-dependent ``while_loop``."""
    method = _forced.get("shuffle_method")
    if method is not None:
        return method
    return "feistel" if cpu_fast_paths(platform) or (platform or jax.default_backend()) == "tpu" else "sort"


def shuffle_block(n: int, step_rows: int | None, num_minibatches: int) -> int:
    """How many consecutive rows of a flat batch of ``n`` rows move together when it is shuffled: 1 on the fast
    paths; otherwise the largest power of two up to ``BLOCK_MAX`` that divides ``step_rows`` (the rows one time step
    contributes: ``flat index = t * step_rows + r``, so a block never spans two time steps) and leaves every
    minibatch at least ``MIN_UNITS`` blocks. ``None`` (layout unknown): 1. A forced block is taken where it divides
    the step's rows and the minibatches, else 1.

    Why: an accelerator gathers a few large rows far faster than many small ones. On a TPU v5e (PPO, 4,096 envs x
    128 steps) CartPole's update took 145 ms with single rows and 12.7 ms with blocks of 64
    (``docs/benchmarks.md``, "Shuffles and the collector on a TPU v5e"). A block holds different environments at
    the same step, independent given the policy, so a minibatch of blocks is as varied as one of single rows;
    every row is still used once per epoch and each order of the blocks is equally likely."""
    if step_rows is None or n % num_minibatches:
        return 1
    block = _forced.get("shuffle_block")
    if block is not None:
        return block if step_rows % block == 0 and (n // block) % num_minibatches == 0 else 1
    if cpu_fast_paths():
        return 1
    block = 1
    while (block * 2 <= BLOCK_MAX and step_rows % (block * 2) == 0
           and (n // (block * 2)) % num_minibatches == 0 and n // (block * 2) // num_minibatches >= MIN_UNITS):
        block *= 2
    return block


def gather_layout(block: int, width: int) -> str:
    """How ``agents.shuffle.minibatches`` gathers blocks of ``block`` rows of ``width`` values each (one of
    ``GATHER_LAYOUTS``): the forced layout if set; else ``"blocks"`` (``[block, width]`` slabs) for ``block > 1``
    and ``width >= LANES``, ``"flat"`` (one flat row of ``block * width``) otherwise. ``"shaped"`` (rows in their
    own shape) only when forced, to measure against.

    Why: an accelerator lays out an array's last two dimensions in tiles (a TPU's are 8 x 128), so a shaped row is
    gathered as padded tiles, a flat one as dense lanes. On a TPU v5e (PPO, 4,096 envs x 128 steps,
    ``docs/benchmarks.md``, "Shuffles and the collector on a TPU v5e"): CartPole's update took 145 ms with shaped
    single rows and 12.7 ms with blocks of 64 as flat rows of 256; Breakout-MinAtar's (``F`` = 400) 1,509 ms
    shaped, 284 ms flat, 149 ms as [64, 400] slabs, where blocks of 8 as flat rows of 3,200 asked for 21 GiB of
    temporaries. On XLA:CPU (block 1) the reshapes are free."""
    layout = _forced.get("gather_layout")
    if layout is not None:
        return layout
    return "blocks" if block > 1 and width >= LANES else "flat"


def packed_gather(block: int = 1, platform: str | None = None) -> bool:
    """Whether an epoch's minibatch gather of units of ``block`` rows takes the batch's leaves packed side by side
    into one ``uint32`` row per sample (``agents.shuffle.pack``: one gather per epoch) or gathers each leaf on its own
    (one gather per leaf: a PPO batch has six): the forced answer if set, else on for single rows on a TPU, off
    elsewhere. The values every minibatch step sees are the same either way, bit for bit.

    Why: an accelerator gathers single rows at a cost per row, almost whatever the row's width, so one gather of
    rows holding all the leaves costs about what one leaf's did; measured on a TPU (several times faster for single
    rows; no gain for blocks of rows) and on XLA:CPU (no gain); not measured on a GPU. The figures and their commands:
    ``docs/accelerators.md``, "What each backend runs, and why"."""
    packed = _forced.get("packed_gather")
    if packed is not None:
        return packed
    return block == 1 and (platform or jax.default_backend()) == "tpu" and not cpu_fast_paths(platform)


# --- the collector (rlpar.core.rollout) -----------------------------------------------------------------------------------

KEYS_UP_FRONT_MAX = 1 << 20  # off XLA:CPU, keys split before the scan up to this many (collector_keys_up_front)
UNROLL_ACCELERATOR = 2  # steps per iteration of the collect's scan off XLA:CPU (collector_unroll)


def one_env_step() -> bool:
    """Whether a collect of one env per device steps it unbatched with its reset computed only when its episode ended
    (``envs.adapters.reset_when_done``: for envs made from gymnax's own, whose ``step`` computes a reset at every
    step and selects it where the episode ended): the forced answer if set, else off on the fast paths and on a GPU,
    on elsewhere (a TPU; on the CPU with the fast paths off, the TPU's answer).

    Why: at one env a step on an accelerator is a chain of tiny kernels, and the vmap of one env plus a reset at
    every step are a share of them. On a TPU v5e, PPO at one env x 128 steps, two rounds in one process, off against
    on: Breakout-MinAtar 16,755 and 16,805 against 24,592 and 24,649 SPS (rejax 15,083 in that run: 1.11x against
    1.63x), CartPole-v1 50,775 and 50,653 against 61,401 and 61,455 (rejax 30,700); compile 11.5 against 11.4 s on
    Breakout, 7.6 against 9.6 s on CartPole (``benchmarks/results/2026-12-07/one_env_step_tpu_v5e.jsonl``). On a
    2-core Xeon (AVX-512), two rounds in one process, off against on: Breakout-MinAtar 3,517 and 2,934 against 2,958
    and 3,222 SPS, CartPole-v1 101k and 99k against 93k and 83k (medians of the chunks;
    ``benchmarks/results/2026-12-06/one_env_step_cpu.jsonl``): within that shared host's spread on Breakout, perhaps
    slower on CartPole, so XLA:CPU keeps the vmap. Not measured on a GPU, where a ``lax.cond`` inside a loop reads its
    predicate back to the host at every step: off there until it is. Its values are gymnax's up to float rounding
    (bit for bit on envs of integer dynamics such as Breakout-MinAtar; the same returns in those runs).
    ``benchmarks/train_sps.py --force one_env_step=on|off`` measures it."""
    forced = _forced.get("one_env_step")
    if forced is not None:
        return forced
    return not cpu_fast_paths() and jax.default_backend() != "gpu"


def collector_keys_up_front(num_keys: int | None = None) -> bool:
    """Whether a collect that draws ``num_keys`` keys splits them all before its scan, or each step splits its own
    from the step's index. Up front on the fast paths (each threefry call inside a loop costs a loop of its own on
    XLA:CPU); elsewhere only up to ``KEYS_UP_FRONT_MAX`` keys: on a TPU v5e the array of all keys ([T, 1 + B, 2]
    uint32) made the collector 1.5x faster at 1,024 envs x 128 steps, 1.06x at 4,096 and 1.2-1.6x slower from
    8,192 envs (``docs/benchmarks.md``, "Shuffles and the collector on a TPU v5e")."""
    up_front = _forced.get("keys_up_front")
    if up_front is not None:
        return up_front
    return cpu_fast_paths() or (num_keys is not None and num_keys <= KEYS_UP_FRONT_MAX)


def collector_unroll(requested: int = 0) -> int:
    """Environment steps per iteration of the collect's ``lax.scan``: the forced answer if set, else ``requested``
    (a config's ``collector_unroll``) when it is positive, else 1 on the fast paths, where unrolling made the
    collector slower on XLA:CPU; ``UNROLL_ACCELERATOR`` elsewhere: on a TPU v5e (CartPole, 128 steps) two steps per
    iteration took the collector from 29% behind the bare gymnax loop to 15% ahead at 4,096 envs and from 23% behind
    to level at 32,768; four steps gained 3-5% more but doubled the collector's compile time (``docs/benchmarks.md``,
    "Shuffles and the collector on a TPU v5e"). More steps per iteration cost compile time: on the same chip, PPO on
    Breakout-MinAtar at 1,024 envs x 16 steps compiled in 14.1 s with one step and 17.7 s with two, and ran at 1.82M
    and 2.02M SPS; a run of 1e7 steps spends more in the compile than in training, so its preset asks for one
    (``agents.ppo.presets.ACCELERATOR``)."""
    steps = _forced.get("collector_unroll")
    if steps is not None:
        return steps
    if requested:
        return requested
    return 1 if cpu_fast_paths() else UNROLL_ACCELERATOR


# --- the TPU runtime's start (the commands) --------------------------------------------------------------------------

PREMAPPED_BUFFER_BYTES = 256 << 20  # the TPU runtime's pinned host buffer for transfers (its default: 4 GiB)
TPU_RUNTIME_DEFAULTS = {
    "TPU_PREMAPPED_BUFFER_SIZE": str(PREMAPPED_BUFFER_BYTES),
    "TPU_PREMAPPED_BUFFER_TRANSFER_THRESHOLD_BYTES": str(PREMAPPED_BUFFER_BYTES),
}


def set_runtime_defaults(environ=None) -> dict:
    """Set ``TPU_RUNTIME_DEFAULTS`` in ``environ`` (default ``os.environ``) unless one of them is set already (then the
    user's settings stand, all of them); returns what it set. The TPU runtime reads them once, when JAX opens the
    TPU: call this before that (``python -m rlpar.train`` and ``rlpar.evaluate`` do, first thing). Other backends
    ignore them.

    Why: the runtime maps a pinned host buffer for transfers when it starts, 4 GiB by default, and unmaps it at exit.
    On a TPU v5e without transparent huge pages that took 8.1 s of the 8.5 s start (the runtime's log) and most of
    the 3-5 s from the last line to the process's end. With 256 MiB, PPO on Breakout-MinAtar from the command line
    (1e7 steps, ``benchmarks/cold_start.py --variant``): 28.9 s cold and 17.4 s warm against 40.9 s and 29.7 s in the
    same call; opening the TPU alone 1.1 s (64 MiB) against 5.7 s. rlpar's transfers are small (metrics,
    checkpoints, evaluation); a larger one goes through the runtime's other path."""
    environ = os.environ if environ is None else environ
    if any(name in environ for name in TPU_RUNTIME_DEFAULTS):
        return {}
    environ.update(TPU_RUNTIME_DEFAULTS)
    return dict(TPU_RUNTIME_DEFAULTS)


# --- the init's compile (rlpar.run.build) --------------------------------------------------------------------------------

INIT_COMPILER_OPTIONS = {"xla_backend_optimization_level": 0}
INIT_CPU_COMPILER_OPTIONS = {**INIT_COMPILER_OPTIONS, "xla_cpu_use_fusion_emitters": False}


def init_compiler_options(platform: str) -> tuple[dict, ...]:
    """The compiler options for the run's init program on ``platform``, in the order to try them (the next where
    this XLA answers ``No such compile option``): on ``"cpu"`` ``INIT_CPU_COMPILER_OPTIONS`` then
    ``INIT_COMPILER_OPTIONS``; elsewhere ``INIT_COMPILER_OPTIONS``. Independent of the switch: the init's state is
    the same bit for bit either way.

    Why: the init runs once, beside the chunk program's compilation (its own thread), so its options buy compile
    time, not speed. XLA's backend optimisation level 0: the init's compile CPU on the CartPole preset 1.4 s -> 0.6 s
    on a 2-core host (its floats may differ from an optimised build's in the last bit, the orthogonal initialiser's
    arithmetic; the initial state is the same on every device, in every run and process). On XLA:CPU also the older
    elemental emitters instead of the MLIR fusion emitters: PPO CartPole 1.25 -> 0.54 s of compile CPU, PQN 0.95 ->
    0.37 s, SAC 1.45-2.07 -> 0.66-0.74 s, the same state bit for bit (``docs/benchmarks.md``, 2026-12-05)."""
    if platform == "cpu":
        return INIT_CPU_COMPILER_OPTIONS, INIT_COMPILER_OPTIONS
    return (INIT_COMPILER_OPTIONS,)
