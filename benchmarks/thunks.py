"""Timing compiled programs: the median of repeated calls, and where a program's time goes kernel by kernel (a
``jax.profiler`` trace, summed by kind): XLA:CPU's thunks, or an accelerator's ops.

XLA:CPU runs a program as a sequence of thunks (a fused kernel, a copy, a sort, a loop); its profiler events name
each (``copy.51``, ``ynn_fusion.8``). ``by_kind`` sums their durations and counts by name with the numeric suffix
dropped (``copy``, ``ynn_fusion``: XLA's own naming of what the kernel does), per call of the program. The trace's
own cost inflates every event by a similar amount, so compare counts and shares, not absolute times, with untraced
timings. Standard library and JAX only, so that the peers' environments (``peers.py``) can import it too.
"""

from __future__ import annotations

import collections
import glob
import re
import statistics
import tempfile
import time


def median_seconds(fn, *args, repeats: int) -> float:
    """The median wall-clock seconds of ``repeats`` calls of ``fn(*args)``, each waited for, after one untimed call
    (compilation)."""
    import jax

    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def by_kind(fn, args: tuple, calls: int = 3) -> dict[str, tuple[float, float]]:
    """``{kind: (milliseconds per call, kernels per call)}`` over ``calls`` traced calls of ``fn(*args)`` (compiled and
    run once first), kinds sorted by time. Loops (``while``) and the executor's own events are left out: their time is
    their kernels'."""
    import jax
    from jax.profiler import ProfileData

    jax.block_until_ready(fn(*args))
    with tempfile.TemporaryDirectory() as trace_dir:
        jax.profiler.start_trace(trace_dir)
        for _ in range(calls):
            jax.block_until_ready(fn(*args))
        jax.profiler.stop_trace()
        path = sorted(glob.glob(f"{trace_dir}/**/*.xplane.pb", recursive=True))[-1]
        data = ProfileData.from_file(path)
        time_ns, count = collections.Counter(), collections.Counter()
        for name, duration_ns in kernel_events(data):
            kind = re.sub(r"[._]\d+(\.clone)*$", "", name)
            time_ns[kind] += duration_ns
            count[kind] += 1
    return {kind: (ns / 1e6 / calls, count[kind] / calls) for kind, ns in time_ns.most_common()}


def kernel_events(data, loops: bool = False, devices_only: bool = False):
    """``(name, duration_ns)`` of every kernel a ``jax.profiler.ProfileData`` trace holds: XLA:CPU's thunks (the
    ``tf_XLAEigen`` threads' events) and an accelerator's ops (the ``XLA Ops`` line of each ``/device:`` plane, as
    a TPU's trace names them, whose events carry the whole HLO instruction: only its name is kept, ``fusion.12``).
    Loops (``while``), conditionals and the executor's own events are left out (their time is their kernels')
    unless ``loops``; ``devices_only``: the accelerator's ops alone."""
    skipped = ("Thunk", "end:") if loops else ("while", "Thunk", "end:", "conditional")
    for plane in data.planes:
        device = plane.name.startswith("/device:")
        for line in plane.lines:
            if not ((line.name.startswith("tf_XLAEigen") and not devices_only) or (device and line.name == "XLA Ops")):
                continue
            for event in line.events:
                name = event.name.split(" = ", 1)[0].strip().lstrip("%")  # a TPU's events are the HLO instruction
                if not name.startswith(skipped):
                    yield name, event.duration_ns


def table(kinds: dict[str, tuple[float, float]], top: int = 12) -> list[str]:
    """The ``top`` kinds as lines: share of the traced time, kernels per call, kind."""
    total = sum(ms for ms, _ in kinds.values()) or 1.0
    lines = [f"{100 * ms / total:5.1f}%  {n:9.0f} kernels  {kind}" for kind, (ms, n) in list(kinds.items())[:top]]
    return lines + [f"{sum(n for _, n in kinds.values()):9.0f} kernels per call in all"]
