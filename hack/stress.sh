#!/usr/bin/env bash
# Run the unit and integration tiers repeatedly while every core is kept busy by another
# process, to show that no test rests on timing luck.
#
#   hack/stress.sh [RUNS] [PYTEST ARGS...]   default: 10 runs of tests/unit tests/integration
#
# Each core gets a busy loop at normal priority (the tests compete with it for the CPU, as
# on a loaded CI machine). Stops at the first failing run and says which; prints the time of
# each run.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
runs=${1:-10}
shift || true
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(tests/unit tests/integration)

hogs=()
cleanup() { [ ${#hogs[@]} -eq 0 ] || kill "${hogs[@]}" 2>/dev/null || true; }
trap cleanup EXIT
for _ in $(seq "$(nproc)"); do
  python3 -c 'while True: pass' &
  hogs+=($!)
done
echo "busy loops on $(nproc) cores: ${hogs[*]}"

cd "$root"
for run in $(seq "$runs"); do
  start=$(date +%s)
  if ! .venv/bin/pytest -q "${args[@]}" >"/tmp/kvpin-stress-$run.log" 2>&1; then
    echo "run $run FAILED after $(($(date +%s) - start)) s; log: /tmp/kvpin-stress-$run.log"
    grep -E "^(FAILED|ERROR)" "/tmp/kvpin-stress-$run.log" || tail -20 "/tmp/kvpin-stress-$run.log"
    exit 1
  fi
  echo "run $run passed in $(($(date +%s) - start)) s: $(tail -1 "/tmp/kvpin-stress-$run.log")"
done
echo "$runs runs in a row passed with every core busy"
