#!/usr/bin/env bash
# One command for a machine with an accelerator: the collector from 2^10 to 2^17 envs, then PPO on CartPole-v1 and on
# Breakout-MinAtar end to end at 1, 4096 and 65536 envs, rlpar against rejax on the same configs (under 8 minutes on
# one H200 by estimate and by a time guard: benchmarks/device_run.py says how). JSON lines per part and a summary go
# to --out.
#
#   bash benchmarks/device_run.sh [--quick] [--out DIR] [--offline] [--budget-s S]
#
# Packages: with wheels in .whl/ (benchmarks/device_wheels.sh, run where pip reaches the index), rlpar's and rejax's
# are installed from them into .whl/site-<python version>/ (rejax's gymnax < 1 in a folder of its own); without, the
# packages $PYTHON already imports are used, and what is missing is installed from the index (never with --offline:
# rejax's rows are then skipped). $PYTHON (default python3) runs everything, rejax included; jax comes with it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
python=${PYTHON:-python3}
wheels=${WHEELS:-$root/.whl}
offline=0
for arg in "$@"; do [[ $arg == --offline ]] && offline=1; done
say() { echo "[device_run] $*" >&2; }

pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
site=$wheels/site-$pyver

# install GROUP SOURCE: the packages of benchmarks/device_requirements/GROUP.txt into $site/GROUP, from the wheels
# (SOURCE=wheels) or the index (SOURCE=index); once per list (a stamp holds the list it installed).
install() {
  local group=$1 source=$2 list=benchmarks/device_requirements/$1.txt target=$site/$1
  if [[ -f $target/.installed ]] && cmp -s "$list" "$target/.installed"; then return 0; fi
  rm -rf "$target" && mkdir -p "$target"
  local from=(--no-index --find-links "$wheels")
  [[ $source == index ]] && from=()
  if "$python" -m pip install -q --no-deps --no-compile --disable-pip-version-check "${from[@]}" --target "$target" \
      -r "$list" >"$target.log" 2>&1; then
    cp "$list" "$target/.installed"
    say "installed $group's packages from the $source into $target"
  else
    say "could not install $group's packages from the $source ($target.log)"
    rm -rf "$target"
    return 1
  fi
}

imports() { PYTHONPATH=$1 "$python" -c "$2" >/dev/null 2>&1; }
gymnax_major='import importlib.metadata as m; major = int(m.version("gymnax").split(".")[0])'
rlpar_check="import gymnax, distrax, flashbax; $gymnax_major; assert major >= 1"
rejax_check="import rejax, gymnax; $gymnax_major; assert major == 0"

have_wheels=0
ls "$wheels"/*.whl >/dev/null 2>&1 && have_wheels=1
from_index() { ((!offline)); }

# rlpar runs from the working tree, its packages from the wheels, else $python's own, else the index.
rlpar_path=$root
if ((have_wheels)) && install shared wheels && install rlpar wheels; then
  rlpar_path=$root:$site/rlpar:$site/shared
elif ! imports "$root" "$rlpar_check" && from_index && install shared index && install rlpar index; then
  rlpar_path=$root:$site/rlpar:$site/shared
fi
if ! imports "$rlpar_path" "$rlpar_check"; then
  say "rlpar's packages (gymnax 1.0, distrax, flashbax) are not importable with $python; see benchmarks/README.md"
  exit 1
fi

# rejax: $python with a folder of its own from the wheels, else its venv (benchmarks/peers.py install), else the
# index, else its rows are skipped.
unset REJAX_PYTHON REJAX_SITE
rejax_from() { install shared "$1" && install rejax "$1" && imports "$site/rejax:$site/shared" "$rejax_check"; }
if ((have_wheels)) && rejax_from wheels; then
  export REJAX_PYTHON=$python REJAX_SITE=$site/rejax:$site/shared
elif [[ -x benchmarks/.peers/rejax-venv/bin/python ]]; then
  say "rejax from its venv, benchmarks/.peers/rejax-venv"
elif from_index && rejax_from index; then
  export REJAX_PYTHON=$python REJAX_SITE=$site/rejax:$site/shared
else
  say "rejax is not installed (no wheels in $wheels for python $pyver, no venv, no index): its rows are skipped"
fi

PYTHONPATH=$rlpar_path exec "$python" benchmarks/device_run.py "$@"
