#!/usr/bin/env bash
# Mutation testing of the pure core with mutmut: plant one small bug at a time (a flipped
# comparison, an off-by-one, a dropped argument) and check that some unit test fails.
#
#   hack/mutation.sh [MODULE...]   mutate these modules afresh (default: every module in
#                                  MODULES), print the per-module score table
#   hack/mutation.sh --report      print the table of the last run again
#
# MODULE is a path in the repository (router/ring.py). The run happens in a staging copy,
# build/mutation, laid out the way the package installs (src/kvpin/router/ring.py), because
# mutmut names mutants by file path and the tests import kvpin.router.ring. Only the unit and
# fuzz tiers run against mutants: they are fast and in-process (a mutant in a subprocess
# would be invisible anyway). Survivors can be inspected there with
#   (cd build/mutation && ../../.venv/bin/mutmut show NAME)
# Not part of .ci/run: a full run takes about 40 minutes on two cores (see docs/testing.md).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
stage="$root/build/mutation"
venv="$root/.venv/bin"

MODULES=(
  router/ring.py router/keys.py router/breaks.py router/usage.py router/parsing.py
  router/headers.py router/placement.py router/holdings.py
  router/estimates.py router/loads.py router/outliers.py router/bodies.py router/auth.py
  router/warmup.py
  operator/quantity.py operator/gpus.py operator/models.py operator/vram.py
  operator/engines.py operator/desired.py
  operator/spec.py operator/status.py operator/plan.py
  sim/cache.py sim/tokens.py sim/engine.py
)

report() {
  (cd "$stage" && "$venv/python" "$root/hack/mutation_report.py" "$@")
}

if [ "${1:-}" = "--report" ]; then
  shift
  report "$@"
  exit
fi
[ $# -gt 0 ] && MODULES=("$@")

[ -x "$venv/mutmut" ] || "$venv/pip" install --quiet -e "$root[mutation]"

# Stage: the package as it installs, plus the tests. The modules asked for are mutated and
# tested afresh (tests may have changed since); others keep their last results for --report.
data=(tests crds helm examples hack .github kind-config.yaml README.md)
rm -rf "$stage/src" "${data[@]/#/$stage/}"
mkdir -p "$stage/src"
cp -p -r "$root/kvpin" "$stage/src/kvpin"
for part in router operator sim bench; do cp -p -r "$root/$part" "$stage/src/kvpin/$part"; done
for d in "${data[@]}"; do cp -p -r "$root/$d" "$stage/$d"; done
find "$stage" -name __pycache__ -prune -exec rm -rf {} +

only=""
for m in "${MODULES[@]}"; do only+="\"src/kvpin/$m\", "; done
sed -e "s|@ONLY@|${only%, }|" "$root/hack/mutation.toml" >"$stage/pyproject.toml"

cd "$stage"
for m in "${MODULES[@]}"; do rm -f "mutants/src/kvpin/$m" "mutants/src/kvpin/$m.meta"; done
# Which tests cover which function is collected again too: mutmut's incremental collection
# runs only the tests it has not seen, and then finds no test for code the old ones cover.
rm -f mutants/mutmut-stats.json
# mutmut reuses a file's mutants while its source is older than them (cp -p keeps the
# sources' times); files it only copied last time, unmutated, must be mutated afresh.
if [ -d mutants/src ]; then
  find mutants/src -name '*.py' -exec sh -c '[ -e "$1.meta" ] || rm "$1"' _ {} \;
fi
"$venv/mutmut" run --max-children "${KVPIN_MUTATION_JOBS:-2}" >mutmut.log 2>&1 || {
  tail -40 mutmut.log >&2
  exit 1
}
report "${MODULES[@]}"
