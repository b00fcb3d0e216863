#!/usr/bin/env bash
# Build (once) and locate the binaries of the test control plane: kube-apiserver,
# kube-controller-manager, kube-scheduler, kubectl and etcd from k8s.io/kubernetes, kwok, and
# helm and promtool (for the chart checks).
#
#   hack/controlplane.sh build   build what is missing, print timings and the binary folder
#   hack/controlplane.sh bindir  print the binary folder (exit 1 if it is incomplete)
#   hack/controlplane.sh up      start a control plane by hand and print its kubeconfig
#
# Only the Go toolchain and the Go module proxy are used. The binaries are cached outside the
# repository in $KVPIN_CACHE (default ~/.cache/kvpin), keyed by version, so only the first
# build is slow. go.mod files are generated, not committed: the replace block of every staging
# module comes from k8s.io/kubernetes's own go.mod, so a version bump is one line in
# hack/controlplane.env.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=controlplane.env
source "$here/controlplane.env"

cache=${KVPIN_CACHE:-$HOME/.cache/kvpin}
root="$cache/controlplane/k8s-$KUBERNETES_VERSION-kwok-$KWOK_VERSION"
bindir="$root/bin"
stages="$root/kwok-stages"  # KWOK's default Stage documents, from its module
binaries=(kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok helm promtool)

log() { printf '[controlplane] %s\n' "$*" >&2; }

complete() {
  local b
  for b in "${binaries[@]}"; do [ -x "$bindir/$b" ] || return 1; done
  [ -f "$stages/.complete" ]
}

# Write a wrapper module that requires k8s.io/kubernetes and pins every staging module
# (required at v0.0.0 upstream) to its published v0.X.Y.
kubernetes_module() {
  local dir=$1 minor=${KUBERNETES_VERSION#v1.} gomod staging
  staging="v0.${minor}"
  mkdir -p "$dir"
  gomod=$(cd "$dir" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" \
    | sed -n 's/^\s*"GoMod": "\(.*\)",$/\1/p')
  {
    echo "module kvpin.dev/controlplane"
    echo
    grep -E '^go ' "$gomod"
    echo
    echo "require k8s.io/kubernetes $KUBERNETES_VERSION"
    echo
    echo "replace ("
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/.*#\t\1 => \1 '"$staging"'#p' "$gomod"
    echo ")"
  } >"$dir/go.mod"
  cat >"$dir/tools.go" <<'EOF'
//go:build tools

// Package tools pins the main packages this module builds.
package tools

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
EOF
  (cd "$dir" && GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>&1 || true)
  (cd "$dir" && GOFLAGS=-mod=mod go get "k8s.io/kubernetes@$KUBERNETES_VERSION" >/dev/null)
}

kwok_module() {
  local dir=$1
  mkdir -p "$dir"
  cat >"$dir/go.mod" <<EOF
module kvpin.dev/kwok

go 1.26.0
EOF
  (cd "$dir" && GOFLAGS=-mod=mod go get "sigs.k8s.io/kwok@$KWOK_VERSION" >/dev/null)
}

build() {
  if complete; then
    log "cached: $bindir"
    echo "$bindir"
    return
  fi
  local src="$cache/controlplane/src-$KUBERNETES_VERSION-$KWOK_VERSION" start t0 minor
  minor=${KUBERNETES_VERSION#v1.}; minor=${minor%%.*}
  mkdir -p "$bindir"
  start=$SECONDS
  local stamp="k8s.io/component-base/version"
  local ldflags="-s -w -X $stamp.gitVersion=$KUBERNETES_VERSION -X $stamp.gitMajor=1 -X $stamp.gitMinor=$minor -X $stamp.gitTreeState=clean"
  export CGO_ENABLED=0 GOFLAGS=-mod=mod

  log "generating the wrapper module for k8s.io/kubernetes $KUBERNETES_VERSION"
  kubernetes_module "$src/kubernetes"
  local pkg name
  for pkg in k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl go.etcd.io/etcd/server/v3; do
    name=${pkg##*/}; [ "$name" = v3 ] && name=etcd
    [ -x "$bindir/$name" ] && continue
    t0=$SECONDS
    log "building $name ..."
    (cd "$src/kubernetes" && go build -trimpath -pgo=off -ldflags "$ldflags" -o "$bindir/$name.tmp" "$pkg")
    mv "$bindir/$name.tmp" "$bindir/$name"
    log "built $name in $((SECONDS - t0))s"
  done

  if [ ! -x "$bindir/kwok" ]; then
    t0=$SECONDS
    log "building kwok $KWOK_VERSION ..."
    kwok_module "$src/kwok"
    (cd "$src/kwok" && go build -trimpath -ldflags "-s -w" -o "$bindir/kwok.tmp" sigs.k8s.io/kwok/cmd/kwok)
    mv "$bindir/kwok.tmp" "$bindir/kwok"
    log "built kwok in $((SECONDS - t0))s"
  fi
  if [ ! -x "$bindir/helm" ]; then
    t0=$SECONDS
    log "building helm $HELM_VERSION ..."
    (cd "$src" && GOBIN="$bindir" go install -trimpath -ldflags "-s -w" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION")
    log "built helm in $((SECONDS - t0))s"
  fi
  if [ ! -x "$bindir/promtool" ]; then
    t0=$SECONDS
    log "building promtool (prometheus $PROMETHEUS_VERSION) ..."
    mkdir -p "$src/promtool"
    printf 'module kvpin.dev/promtool\n\ngo 1.26.0\n' >"$src/promtool/go.mod"
    (cd "$src/promtool" && go get "github.com/prometheus/prometheus@$PROMETHEUS_VERSION" >/dev/null \
      && go build -trimpath -ldflags "-s -w" -o "$bindir/promtool.tmp" \
        github.com/prometheus/prometheus/cmd/promtool)
    mv "$bindir/promtool.tmp" "$bindir/promtool"
    log "built promtool in $((SECONDS - t0))s"
  fi
  if [ ! -f "$stages/.complete" ]; then
    [ -f "$src/kwok/go.mod" ] || kwok_module "$src/kwok"
    local kwokdir stage
    kwokdir=$(cd "$src/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
    rm -rf "$stages" && mkdir -p "$stages"
    for stage in node/fast node/heartbeat-with-lease pod/fast; do
      cp "$kwokdir/kustomize/stage/$stage"/*.yaml "$stages/"
    done
    rm -f "$stages/kustomization.yaml"
    touch "$stages/.complete"
  fi
  log "control plane binaries ready in $((SECONDS - start))s: $bindir"
  echo "$bindir"
}

case "${1:-}" in
  build) build ;;
  bindir) complete && echo "$bindir" ;;
  up)
    complete || build >/dev/null
    python=${PYTHON:-$(cd "$here/.." && [ -x .venv/bin/python ] && echo "$PWD/.venv/bin/python" || echo python3)}
    exec "$python" "$here/../tests/controlplane/cluster.py" --bindir "$bindir"
    ;;
  *) sed -n '2,13p' "$0" >&2; exit 2 ;;
esac
