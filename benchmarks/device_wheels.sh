#!/usr/bin/env bash
# Downloads the wheels that benchmarks/device_run.sh installs on a machine with no network, into .whl/ (or $1):
# the packages of benchmarks/device_requirements/GROUP.txt for each of $WHEEL_GROUPS (default: shared rlpar rejax,
# 30 wheels, 14 MB), without their dependencies (the lists name every one that is needed), for CPython $PYVER
# (default 3.11, the TPU machine's) on x86-64 Linux. Run it where pip reaches the package index, then copy
# the working tree with .whl/ to the other machine and run `bash benchmarks/device_run.sh` there.
#
#   PYTHON=.venv/bin/python bash benchmarks/device_wheels.sh
#   WHEEL_GROUPS="machine shared rlpar rejax" bash benchmarks/device_wheels.sh     # for a machine whose index lacks
#                                                                           # matplotlib and pandas (33 MB more)
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-.whl}
pyver=${PYVER:-3.11}
groups=${WHEEL_GROUPS:-shared rlpar rejax}
python=${PYTHON:-python3}
if ! "$python" -m pip --version >/dev/null 2>&1; then
  echo "[device_wheels] $python has no pip; set PYTHON to a Python that has (e.g. PYTHON=.venv/bin/python)" >&2
  exit 1
fi
mkdir -p "$dest"
rm -f "$dest"/*.whl  # exactly the listed set, nothing left from an earlier list
for group in $groups; do  # one call per list: rlpar's and rejax's gymnax differ
  "$python" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d "$dest" -r "benchmarks/device_requirements/$group.txt"
done
ls -l "$dest"/*.whl | awk '{printf "%10d  %s\n", $5, $NF}'
echo "$(ls "$dest"/*.whl | wc -l) wheels, $(du -ch "$dest"/*.whl | tail -1 | cut -f1) in all, in $dest" \
  "(for Python $pyver)"
