#!/usr/bin/env bash
# Builds the pinned tools into bin/: the control-plane binaries that the
# tests run (kube-proxy and the kubelet among them, from the same
# Kubernetes module), containerd with its runc shim and ctr, the CNI plugins
# of the real nodes (bin/cni/),
# kwok's stage files, cert-manager-local and cert-manager's CRDs, the helm
# CLI (make demo installs the charts with it), promtool and prometheus
# (the charts' alerting rules and the monitoring test), the Prometheus
# Operator's CRDs, golangci-lint and actionlint. Each group is rebuilt only when its module's
# go.mod, go.sum or Go sources, or the way it is built, change (or an output
# is missing); a stamp in bin/.stamps records what was built.
#
# Usage: tests/tools/build.sh [GROUP...]   (groups: kube kubeproxy kubelet
# containerd cni etcd kwok certmanager helm prometheus promcrds lint actionlint bench; no group means
# all but bench)
set -euo pipefail
# Each tool module builds on its own: the repository's go.work (the
# workspace of fastover's own modules) does not list them.
export GOWORK=off

root=$(cd "$(dirname "$0")/../.." && pwd)
tools="$root/tests/tools"
bin="${FASTOVER_BIN:-$root/bin}"
mkdir -p "$bin/.stamps"

kube_version=v1.37.2
kube_ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=$kube_version \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=37 \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/component-base/version.buildDate=2026-01-01T00:00:00Z"

containerd_version=v2.4.2
containerd_pkg=github.com/containerd/containerd/v2
containerd_ldflags="-s -w -X $containerd_pkg/version.Version=$containerd_version -X $containerd_pkg/version.Package=$containerd_pkg -X $containerd_pkg/version.Revision=module-proxy"
cni_version=v1.10.0
cni_ldflags="-s -w -X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=$cni_version"
helm_version=v4.3.2
helm_ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$helm_version -X helm.sh/helm/v4/internal/version.gitTreeState=clean"

# The Prometheus Operator's CRDs of the kinds the charts' monitoring renders,
# plain YAML from its module (downloaded, nothing built).
promop_version=v0.85.0
promop_crds="monitoring.coreos.com_podmonitors.yaml monitoring.coreos.com_prometheusrules.yaml"

# The way each group is built, part of its stamp.
kwok_stages="node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml"
cm_crds="cert-manager.io_certificaterequests.yaml cert-manager.io_certificates.yaml cert-manager.io_clusterissuers.yaml cert-manager.io_issuers.yaml acme.cert-manager.io_challenges.yaml acme.cert-manager.io_orders.yaml"
declare -A recipe=(
	[kube]="$kube_ldflags"
	[kubeproxy]="$kube_ldflags"
	[kubelet]="$kube_ldflags"
	[containerd]="$containerd_ldflags no_btrfs urfave_cli_no_docs; shim no_grpc urfave_cli_no_docs"
	[cni]="$cni_ldflags bridge loopback host-local"
	[etcd]="-s -w"
	[kwok]="-s -w $kwok_stages"
	[certmanager]="-s -w ./cmd/cert-manager-local $cm_crds"
	[helm]="$helm_ldflags"
	[lint]=""
	[actionlint]=""
	[bench]=""
	[prometheus]="-s -w remove_all_sd"
	[promcrds]="$promop_version $promop_crds"
)

# The module directory under tests/tools of a group that shares another's:
# kube-proxy is built from the kube module, the one Kubernetes pin.
declare -A module=(
	[kubeproxy]=kube
	[kubelet]=kube
)

# stamp GROUP: a digest of what decides the group's build (a module with
# Go code of its own, like certmanager's, includes its sources).
stamp() {
	local dir="$tools/${module[$1]:-$1}"
	{
		# A group with no module of its own (promcrds) is its recipe. The
		# order is the stamps' of the builds already made: keep it.
		[[ ! -d "$dir" ]] || cat "$dir/go.mod" "$dir/go.sum"
		echo "${recipe[$1]}"
		[[ ! -d "$dir" ]] || find "$dir" -name '*.go' -print0 | sort -z | xargs -0 -r cat
	} | sha256sum | cut -d' ' -f1
}

# fresh GROUP OUTPUT...: true if the stamp matches and every output exists.
fresh() {
	local group=$1
	shift
	[[ -f "$bin/.stamps/$group" && "$(cat "$bin/.stamps/$group")" == "$(stamp "$group")" ]] || return 1
	local out
	for out in "$@"; do
		[[ -e "$bin/$out" ]] || return 1
	done
}

done_group() {
	stamp "$1" >"$bin/.stamps/$1"
}

# copy_files SRC DST FILE...: copies each FILE (a path under SRC, a module's
# directory) into $bin/DST, made afresh, writable (the module cache's are not).
copy_files() {
	local src=$1 dst=$2 f
	shift 2
	rm -rf "${bin:?}/$dst"
	mkdir -p "$bin/$dst"
	for f in "$@"; do
		cp "$src/$f" "$bin/$dst/"
	done
	chmod u+w "$bin/$dst"/*
}

step() {
	printf '==> %s\n' "$*"
}

build_kube() {
	if fresh kube kube-apiserver kube-controller-manager kube-scheduler; then
		step "kube-apiserver, kube-controller-manager, kube-scheduler $kube_version: up to date"
		return
	fi
	step "building kube-apiserver, kube-controller-manager, kube-scheduler $kube_version (a cold build takes about 11 minutes on 2 cores)"
	(cd "$tools/kube" && go build -o "$bin/" -ldflags "$kube_ldflags" \
		k8s.io/kubernetes/cmd/kube-apiserver \
		k8s.io/kubernetes/cmd/kube-controller-manager \
		k8s.io/kubernetes/cmd/kube-scheduler)
	done_group kube
}

# kube-proxy, from the same module and flags as kube-apiserver: the tests
# run it in a network namespace of their own (internal/netns) in nftables
# mode. A group of its own, so that it is built only where it is asked for
# and a kube-apiserver that is up to date stays so.
build_kubeproxy() {
	if fresh kubeproxy kube-proxy; then
		step "kube-proxy $kube_version: up to date"
		return
	fi
	step "building kube-proxy $kube_version (about a minute after kube-apiserver, whose packages it shares; 20 minutes cold on its own on a busy 2-core machine)"
	(cd "$tools/kube" && go build -o "$bin/" -ldflags "${recipe[kubeproxy]}" k8s.io/kubernetes/cmd/kube-proxy)
	done_group kubeproxy
}

# The kubelet of the real nodes, from the same module and flags as
# kube-apiserver (about 4 minutes cold after it, 20 s warm).
build_kubelet() {
	if fresh kubelet kubelet; then
		step "kubelet $kube_version: up to date"
		return
	fi
	step "building kubelet $kube_version (about four minutes cold after kube-apiserver, whose packages it mostly shares)"
	(cd "$tools/kube" && go build -o "$bin/" -ldflags "${recipe[kubelet]}" k8s.io/kubernetes/cmd/kubelet)
	done_group kubelet
}

# containerd, its runc shim and ctr, static (CGO_ENABLED=0), as the real
# nodes run them; runc itself is Debian's (tests/tools/runc.sh).
build_containerd() {
	if fresh containerd containerd containerd-shim-runc-v2 ctr; then
		step "containerd $containerd_version, its shim and ctr: up to date"
		return
	fi
	step "building containerd $containerd_version, containerd-shim-runc-v2 and ctr (about 70 s cold)"
	(cd "$tools/containerd" && export CGO_ENABLED=0 &&
		go build -o "$bin/" -tags 'no_btrfs urfave_cli_no_docs' -ldflags "$containerd_ldflags" \
			$containerd_pkg/cmd/containerd $containerd_pkg/cmd/ctr &&
		go build -o "$bin/" -tags 'no_grpc urfave_cli_no_docs' -ldflags "$containerd_ldflags" \
			$containerd_pkg/cmd/containerd-shim-runc-v2)
	done_group containerd
}

# The CNI plugins a real node's pods are wired with: bridge, loopback and
# host-local, into bin/cni/ (the directory containerd's CRI plugin reads).
build_cni() {
	if fresh cni cni/bridge cni/loopback cni/host-local; then
		step "CNI plugins $cni_version (bridge, loopback, host-local): up to date"
		return
	fi
	step "building the CNI plugins $cni_version: bridge, loopback, host-local (about a minute cold)"
	mkdir -p "$bin/cni"
	(cd "$tools/cni" && CGO_ENABLED=0 go build -o "$bin/cni/" -ldflags "$cni_ldflags" \
		github.com/containernetworking/plugins/plugins/main/bridge \
		github.com/containernetworking/plugins/plugins/main/loopback \
		github.com/containernetworking/plugins/plugins/ipam/host-local)
	done_group cni
}

# The helm CLI, at the version tests/charts uses as an SDK: make demo runs
# `helm install` of charts/ onto its real nodes, as a user does.
build_helm() {
	if fresh helm helm; then
		step "helm $helm_version: up to date"
		return
	fi
	step "building helm $helm_version (about two minutes cold)"
	(cd "$tools/helm" && CGO_ENABLED=0 go build -o "$bin/helm" -ldflags "$helm_ldflags" helm.sh/helm/v4/cmd/helm)
	done_group helm
}

build_etcd() {
	if fresh etcd etcd; then
		step "etcd: up to date"
		return
	fi
	step "building etcd (about a minute cold)"
	(cd "$tools/etcd" && go build -o "$bin/etcd" -ldflags "${recipe[etcd]}" go.etcd.io/etcd/server/v3)
	done_group etcd
}

build_kwok() {
	if fresh kwok kwok kwok-stages; then
		step "kwok and its stage files: up to date"
		return
	fi
	step "building kwok (about two minutes cold)"
	(cd "$tools/kwok" && go build -o "$bin/kwok" -ldflags "-s -w" sigs.k8s.io/kwok/cmd/kwok)
	# The stages a kubelet's work needs: initialise a node and keep its
	# Lease renewed; make pods ready, complete them, finish their deletion.
	local mod
	mod=$(cd "$tools/kwok" && go list -m -f '{{.Dir}}' sigs.k8s.io/kwok)
	copy_files "$mod/kustomize/stage" kwok-stages $kwok_stages
	done_group kwok
}

build_certmanager() {
	if fresh certmanager cert-manager-local cert-manager-crds; then
		step "cert-manager-local and cert-manager's CRDs: up to date"
		return
	fi
	step "building cert-manager-local (about four minutes cold)"
	(cd "$tools/certmanager" && go build -o "$bin/cert-manager-local" -ldflags "-s -w" ./cmd/cert-manager-local)
	# cert-manager's CRDs, plain YAML (controller-gen output, no templating).
	local mod
	mod=$(cd "$tools/certmanager" && go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)
	copy_files "$mod/deploy/crds" cert-manager-crds $cm_crds
	done_group certmanager
}

build_lint() {
	if fresh lint golangci-lint; then
		step "golangci-lint: up to date"
		return
	fi
	step "building golangci-lint (about two minutes cold)"
	(cd "$tools/lint" && go build -o "$bin/golangci-lint" github.com/golangci/golangci-lint/v2/cmd/golangci-lint)
	done_group lint
}

build_actionlint() {
	if fresh actionlint actionlint; then
		step "actionlint: up to date"
		return
	fi
	step "building actionlint"
	(cd "$tools/actionlint" && go build -o "$bin/actionlint" github.com/rhysd/actionlint/cmd/actionlint)
	done_group actionlint
}

# promtool (the charts' alerting rules are tested with `promtool test
# rules`) and the Prometheus server of the monitoring e2e test, in one build
# so that they share their packages. remove_all_sd leaves out the service
# discoveries of the clouds (their SDKs are most of a cold build); the test
# scrapes static targets.
build_prometheus() {
	if fresh prometheus promtool prometheus; then
		step "promtool and prometheus: up to date"
		return
	fi
	step "building promtool and prometheus (about six minutes cold)"
	(cd "$tools/prometheus" && CGO_ENABLED=0 go build -o "$bin/" -tags remove_all_sd -ldflags "-s -w" \
		github.com/prometheus/prometheus/cmd/promtool \
		github.com/prometheus/prometheus/cmd/prometheus)
	done_group prometheus
}

# The Prometheus Operator's CRDs for PodMonitor and PrometheusRule, which
# TestInstall installs so that the API server validates
# overlays/monitoring's objects (the module is downloaded and checked
# against the checksum database, not built).
build_promcrds() {
	if fresh promcrds prometheus-operator-crds; then
		step "the Prometheus Operator's CRDs $promop_version: up to date"
		return
	fi
	step "downloading the Prometheus Operator's CRDs $promop_version"
	local mod tmp
	tmp=$(mktemp -d)
	mod=$(cd "$tmp" && go mod download -json "github.com/prometheus-operator/prometheus-operator@$promop_version" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	rm -rf "$tmp"
	[[ -n "$mod" ]] || { echo "go mod download of the Prometheus Operator $promop_version failed" >&2; exit 1; }
	copy_files "$mod/example/prometheus-operator-crd" prometheus-operator-crds $promop_crds
	done_group promcrds
}

build_bench() {
	if fresh bench benchstat; then
		step "benchstat: up to date"
		return
	fi
	step "building benchstat"
	(cd "$tools/bench" && go build -o "$bin/benchstat" golang.org/x/perf/cmd/benchstat)
	done_group bench
}

groups=("$@")
[[ ${#groups[@]} -gt 0 ]] || groups=(etcd kwok kube kubeproxy kubelet containerd cni certmanager helm prometheus promcrds lint actionlint)
for g in "${groups[@]}"; do
	case "$g" in
	kube | kubeproxy | kubelet | containerd | cni | etcd | kwok | certmanager | helm | prometheus | promcrds | lint | actionlint | bench)
		start=$SECONDS
		"build_$g"
		# A build that ran says how long it took (make test's time table
		# counts the tools as one phase).
		if ((SECONDS - start > 1)); then step "$g: $((SECONDS - start)) s"; fi
		;;
	*)
		echo "unknown tool group: $g (want kube, kubeproxy, kubelet, containerd, cni, etcd, kwok, certmanager, helm, prometheus, promcrds, lint, actionlint or bench)" >&2
		exit 2
		;;
	esac
done
