#!/usr/bin/env bash
# Build the real Kubernetes control plane the k8s tests run against: kube-apiserver,
# kube-scheduler, kube-controller-manager and kubectl from k8s.io/kubernetes, kwok from sigs.k8s.io/kwok, helm from
# helm.sh/helm/v3 (renders deploy/helm/xpupool), all through the Go module proxy, plus etcd from
# Debian trixie's etcd-server package (bookworm's 3.4.23 is older than what kube-apiserver 1.3x
# expects). Nothing lands in the repo: binaries go to a cache keyed by version,
#   ${XPUPOOL_K8S_CACHE:-$HOME/.cache/xpupool/k8s}/<key>/bin/
# and only missing binaries are built, so a warm run downloads nothing and takes well under a second.
#
# Usage: tools/k8s/build.sh                 build what is missing, print the binary paths
#        tools/k8s/build.sh --print-bin-dir print the bin dir only (the pytest harness uses this)
#        tools/k8s/build.sh --hami          build only HAMi's scheduler (bench/vs_hami.py), into
#                                           the same bin dir; neither `make test` nor CI runs it
#        tools/k8s/build.sh --hami-check    build HAMi's scheduler and xpupool-hami-check
#                                           (tools/hami-check/main.go compiled inside HAMi's
#                                           module: `make test-hami`), into the same bin dir
set -euo pipefail

K8S_VERSION="${XPUPOOL_K8S_VERSION:-1.36.3}"   # k8s.io/kubernetes v$K8S_VERSION
KWOK_VERSION="${XPUPOOL_KWOK_VERSION:-0.8.0}"  # sigs.k8s.io/kwok v$KWOK_VERSION
HELM_VERSION="${XPUPOOL_HELM_VERSION:-3.22.0}"  # helm.sh/helm/v3 v$HELM_VERSION (outside KEY: see have_helm)
ETCD_SUITE="trixie"                            # Debian suite whose etcd-server we unpack (3.5.16)
DEBIAN_MIRROR="${XPUPOOL_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

KEY="k8s-v${K8S_VERSION}_kwok-v${KWOK_VERSION}_etcd-${ETCD_SUITE}"
CACHE="${XPUPOOL_K8S_CACHE:-$HOME/.cache/xpupool/k8s}"
ROOT="$CACHE/$KEY"
BIN="$ROOT/bin"
SHARE="$ROOT/share"   # non-binary data the harness needs (kwok stages)
# HAMi's scheduler (github.com/Project-HAMi/HAMi, v2.10.0). Its tags are v2.x on a module path
# without /v2, so the only version the module proxy accepts is a pseudo-version of the commit.
HAMI_COMMIT="${XPUPOOL_HAMI_COMMIT:-4707fb02c91c}"
HAMI_TAG="${XPUPOOL_HAMI_TAG:-v2.10.0}"  # what HAMI_COMMIT is; stamped beside the binary, like helm's version

MODE=all
case "${1:-}" in
    --print-bin-dir) echo "$BIN"; exit 0 ;;
    --hami) MODE=hami ;;
    --hami-check) MODE=hami-check ;;
    "") ;;
    *) echo "usage: $0 [--print-bin-dir|--hami|--hami-check]" >&2; exit 2 ;;
esac

export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-buildvcs=false
NICE=(nice -n "${XPUPOOL_K8S_NICE:-10}")
mkdir -p "$BIN"

log() { printf '[k8s-build %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
have() { [[ -x "$BIN/$1" ]]; }

build_kube() {
    # A wrapper module is the only way: k8s.io/kubernetes's go.mod replaces every staging module
    # (k8s.io/api, client-go, ...) with ./staging/src/..., so `go install pkg@v` refuses it. The
    # wrapper pins each of those to its published v0.X.Y tag, read from k8s's own go.mod.
    local wrap="$ROOT/src/kubernetes" staging="0.${K8S_VERSION#1.}"
    local minor ldf="-s -w"
    minor="$(cut -d. -f2 <<<"$K8S_VERSION")"
    rm -rf "$wrap" && mkdir -p "$wrap" && cd "$wrap"
    go mod init xpupool.invalid/k8sbin >/dev/null 2>&1
    log "downloading k8s.io/kubernetes@v$K8S_VERSION"
    local gomod
    gomod="$(go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" |
        python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(d["Error"]) if d.get("Error") else print(d["GoMod"])')"
    local replaces=()
    while read -r mod; do
        replaces+=("-replace=$mod=$mod@v$staging")
    done < <(sed -nE 's#^[[:space:]]*(k8s\.io/[A-Za-z0-9._-]+)[[:space:]]+=>[[:space:]]+\./staging/src/.*#\1#p' "$gomod")
    [[ ${#replaces[@]} -gt 0 ]] || { log "no staging replaces found in $gomod"; exit 1; }
    log "pinning ${#replaces[@]} staging modules to v$staging"
    go mod edit "${replaces[@]}"
    log "resolving dependencies (go get)"
    # kubectl comes from the same module and version rather than from the machine: the image's
    # /usr/bin/kubectl is v1.32 (Google's cloud SDK package, whose apt source these machines
    # cannot reach, so a machine without it could not install it) and four minors from the
    # apiserver is outside kubectl's supported skew; here it costs one more link against
    # packages the two servers already compiled.
    "${NICE[@]}" go get "k8s.io/kubernetes/cmd/kube-apiserver@v$K8S_VERSION" \
        "k8s.io/kubernetes/cmd/kube-scheduler@v$K8S_VERSION" \
        "k8s.io/kubernetes/cmd/kube-controller-manager@v$K8S_VERSION" \
        "k8s.io/kubernetes/cmd/kubectl@v$K8S_VERSION"
    local ver
    for ver in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
        ldf+=" -X $ver.gitVersion=v$K8S_VERSION -X $ver.gitMajor=1 -X $ver.gitMinor=$minor"
    done
    local cmd
    for cmd in kube-apiserver kube-scheduler kube-controller-manager kubectl; do
        have "$cmd" && continue
        log "compiling $cmd"
        "${NICE[@]}" go build -trimpath -ldflags "$ldf" -o "$BIN/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd"
        mv "$BIN/$cmd.tmp" "$BIN/$cmd"
    done
}

build_kwok() {
    # kwok's go.mod has no replace directives, so a plain `go install @version` works.
    log "building sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"
    local tmpbin="$ROOT/src/kwok-bin"
    rm -rf "$tmpbin" && mkdir -p "$tmpbin"
    GOBIN="$tmpbin" "${NICE[@]}" go install -trimpath -ldflags "-s -w" \
        "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION"
    mv "$tmpbin/kwok" "$BIN/kwok"
    stage_kwok
}

stage_kwok() {
    # kwok v0.8.0 has no built-in stages ("no stages found" without --config). Keep the upstream
    # "fast" ones (node-initialize; pod-ready, pod-complete, pod-delete) next to the binaries, as one
    # multi-document file, since GOMODCACHE may be cleaned after the build.
    local src
    src="$(go mod download -json "sigs.k8s.io/kwok@v$KWOK_VERSION" |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')"
    mkdir -p "$SHARE"
    local f out="$SHARE/kwok-stages.yaml.tmp"
    : >"$out"
    for f in node/fast/node-initialize pod/fast/pod-ready pod/fast/pod-complete pod/fast/pod-delete; do
        printf -- '---\n' >>"$out"
        cat "$src/kustomize/stage/$f.yaml" >>"$out"
    done
    mv "$out" "$SHARE/kwok-stages.yaml"
}

build_helm() {
    # helm's go.mod has no replace or exclude directives (checked at v3.21.4 and refused below
    # if a later one grows some), so `go install @version` works in a module of its own. The
    # ldflags are the ones helm's Makefile sets: its version, and the Kubernetes version that
    # `helm template` assumes by default (else 1.20, which a chart's kubeVersion would refuse),
    # taken from the client-go minor its go.mod requires, as the Makefile does.
    log "building helm.sh/helm/v3/cmd/helm@v$HELM_VERSION"
    cd "$ROOT"  # outside build_kube's wrapper module: helm resolves its own requirements
    local gomod
    gomod="$(go mod download -json "helm.sh/helm/v3@v$HELM_VERSION" |
        python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(d["Error"]) if d.get("Error") else print(d["GoMod"])')"
    if grep -qE '^[[:space:]]*(replace|exclude)\b' "$gomod"; then
        log "helm v$HELM_VERSION's go.mod has replace/exclude: go install refuses it; $gomod"
        exit 1
    fi
    local kminor
    kminor="$(sed -nE 's#^[[:space:]]*k8s\.io/client-go v0\.([0-9]+)\..*#\1#p' "$gomod")"
    [[ -n "$kminor" ]] || { log "no k8s.io/client-go requirement in $gomod"; exit 1; }
    local ldf="-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION" pkg
    for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
        ldf+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$kminor"
    done
    local tmpbin="$ROOT/src/helm-bin"
    rm -rf "$tmpbin" && mkdir -p "$tmpbin"
    GOBIN="$tmpbin" "${NICE[@]}" go install -trimpath -ldflags "$ldf" \
        "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION"
    mv "$tmpbin/helm" "$BIN/helm"
    echo "v$HELM_VERSION" >"$BIN/helm.version"
}

# helm is not in KEY (a new helm must not rebuild the control plane): its version is stamped
# beside it, and a different one is rebuilt.
have_helm() { have helm && [[ "$(cat "$BIN/helm.version" 2>/dev/null)" == "v$HELM_VERSION" ]]; }

build_hami() {
    # Two ways to HAMi's source at HAMI_COMMIT, both kept apart from build_kube's wrapper (minimal
    # version selection would mix HAMi's k8s.io requirements with that wrapper's staging pins):
    # - the module proxy, as a pseudo-version in a wrapper module of its own (HAMi's go.mod
    #   replaces ./pkg/api and friends, so `go install @v` refuses it);
    # - a git repository holding the commit, XPUPOOL_HAMI_GIT (some proxies refuse the module:
    #   this one answers 403 "not available" for every HAMi version), archived at HAMI_COMMIT and
    #   built in HAMi's own module with its own go.sum; its dependencies come from the proxy.
    # cgo is on: pkg/device/nvidia imports github.com/NVIDIA/go-nvml (dlopened by device-plugin
    # code paths only, never when the scheduler starts).
    local wrap="$ROOT/src/hami" pkg=github.com/Project-HAMi/HAMi/cmd/scheduler version
    rm -rf "$wrap" && mkdir -p "$wrap" && cd "$wrap"
    log "asking the module proxy for github.com/Project-HAMi/HAMi@$HAMI_COMMIT ($HAMI_TAG)"
    if go mod download -json "github.com/Project-HAMi/HAMi@$HAMI_COMMIT" >"$wrap/proxy.json" 2>&1 &&
        ! grep -q '"Error"' "$wrap/proxy.json"; then
        go mod init xpupool.invalid/hamibin >/dev/null 2>&1
        "${NICE[@]}" go get "$pkg@$HAMI_COMMIT"
        version="$(go list -m -f '{{.Version}}' github.com/Project-HAMi/HAMi)"
    elif [[ -n "${XPUPOOL_HAMI_GIT:-}" ]]; then
        log "the proxy refused it ($(tr -d '\n' <"$wrap/proxy.json" | cut -c1-160)); building" \
            "$HAMI_COMMIT from the git repository $XPUPOOL_HAMI_GIT"
        local full
        full="$(git -C "$XPUPOOL_HAMI_GIT" rev-parse --verify "$HAMI_COMMIT^{commit}")"
        mkdir -p "$wrap/HAMi"
        git -C "$XPUPOOL_HAMI_GIT" archive "$full" | tar -x -C "$wrap/HAMi"
        cd "$wrap/HAMi"
        version="git-$full"
        pkg=./cmd/scheduler
    else
        log "the module proxy refused github.com/Project-HAMi/HAMi@$HAMI_COMMIT:"
        cat "$wrap/proxy.json" >&2
        log "set XPUPOOL_HAMI_GIT to a git clone of github.com/Project-HAMi/HAMi holding $HAMI_COMMIT"
        exit 1
    fi
    log "compiling hami-scheduler ($version)"
    # HAMi's Makefile stamps its version the same way (`hami-scheduler version` prints it).
    local vpkg=github.com/Project-HAMi/HAMi/pkg/version
    local ldf="-s -w -X $vpkg.version=$HAMI_TAG -X $vpkg.revision=$HAMI_COMMIT"
    CGO_ENABLED=1 "${NICE[@]}" go build -trimpath -ldflags "$ldf" -o "$BIN/hami-scheduler.tmp" "$pkg"
    mv "$BIN/hami-scheduler.tmp" "$BIN/hami-scheduler"
    echo "$HAMI_TAG $HAMI_COMMIT $version" >"$BIN/hami-scheduler.version"
}

# HAMi is not in KEY either (a new HAMi must not rebuild the control plane): its tag and
# pseudo-version are stamped beside it, and a different commit is rebuilt.
have_hami() {
    have hami-scheduler && [[ "$(cat "$BIN/hami-scheduler.version" 2>/dev/null)" == "$HAMI_TAG $HAMI_COMMIT "* ]]
}

# xpupool's interop checker (issue 56): our own source, tools/hami-check/main.go, compiled as a
# command of HAMi's module at HAMI_COMMIT so that it imports HAMi's packages (annotation and
# registration decoders, init-container charging, the device plugin's pod lookup) rather than
# copies of them. HAMi's tree comes from the module proxy's zip or from XPUPOOL_HAMI_GIT, as for
# build_hami; the binary is stamped with the commit and the source's hash, and rebuilt when either
# changes.
CHECK_SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/tools/hami-check/main.go"
check_stamp() { echo "$HAMI_TAG $HAMI_COMMIT $(sha256sum <"$CHECK_SRC" | cut -c1-16)"; }
have_hami_check() {
    have xpupool-hami-check && [[ "$(cat "$BIN/xpupool-hami-check.version" 2>/dev/null)" == "$(check_stamp)" ]]
}

build_hami_check() {
    local wrap="$ROOT/src/hami-check" tree
    rm -rf "$wrap" && mkdir -p "$wrap"
    if [[ -n "${XPUPOOL_HAMI_GIT:-}" ]]; then
        local full
        full="$(git -C "$XPUPOOL_HAMI_GIT" rev-parse --verify "$HAMI_COMMIT^{commit}")"
        log "archiving HAMi $full from $XPUPOOL_HAMI_GIT for xpupool-hami-check"
        tree="$wrap/HAMi" && mkdir -p "$tree"
        git -C "$XPUPOOL_HAMI_GIT" archive "$full" | tar -x -C "$tree"
    else
        local dir
        dir="$(cd "$wrap" && go mod download -json "github.com/Project-HAMi/HAMi@$HAMI_COMMIT" |
            python3 -c 'import json,sys; d=json.load(sys.stdin); sys.exit(d["Error"]) if d.get("Error") else print(d["Dir"])')" || {
            log "the module proxy refused HAMi@$HAMI_COMMIT; set XPUPOOL_HAMI_GIT to a clone holding it"
            exit 1
        }
        tree="$wrap/HAMi" && cp -r "$dir" "$tree" && chmod -R u+w "$tree"
    fi
    mkdir -p "$tree/cmd/xpupool-check"
    cp "$CHECK_SRC" "$tree/cmd/xpupool-check/main.go"
    log "compiling xpupool-hami-check inside HAMi's module"
    (cd "$tree" && CGO_ENABLED=1 "${NICE[@]}" go build -trimpath -ldflags "-s -w" \
        -o "$BIN/xpupool-hami-check.tmp" ./cmd/xpupool-check)
    mv "$BIN/xpupool-hami-check.tmp" "$BIN/xpupool-hami-check"
    check_stamp >"$BIN/xpupool-hami-check.version"
    rm -rf "$wrap"
}

fetch_etcd() {
    # apt-get download from a throwaway sources list: nothing is installed, so no init script or
    # systemd unit starts a stray etcd on 2379, and the host's apt state is left alone.
    log "fetching etcd-server from Debian $ETCD_SUITE"
    local apt="$ROOT/src/apt"
    rm -rf "$apt" && mkdir -p "$apt/lists/partial" "$apt/archives/partial" "$apt/dl" "$apt/parts"
    cat >"$apt/sources.list" <<EOF
deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $DEBIAN_MIRROR $ETCD_SUITE main
EOF
    local opts=(-o "Dir::Etc::SourceList=$apt/sources.list" -o "Dir::Etc::SourceParts=$apt/parts"
        -o "Dir::State::Lists=$apt/lists" -o "Dir::Cache::Archives=$apt/archives"
        -o "Dir::Cache::pkgcache=" -o "Dir::Cache::srcpkgcache=" -o "APT::Sandbox::User=root"
        -o "Debug::NoLocking=1")
    apt-get "${opts[@]}" -qq update
    (cd "$apt/dl" && apt-get "${opts[@]}" -qq download etcd-server)
    local deb
    deb="$(ls "$apt"/dl/etcd-server_*.deb)"
    dpkg-deb -x "$deb" "$apt/x"
    cp "$apt/x/usr/bin/etcd" "$BIN/etcd.tmp"
    mv "$BIN/etcd.tmp" "$BIN/etcd"
    basename "$deb" >"$BIN/etcd.deb-version"
    rm -rf "$apt"
}

if [[ "$MODE" == hami ]]; then
    have_hami || build_hami
    echo "$BIN/hami-scheduler"
    exit 0
fi
if [[ "$MODE" == hami-check ]]; then
    have_hami || build_hami
    have_hami_check || build_hami_check
    echo "$BIN/hami-scheduler"
    echo "$BIN/xpupool-hami-check"
    exit 0
fi

# kube-controller-manager joined later: a cache built before it gains only that binary (the
# loop in build_kube skips what exists), not a rebuild of the others.
have kube-apiserver && have kube-scheduler && have kube-controller-manager && have kubectl ||
    build_kube
have kwok || build_kwok
[[ -s "$SHARE/kwok-stages.yaml" ]] || stage_kwok
have etcd || fetch_etcd
have_helm || build_helm

for b in kube-apiserver kube-scheduler kube-controller-manager kubectl kwok etcd helm; do
    echo "$BIN/$b"
done
echo "$SHARE/kwok-stages.yaml"
