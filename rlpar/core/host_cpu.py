"""Facts about this host's CPU that per-backend choices depend on: whether XLA:CPU emits AVX-512 code here.

Read from ``/proc/cpuinfo`` and ``XLA_FLAGS``, never from JAX, so asking starts no JAX backend. ``rlpar.core.platform``
decides with it (``dense_fast_path``); nothing here decides anything.
"""

from __future__ import annotations

import functools
import os
import re


def xla_cpu_avx512() -> bool:
    """Whether XLA:CPU emits AVX-512 code on this host: the CPU has ``avx512f`` (``/proc/cpuinfo``; False where
    there is none) and ``XLA_FLAGS`` does not cap the instruction set below it (``--xla_cpu_max_isa=AVX2``)."""
    capped = re.search(r"--xla_cpu_max_isa=(\S+)", os.environ.get("XLA_FLAGS", ""))
    if capped and not capped.group(1).upper().startswith("AVX512"):
        return False
    return "avx512f" in cpu_flags()


@functools.cache
def cpu_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                field, _, value = line.partition(":")
                if field.strip() == "flags":
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()
