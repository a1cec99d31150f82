#!/usr/bin/env bash
# Downloads the wheels that benchmarks/device_run.sh installs on a machine with no network, into .whl/ (or $1):
# the packages of benchmarks/device_requirements/*.txt, without their dependencies (the lists name every one that is
# needed), for CPython $PYVER (default 3.12) on x86-64 Linux. Run it where pip reaches the package index, then copy
# the working tree with .whl/ to the other machine and run `bash benchmarks/device_run.sh` there.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-.whl}
pyver=${PYVER:-3.12}
python=${PYTHON:-python3}
mkdir -p "$dest"
# Exactly the listed set, nothing left from an earlier list; and none of the folders device_run.sh installs into
# (.whl/site-*, some 80 MB unpacked), so that .whl/ travels as the wheels alone.
rm -rf "$dest"/*.whl "$dest"/site-*
for group in shared rlpar rejax; do  # one call per list: rlpar's and rejax's gymnax differ
  "$python" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d "$dest" -r "benchmarks/device_requirements/$group.txt"
done
ls -l "$dest"/*.whl | awk '{printf "%10d  %s\n", $5, $NF}'
echo "$(ls "$dest"/*.whl | wc -l) wheels, $(du -ch "$dest"/*.whl | tail -1 | cut -f1) in all, in $dest"
