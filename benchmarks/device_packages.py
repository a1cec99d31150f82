"""The package groups ``benchmarks/device_run.sh`` installs: what a Python lacks, whether wheels are at hand, and
whether each side's programs import.

A group is a list, ``benchmarks/device_requirements/GROUP.txt``: one package a line, ``name==version`` or a bare
name (any version will do), ``#`` comments. ``machine`` holds the large compiled packages a machine's own index
tends to have, ``shared`` what rlpar and rejax both import, ``rlpar`` and ``rejax`` each side's own (their gymnax
versions differ, so rejax's is installed in a folder of its own), ``checkpoint`` orbax and what it imports (a
run with ``--run-dir`` saves checkpoints), ``test`` pytest for ``device_run.sh --shell``.

    python benchmarks/device_packages.py missing shared rlpar     # what this Python lacks; exit 1 if anything
    python benchmarks/device_packages.py wheels .whl rejax        # exit 0 if .whl/ has a wheel for every line
    python benchmarks/device_packages.py imports rlpar            # the rlpar side's imports, JAX on the CPU

Standard library only: it runs before anything is installed. ``imports`` pins JAX to the CPU, so a check never
opens an accelerator (on a TPU that costs 10-15 s, and only one process may hold it).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata as metadata
import os
import re
import sys
from pathlib import Path

REQUIREMENTS = Path(__file__).resolve().parent / "device_requirements"
GROUPS = ("machine", "shared", "rlpar", "checkpoint", "rejax", "test")

# What each side's programs import at start, and the gymnax major version it needs (rejax 0.1 unpacks gymnax 0.0's
# five-value step; rlpar needs 1.0's six values). rlpar's modules come from the working tree.
SIDES = {
    "rlpar": (("gymnax", "flax", "optax", "chex", "matplotlib", "rlpar.run.runner", "agents.ppo", "envs"), 1),
    "rejax": (("gymnax", "flax", "optax", "distrax", "seaborn", "matplotlib.pyplot", "rejax"), 0),
}


def normalize(name: str) -> str:
    """A distribution's name as PEP 503 compares them: ``PyYAML``, ``typing_extensions`` -> ``pyyaml``,
    ``typing-extensions``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements(group: str, folder: Path = REQUIREMENTS) -> list[tuple[str, str | None]]:
    """``[(name, version or None)]`` of ``folder/group.txt``, in its order."""
    found = []
    for line in (folder / f"{group}.txt").read_text().splitlines():
        spec = line.split("#", 1)[0].strip()
        if not spec:
            continue
        name, _, version = spec.partition("==")
        if re.search(r"[<>=!~;\[ ]", name) or (version and not re.fullmatch(r"[\w.+!-]+", version.strip())):
            raise ValueError(f"{group}.txt: {line.strip()!r}: expected 'name==version' or 'name'")
        found.append((name.strip(), version.strip() or None))
    return found


def missing(group: str, folder: Path = REQUIREMENTS) -> list[str]:
    """The lines of ``group`` this interpreter lacks: not installed, or at another version than the pinned one
    (the first copy on ``sys.path`` counts, as for an import)."""
    lacking = []
    for name, version in requirements(group, folder):
        try:
            found = metadata.version(name)
        except metadata.PackageNotFoundError:
            lacking.append(name + (f"=={version}" if version else ""))
            continue
        if version and found != version:
            lacking.append(f"{name}=={version} (found {found})")
    return lacking


def wheel_name(filename: str) -> tuple[str, str] | None:
    """``(normalized name, version)`` of a wheel's file name, or None if it is not one."""
    parts = filename[:-len(".whl")].split("-") if filename.endswith(".whl") else []
    return (normalize(parts[0]), parts[1]) if len(parts) >= 5 else None


def lacking_wheels(wheels: Path, group: str, folder: Path = REQUIREMENTS) -> list[str]:
    """The lines of ``group`` that have no wheel in ``wheels`` (any version for a bare name)."""
    have = {wheel_name(p.name) for p in wheels.glob("*.whl")} if wheels.is_dir() else set()
    names = {name for name, _ in have if name}
    return [name + (f"=={version}" if version else "") for name, version in requirements(group, folder)
            if ((normalize(name), version) not in have if version else normalize(name) not in names)]


def check_imports(side: str) -> str | None:
    """None if ``side``'s programs import here with the gymnax they need; else what failed, in one line."""
    modules, gymnax_major = SIDES[side]
    os.environ["JAX_PLATFORMS"] = "cpu"  # before JAX starts: never open the accelerator for a check
    try:
        version = metadata.version("gymnax")
    except metadata.PackageNotFoundError:
        return "gymnax is not installed"
    if int(version.split(".")[0]) != gymnax_major:
        return f"gymnax {version} is first on the path; {side} needs {gymnax_major}.x"
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as error:  # an import error deep inside (a missing dependency) is what to report
            return f"import {module}: {type(error).__name__}: {error}"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("missing", help="print what this Python lacks of the groups").add_argument(
        "groups", nargs="+", choices=GROUPS)
    wheels = sub.add_parser("wheels", help="print the lines of the groups with no wheel in DIR")
    wheels.add_argument("dir", type=Path)
    wheels.add_argument("groups", nargs="+", choices=GROUPS)
    sub.add_parser("imports", help="import what a side's programs import").add_argument("side", choices=SIDES)
    args = parser.parse_args(argv)
    if args.command == "imports":
        failed = check_imports(args.side)
        if failed:
            print(failed)
        return 1 if failed else 0
    lacking = [line for group in args.groups for line in
               (missing(group) if args.command == "missing" else lacking_wheels(args.dir, group))]
    if lacking:
        print("\n".join(lacking))
    return 1 if lacking else 0


if __name__ == "__main__":
    sys.exit(main())
