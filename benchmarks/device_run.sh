#!/usr/bin/env bash
# One command for a machine with an accelerator: the collector from 2^10 to 2^17 envs, then PPO on CartPole-v1 and on
# Breakout-MinAtar end to end at 1, 4096 and 65536 envs, rlpar (single rows, as rejax samples; its own layout beside)
# against rejax on the same configs, within 570 s from
# this script's start (a command on the TPU machine may last at most 600 s; benchmarks/device_run.py says how the time
# is shared). JSON lines per part, accelerator.json and summary.md go to --out.
#
#   bash benchmarks/device_run.sh [--quick] [--out DIR] [--offline] [--budget-s S] [--parts rollout,cartpole,breakout]
#   bash benchmarks/device_run.sh [--offline] --shell 'python benchmarks/cold_start.py -- ppo --env Breakout-MinAtar'
#
# --shell CMD: the same installs, then CMD (bash) in place of the rows, with rlpar's PYTHONPATH and rejax's settings
# exported and `python` naming the Python chosen below (for the measurements device_run.py does not make).
#
# Python: $PYTHON, else .venv/bin/python where it exists, else python3; it must import jax as it stands (on the TPU
# machine JAX comes from a folder PYTHONPATH names: that PYTHONPATH is kept, and this script's folders appended).
# Packages, group by group (benchmarks/device_requirements/, benchmarks/device_packages.py): what the Python lacks is
# installed into .device-site/python<version>/<group>/ (git ignores it), from the wheels in .whl/ when they cover
# the group (benchmarks/device_wheels.sh), else from the index: $INDEX_URL, else the machine's own
# file:///opt/pypi/simple where it exists, else pip's configured one; never from an index with --offline. rejax's
# gymnax < 1 always goes to a folder of its own, first on rejax's path; without it rejax's rows are skipped.
set -euo pipefail
export DEVICE_RUN_STARTED=${DEVICE_RUN_STARTED:-$(date +%s)}  # device_run.py counts the budget from here
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
say() { echo "[device_run] $*" >&2; }
offline=0 shell= shelled=0
args=("$@")
for ((i = 0; i < ${#args[@]}; i++)); do
  case ${args[i]} in
    --offline) offline=1 ;;
    --shell)
      if ((shelled)); then say "--shell given twice: give one command (join several with ;)"; exit 2; fi
      if ((i + 1 >= ${#args[@]})) || [[ -z ${args[i + 1]} || ${args[i + 1]} == -* ]]; then
        say "--shell needs a command as one argument, e.g. --shell 'python benchmarks/rollout_sps.py --num-envs 1024'"
        exit 2
      fi
      shell=${args[i + 1]} shelled=1 i=$((i + 1)) ;;
  esac
done
if ((shelled)); then  # with --shell the rows' flags mean nothing: refuse them rather than drop them
  for ((i = 0; i < ${#args[@]}; i++)); do
    case ${args[i]} in
      --offline) ;;
      --shell) i=$((i + 1)) ;;
      *) say "${args[i]}: with --shell only --offline is taken (quote the command: --shell 'python ...')"; exit 2 ;;
    esac
  done
fi

if [[ -n ${PYTHON:-} ]]; then
  python=$PYTHON
elif [[ -x $root/.venv/bin/python ]]; then
  python=$root/.venv/bin/python
else
  python=python3
fi
if ! resolved=$(command -v -- "$python"); then
  say "PYTHON=$python: no such program; set PYTHON to a Python that has JAX, e.g. PYTHON=.venv/bin/python"
  exit 1
fi
python=$(cd "$(dirname "$resolved")" && pwd)/$(basename "$resolved")  # a full path: a wrapper named python may call it
if ! JAX_PLATFORMS=cpu "$python" -c 'import jax' >/dev/null 2>&1; then
  say "$python cannot import jax (PYTHONPATH=${PYTHONPATH:-}): set PYTHON to a Python that has JAX," \
    "e.g. PYTHON=.venv/bin/python after python3 -m venv .venv && .venv/bin/pip install -e ."
  exit 1
fi
pyver=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
wheels=${WHEELS:-$root/.whl}
sites=${DEVICE_SITE:-$root/.device-site}/python$pyver
index=${INDEX_URL:-}
if [[ -z $index && -d /opt/pypi/simple ]]; then index=file:///opt/pypi/simple; fi

append() { local path=$1 dir; shift; for dir; do path=${path:+$path:}$dir; done; echo "$path"; }
packages() { PYTHONPATH=$1 "$python" benchmarks/device_packages.py "${@:2}"; }  # PATH COMMAND ARGS...

# install GROUP: benchmarks/device_requirements/GROUP.txt into $sites/GROUP, once per list and way of installing (a
# stamp holds both: a folder installed without bytecode before is installed again); from the wheels if they cover
# the group, else the index.
stamp() { cat "$1"; echo "# installed with bytecode"; }
install() {
  local group=$1 list=benchmarks/device_requirements/$1.txt target=$sites/$1 origin
  local from=(--isolated --no-index --find-links "$wheels") config=(env PIP_CONFIG_FILE=/dev/null)
  if [[ -f $target/.installed ]] && cmp -s <(stamp "$list") "$target/.installed"; then return 0; fi
  if packages "" wheels "$wheels" "$group" >/dev/null; then
    origin="the wheels in $wheels"
  elif ((offline)); then
    say "$group: $wheels lacks $(packages "" wheels "$wheels" "$group" | tr '\n' ' ')and --offline: not installed"
    return 1
  elif [[ -n $index ]]; then  # the chosen index alone: no find-links, extra index or constraints from pip's settings
    origin="the index $index" from=(--isolated --index-url "$index")
  else
    origin="pip's own index" from=() config=()
  fi
  rm -rf "$target" && mkdir -p "$target"
  # compiled to bytecode as pip does by default: a process that finds no .pyc compiles every module it imports, and a
  # machine may not write them (PYTHONDONTWRITEBYTECODE), which put seconds into each command's start
  if "${config[@]}" "$python" -m pip install -q --no-deps --only-binary=:all: \
      --disable-pip-version-check --target "$target" "${from[@]}" -r "$list" >"$target.log" 2>&1; then
    stamp "$list" >"$target/.installed"
    say "$group: installed from $origin into $target"
  else
    say "$group: could not install from $origin ($(grep -m1 ERROR "$target.log" || tail -1 "$target.log"))"
    rm -rf "$target"
    return 1
  fi
}

# need PATH GROUP...: PATH with the folders of the groups it lacks appended, each installed first (a group that
# cannot be installed is left out: the import check below names what is then missing).
need() {
  local path=$1 group; shift
  for group; do
    if ! packages "$path" missing "$group" >/dev/null && install "$group"; then
      path=$(append "$path" "$sites/$group")
    fi
  done
  echo "$path"
}

machine_path=${PYTHONPATH:-}
rlpar_groups=(machine shared rlpar checkpoint)
if [[ -n $shell ]]; then rlpar_groups+=(test); fi  # the device tests may be the command
rlpar_path=$(need "$(append "$machine_path" "$root")" "${rlpar_groups[@]}")
if ! why=$(packages "$rlpar_path" imports rlpar); then
  say "rlpar's programs do not import with $python: $why (benchmarks/README.md, 'The accelerator run')"
  exit 1
fi

# rejax: its own folder first (gymnax 0.0.9 before any other), then the machine's path and the shared groups.
unset REJAX_PYTHON REJAX_SITE
rejax_path=$(need "$machine_path" machine shared)
if ! packages "$rejax_path" missing rejax >/dev/null && install rejax; then
  rejax_path=$sites/rejax${rejax_path:+:$rejax_path}
fi
if why=$(packages "$rejax_path" imports rejax); then
  export REJAX_PYTHON=$python REJAX_SITE=$rejax_path
elif [[ -x benchmarks/.peers/rejax-venv/bin/python ]]; then
  say "rejax from its venv, benchmarks/.peers/rejax-venv ($python with its packages: $why)"
else
  say "rejax's rows are skipped: $why"
fi

# rlpar's own modules to bytecode as well (git ignores __pycache__), for the same reason
"$python" -m compileall -q -j 0 rlpar agents envs examples benchmarks >/dev/null 2>&1 || true

if ((shelled)); then  # `python` in CMD is the chosen Python (by its full path), whatever PATH holds
  bin=$sites/bin
  mkdir -p "$bin"
  printf '#!/usr/bin/env bash\nexec %q "$@"\n' "$python" >"$bin/python" && chmod +x "$bin/python"
  PATH=$bin:$PATH PYTHONPATH=$rlpar_path exec bash -c "$shell"
fi
PYTHONPATH=$rlpar_path exec "$python" benchmarks/device_run.py "$@"
