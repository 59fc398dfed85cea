# fastover: `make test` is what CI runs; `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c

BIN := $(CURDIR)/bin
export FASTOVER_BIN := $(BIN)

# fastover's Go modules (go.work makes them one workspace): the leader
# library and its controller-runtime adapter are modules of their own, so
# that their consumers get neither the root module's dependencies nor each
# other's; the root module holds the rest. A pattern like ./... stops at a
# module's border: MODULE_PATTERNS names each.
MODULES := . leader leader/ctrlmanager
MODULE_PATTERNS := $(foreach m,$(MODULES),$(if $(filter .,$(m)),./...,./$(m)/...))

# The packages that need the local control plane (the suites under tests/,
# and internal/cluster, which tests itself on one) and tests/charts run by
# tests/tools/suites.sh: make e2e runs the others, then tests/e2e; make test
# runs them side by side in two phases (make suites): what builds beside
# tests/e2e's untimed tests, then tests/e2e's timed tests (the chaos run's
# LeaseDuration + 1 s), which measure the library, in two halves beside
# tests/charts, nothing heavier than real nodes.
UNIT_PKGS = $(shell go list $(MODULE_PATTERNS) | grep -v -e '/tests/' -e '/internal/cluster$$')

GOTEST_FLAGS ?=
E2E_TIMEOUT ?= 35m
# How many of tests/e2e's parallel tests (those that time nothing, doc.go)
# run at once.
E2E_PARALLEL ?= 3
export TIMES TESTTIME E2E_TIMEOUT E2E_PARALLEL GOTEST_FLAGS

# Where the time of make test goes (internal/testtime): the go test runs of
# e2e and charts-test keep their events in TIMES, make test records each
# phase's wall time there and prints the table at its end; make test-times
# prints it again. The run before is kept in TIMES.last: suites.sh balances
# its halves by its tests' times.
TIMES := $(BIN)/test-times
TESTTIME := $(BIN)/testtime
TEST_PHASES := tools fmt-check vet tidy-check lint cover suites

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z0-9-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

.PHONY: tools
tools: ## build the pinned control-plane binaries (kube-proxy included), the real nodes' kubelet, containerd and CNI plugins, kwok stages, cert-manager, helm, promtool and prometheus, the Prometheus Operator's CRDs, golangci-lint and actionlint into bin/; install nft and iptables (as root, with apt-get) for the network-namespace tests
	@tests/tools/build.sh
	@tests/tools/netfilter.sh

.PHONY: fmt-check
fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [[ -n "$$out" ]]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

.PHONY: vet
vet: ## go vet, in every module
	go vet $(MODULE_PATTERNS)
	cd tests/charts && GOWORK=off go vet ./...

# Every module's go.mod and go.sum are what go mod tidy makes of them, each
# module by itself (tidy reads no go.work).
.PHONY: tidy-check
tidy-check: ## go mod tidy -diff in every module (the root, leader, leader/ctrlmanager, tests/charts)
	@fail=0; for m in $(MODULES) tests/charts; do \
		if ! out=$$(cd $$m && GOWORK=off go mod tidy -diff 2>&1); then echo "$$m: go mod tidy would change:"; echo "$$out"; fail=1; fi; \
	done; if [[ $$fail == 0 ]]; then echo "go mod tidy: clean in $(MODULES) tests/charts"; fi; exit $$fail

# actionlint checks the GitHub workflows (.github/workflows), with
# shellcheck on their scripts when shellcheck is on the PATH; it runs first,
# it takes seconds.
# The libraries stay light for the projects that import them: no
# controller-runtime under the rule, the leader library, retrofit or the
# kubectl plugin (webhook/ is the admission transport on controller-runtime);
# and the leader module, by itself, requires nothing but client-go, api,
# apimachinery, the Prometheus client and what those require
# (tests/modules checks what a consumer gets).
LIGHT_PKGS := ./toleration ./leader ./retrofit ./cmd/kubectl-fastover ./cmd/fastover-run
LEADER_MODULE_FORBIDDEN := sigs.k8s.io/controller-runtime github.com/google/go-containerregistry sigs.k8s.io/kustomize/ github.com/spf13/cobra k8s.io/cli-runtime github.com/fastover/fastover[[:space:]]

.PHONY: deps-check
deps-check: ## no controller-runtime in the dependencies of toleration/, leader/, retrofit/, cmd/kubectl-fastover, cmd/fastover-run; none of the root module's dependencies in the leader module's build list
	@fail=0; for p in $(LIGHT_PKGS); do \
		if go list -deps $$p | grep -q '^sigs.k8s.io/controller-runtime'; then \
			echo "$$p imports controller-runtime:"; go list -deps $$p | grep '^sigs.k8s.io/controller-runtime' | sed 's/^/  /'; fail=1; fi; \
	done; \
	mods=$$(cd leader && GOWORK=off go list -m all); \
	for m in $(LEADER_MODULE_FORBIDDEN); do \
		if grep -q "^$$m" <<<"$$mods"; then echo "the leader module's build list has $$(grep "^$$m" <<<"$$mods" | head -1)"; fail=1; fi; \
	done; if [[ $$fail == 0 ]]; then echo "no controller-runtime under $(LIGHT_PKGS); the leader module's build list has none of the root module's dependencies"; fi; exit $$fail

.PHONY: lint
lint: deps-check ## golangci-lint and actionlint on the workflows (pinned in tests/tools/lint, tests/tools/actionlint), deps-check
	@tests/tools/build.sh lint actionlint
	$(BIN)/actionlint
	for m in $(MODULES); do (cd $$m && $(BIN)/golangci-lint run ./...); done
	cd tests/charts && GOWORK=off $(BIN)/golangci-lint run ./...
	@echo "==> helm lint of charts/ (helm's Go SDK, tests/charts)"
	cd tests/charts && GOWORK=off go test -count=1 -run '^TestLint$$' .

.PHONY: unit
unit: ## unit tests (no control plane)
	@pkgs="$(UNIT_PKGS)"; if [[ -z "$$pkgs" ]]; then echo "no unit-test packages yet"; else go test $(GOTEST_FLAGS) $$pkgs; fi

# make cover: statement coverage of the unit tests, per package, against
# the floors the project keeps (COVER_FLOORS, package=percent).
COVER_FLOORS ?= leader=85 leader/follow=85 leader/ctrlmanager=75 toleration=90 retrofit=70

.PHONY: cover
cover: ## unit tests with statement coverage per package, every module; fails below COVER_FLOORS (leader 85%, leader/follow 85%, leader/ctrlmanager 75%, toleration 90%, retrofit 70%)
	@go test -count=1 -timeout 5m -cover $(GOTEST_FLAGS) $(UNIT_PKGS) | awk -v floors='$(COVER_FLOORS)' ' \
		BEGIN { n = split(floors, f, " "); for (i = 1; i <= n; i++) { split(f[i], kv, "="); floor[kv[1]] = kv[2] } } \
		!/coverage:/ { print; if ($$1 == "FAIL" || $$1 == "---") failed = 1; next } \
		{ pkg = ""; for (i = 1; i <= NF; i++) { if ($$i ~ /^github.com\//) pkg = $$i; if ($$i == "coverage:") pct = $$(i+1) } \
			if (pkg == "") { print; next } \
			short = pkg; sub(/^github.com\/fastover\/fastover\/?/, "", short); \
			v = pct; sub(/%/, "", v); fl = (short in floor) ? floor[short] "%" : "-"; mark = ""; \
			if ((short in floor) && v + 0 < floor[short] + 0) { mark = "  BELOW THE FLOOR"; failed = 1 } \
			rows[++nr] = sprintf("%-48s %9s %7s%s", short, pct, fl, mark) } \
		END { printf "\n%-48s %9s %7s\n", "package", "coverage", "floor"; for (i = 1; i <= nr; i++) print rows[i]; exit failed }'

# What the end-to-end suites need: the tool groups tests/tools/build.sh
# builds (bin/), nftables' and podman's set-up, and the testtime command.
E2E_TOOLS := etcd kwok kube kubeproxy kubelet containerd cni certmanager helm promcrds
CHARTS_TOOLS := etcd kwok kube kubeproxy kubelet containerd cni certmanager prometheus promcrds
define suites_setup
	@tests/tools/build.sh $(1)
	@tests/tools/netfilter.sh
	@tests/tools/podman.sh
	@go build -o $(TESTTIME) ./internal/testtime/cmd/testtime
endef

.PHONY: e2e
e2e: ## end-to-end tests on a local control plane (and, as root, real nodes): the packages under tests/ and internal/cluster, then tests/e2e
	$(call suites_setup,$(E2E_TOOLS))
	tests/tools/suites.sh e2e

# make test's last phase: make e2e and make charts-test side by side.
.PHONY: suites
suites: ## make e2e and make charts-test as make test runs them: side by side, in a heavy phase and a light one (tests/tools/suites.sh says which work goes beside which)
	$(call suites_setup,$(sort $(E2E_TOOLS) $(CHARTS_TOOLS)))
	tests/tools/suites.sh both

# make test runs the phases one after another, records each one's wall time
# and, passed or failed, prints where the time went.
.PHONY: test
test: ## everything CI runs: tools, gofmt, vet, go mod tidy, lint (deps-check), unit tests with the coverage floors, e2e (the modules' consumer and compatibility tests included) beside the chart tests (make suites); then the time table
	@if [[ -e $(TIMES)/e2e.json ]]; then rm -rf $(TIMES).last && mv $(TIMES) $(TIMES).last; fi
	@rm -rf $(TIMES) && mkdir -p $(TIMES)
	@rc=0; for phase in $(TEST_PHASES); do \
		start=$$(date +%s%3N); $(MAKE) --no-print-directory $$phase || rc=$$?; \
		ms=$$(( $$(date +%s%3N) - start )); \
		printf '%s\t%d.%03d\t%d\n' $$phase $$((ms / 1000)) $$((ms % 1000)) $$rc >>$(TIMES)/phases.tsv; \
		if [[ $$rc != 0 ]]; then echo "make test: $$phase failed"; break; fi; \
	done; \
	echo; echo "==> where the time went (make test-times prints it again; events in $(TIMES))"; \
	go run ./internal/testtime/cmd/testtime table $(TIMES) || true; \
	exit $$rc

.PHONY: test-times
test-times: ## print where the time of the last make test (or e2e, charts-test, suites) went: its phases, every package, the slowest tests
	@go run ./internal/testtime/cmd/testtime table $(TIMES)

# The Helm charts (charts/) are tested by a Go module of their own,
# tests/charts, so that helm's SDK stays out of fastover's go.mod.
.PHONY: charts-test
charts-test: ## Helm charts: lint, schema, drift against manifests/, the alerting rules (promtool test rules), the dashboard's queries, a real Prometheus, install on a local control plane (and, as root, helm install onto real nodes)
	$(call suites_setup,$(CHARTS_TOOLS))
	tests/tools/suites.sh charts

# make images: an OCI image index per binary (fastover-webhook,
# fastover-example, fastover-certs, fastover-run) for IMAGE_PLATFORMS, built in Go without
# a container engine: OCI layouts in bin/images/<name>, digests in
# bin/images/digests.txt. REGISTRY=host/path also pushes each by digest to
# host/path/<name> (IMAGE_TAG=v0.1.0 tags it too); credentials are those of
# docker/podman login. VERSION, COMMIT and COMMIT_TIME default to git's.
REGISTRY ?=
IMAGE_TAG ?=
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64

.PHONY: images
images: ## reproducible container images in bin/images (REGISTRY=host/path pushes them by digest)
	go run ./internal/imagebuild/cmd/images -out $(BIN)/images -platforms $(IMAGE_PLATFORMS) \
		-version '$(VERSION)' -commit '$(COMMIT)' -commit-time '$(COMMIT_TIME)' \
		$(if $(REGISTRY),-registry $(REGISTRY)) $(if $(IMAGE_TAG),-tag $(IMAGE_TAG))

CHAOS_EVENTS ?= 240

.PHONY: chaos
chaos: ## the leader chaos run at full length (CHAOS_EVENTS=240, about 10 minutes; make test plays 40)
	@tests/tools/build.sh etcd kwok kube
	CHAOS_EVENTS=$(CHAOS_EVENTS) go test -count=1 -timeout 60m -v -run '^TestLeaderChaos$$' ./tests/e2e/

BENCH_COUNT ?= 6
BENCH_RUNS ?= 10
# Runs per election and scenario of the controller-runtime comparison
# (tests/bench/ctrlfailover): a killed run waits out a 15s lease.
CTRL_BENCH_RUNS ?= 5
# Runs per kind and scenario of the warm-standby comparison
# (tests/bench/warmstandby), and the ConfigMaps in its informers' cache.
WARM_BENCH_RUNS ?= 5
WARM_BENCH_OBJECTS ?= 20000
# Steady-state window of the API-cost comparison (tests/bench/apicost), per
# replica count (3 and 30): the requests a minute of leaders and standbys.
APICOST_WINDOW ?= 2m
# Runs per fault of the held-connections measurement (TestHeldConnections:
# clients that keep their connections, through kube-proxy and
# kube-apiserver; a frozen or cut-off leader waits up to 65 s a run).
HELD_RUNS ?= 3
# Runs per crash kind and mode of the crash-takeover measurement on real
# nodes (TestCrashTakeoverOnRealNodes; a lease-only run waits out 15 s).
CRASH_RUNS ?= 5

.PHONY: bench
bench: ## benchmarks: webhook handler vs controller-runtime idiom, webhook under load, leader failover vs client-go, controller-runtime operator handover vs controller-runtime's election, warm vs cold client-go standbys, API requests of leaders and standbys vs client-go, pod-creation latency without mutation vs webhook vs policy, handovers as clients that keep their connections see them, crash takeover vs lease-only on real nodes (~55 min; as root)
	@tests/tools/build.sh bench etcd kwok kube kubeproxy
	@tests/tools/netfilter.sh
	@mkdir -p $(BIN)/bench
	go build -o $(BIN)/fastover-webhook ./cmd/fastover-webhook
	go test -run '^$$' -bench '^BenchmarkHandle' -benchmem -count $(BENCH_COUNT) ./webhook/ | tee $(BIN)/bench/webhook.txt
	@echo
	@$(BIN)/benchstat $(BIN)/bench/webhook.txt
	@awk '$$1 ~ /^BenchmarkHandle/ { n = $$1; sub(/-[0-9]+$$/, "", n); ns[n] += $$3; al[n] += $$(NF-1); c[n]++ } \
		END { f = "BenchmarkHandle"; i = "BenchmarkHandleControllerRuntimeIdiom"; \
		printf "\nfastover handler vs controller-runtime idiom (means of %d runs): %.1fx faster, %.1fx fewer allocations\n\n", \
		c[f], (ns[i]/c[i])/(ns[f]/c[f]), (al[i]/c[i])/(al[f]/c[f]) }' $(BIN)/bench/webhook.txt
	go run ./tests/bench/webhookload -webhook $(BIN)/fastover-webhook -pod webhook/testdata/pod.json
	@echo
	go build -o $(BIN)/fastover-example ./examples/fastover-example
	go build -o $(BIN)/leaderbaseline ./tests/bench/leaderbaseline
	go run ./tests/bench/failover -bin $(BIN) -runs $(BENCH_RUNS)
	@echo
	go build -o $(BIN)/configmap-operator ./examples/configmap-operator
	go run ./tests/bench/ctrlfailover -bin $(BIN) -runs $(CTRL_BENCH_RUNS)
	@echo
	go build -o $(BIN)/informer-controller ./examples/informer-controller
	go run ./tests/bench/warmstandby -bin $(BIN) -runs $(WARM_BENCH_RUNS) -objects $(WARM_BENCH_OBJECTS)
	@echo
	go run ./tests/bench/apicost -bin $(BIN) -window $(APICOST_WINDOW)
	@echo
	go run ./tests/bench/admissionlatency -bin $(BIN)
	@echo
	HELD_RUNS=$(HELD_RUNS) go test -count=1 -timeout 30m -v -run '^TestHeldConnections$$' ./tests/e2e/ | grep -v -E '^\s*[IWE][0-9]{4} '
	@echo
	@$(MAKE) --no-print-directory bench-agents
	@echo
	@$(MAKE) --no-print-directory bench-crash

# The agents' storm alone (issue 41): AGENTS_N agents follow the leader
# through AGENTS_FAULTS, with client-go informers and a 200 × 2 KiB payload
# each, first with each replica's own versions of the payload (the agents
# list it again from the new leader), then with shared ones (their watches
# resume) (TestAgentsFollowTheLeader; make test runs 100 agents, SIGTERM
# and SIGKILL, own versions); then the baseline, one replica replaced by a
# new one once it exited (AGENTS_BASELINE=replace, a stop and a kill). A cut (AGENTS_FAULTS=...,cut) needs the
# replicas' fault proxies, which run in the agents' process and carry the
# leader's renewals: a thousand agents starve them.
AGENTS_N ?= 1000
AGENTS_FAULTS ?= SIGTERM,SIGKILL,SIGSTOP

.PHONY: bench-agents
bench-agents: ## a thousand agents follow a failover: time to 50/90/99/100 % served by the new leader, for a stop, a kill and a freeze, relisting or resuming, and against one replica replaced (~11 min; as root)
	@tests/tools/build.sh etcd kwok kube kubeproxy
	@tests/tools/netfilter.sh
	go build -o $(BIN)/fastover-example ./examples/fastover-example
	for v in replica shared; do \
		AGENTS_N=$(AGENTS_N) AGENTS_FAULTS=$(AGENTS_FAULTS) AGENTS_VERSIONS=$$v go test -count=1 -timeout 20m -v -run '^TestAgentsFollowTheLeader$$' ./tests/e2e/ | grep -v -E '^\s*[IWE][0-9]{4} ' | grep -v 'TLS handshake error'; \
	done
	for v in replica shared; do \
		AGENTS_BASELINE=replace AGENTS_N=$(AGENTS_N) AGENTS_FAULTS=SIGTERM,SIGKILL AGENTS_VERSIONS=$$v go test -count=1 -timeout 20m -v -run '^TestAgentsFollowTheLeader$$' ./tests/e2e/ | grep -v -E '^\s*[IWE][0-9]{4} ' | grep -v 'TLS handshake error'; \
	done

# The crash-takeover measurement alone: the example's leader crashed on
# real nodes (SIGKILL, OOM kill, panic), CRASH_RUNS times each, with crash
# takeover, lease-only, and client-go's election in pods; a table of p50
# and min–max.
.PHONY: bench-crash
bench-crash: ## crash takeover vs lease-only vs client-go on real nodes: SIGKILL, OOM kill, panic of the leader (~11 min; as root)
	@tests/tools/build.sh etcd kwok kube kubeproxy certmanager kubelet containerd cni
	@tests/tools/netfilter.sh
	@tests/tools/podman.sh
	cd tests/charts && FASTOVER_CRASH_RUNS=$(CRASH_RUNS) GOWORK=off go test -count=1 -timeout 40m -v -run '^TestCrashTakeoverOnRealNodes$$' . | grep -v -E '^\s*[IWE][0-9]{4} '

# Many nodes lost at once (issue 44), at compressed rates: issue 44's
# shapes (three zones of 100 kwok nodes, 3 pods each; k = 1, 10, 50 lost in
# one zone, a partial disruption, a whole zone, every zone, a small zone),
# each taint and eviction against the node loss model
# (TestNodeLossAtScale). SCALE_SHAPES=k=1,k=10 runs some of them.
SCALE_SHAPES ?=
SCALE_AUDIT ?=

.PHONY: bench-scale
bench-scale: ## many nodes lost at once, measured against the node loss model at compressed rates: 300 kwok nodes and 900 pods a shape (~3 min a shape); SCALE_SHAPES=k=10,partial for some, SCALE_AUDIT=DIR to keep each shape's audit log, logs and times
	@tests/tools/build.sh etcd kwok kube
	FASTOVER_SCALE=1 FASTOVER_SCALE_SHAPES=$(SCALE_SHAPES) FASTOVER_SCALE_AUDIT=$(if $(SCALE_AUDIT),$(abspath $(SCALE_AUDIT))) go test -count=1 -timeout 40m -v -run '^TestNodeLossAtScale$$' ./tests/e2e/ | grep -v -E '^\s*[IWE][0-9]{4} '

# make demo: GRACE=50s for Kubernetes' default node-monitor grace period
# (the demo's default is 20s); DEMO_FLAGS=--quick for the CI test's durations.
GRACE ?=
DEMO_FLAGS ?=

.PHONY: demo
demo: ## show what fastover changes, on real Kubernetes components (GRACE=50s for Kubernetes' default grace period)
	@echo "==> make demo: building what it needs into bin/ (a cold first build compiles Kubernetes and cert-manager from source: about 20 minutes on 2 cores; later runs reuse bin/ and take seconds)"
	@tests/tools/build.sh etcd kwok kube kubeproxy certmanager
	@tests/tools/netfilter.sh
	@if [[ $$(id -u) == 0 ]]; then echo "==> as root the demo runs on real nodes: building the kubelet, containerd, the CNI plugins and helm, installing runc"; \
		tests/tools/build.sh kubelet containerd cni helm && tests/tools/podman.sh; \
	else echo "==> not root: the demo runs on kwok nodes (real nodes need root)"; fi
	@echo "==> building fastover-webhook, fastover-example and fastover-demo (go build -o bin/ ./cmd/... ./examples/...)"
	@go build -o $(BIN)/ ./cmd/... ./examples/...
	@echo
	@$(BIN)/fastover-demo $(if $(GRACE),--grace=$(GRACE)) --svg=$(CURDIR)/demo-timeline.svg $(DEMO_FLAGS)

# What the binaries and images say of their build (internal/version): the
# tag on a release, else what git describe says of the commit.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
COMMIT_TIME ?= $(shell TZ=UTC git show -s --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD 2>/dev/null)
VERSION_PKG := github.com/fastover/fastover/internal/version

DIST_PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
DIST_COMMANDS := fastover-webhook fastover-certs kubectl-fastover fastover-run

# make dist: the release's binaries, bin/dist/<command>-<os>-<arch>, and
# SHA256SUMS. Static, no local path or build ID in them: the same commit
# gives the same files.
.PHONY: dist
dist: ## cross-build fastover-webhook, fastover-certs, kubectl-fastover, fastover-run for linux and darwin (amd64, arm64) into bin/dist, with SHA256SUMS
	@rm -rf $(BIN)/dist
	@mkdir -p $(BIN)/dist
	@ldflags="-s -w -buildid= -X $(VERSION_PKG).Version=$(VERSION) -X $(VERSION_PKG).Commit=$(COMMIT) -X $(VERSION_PKG).CommitTime=$(COMMIT_TIME)"; \
	for platform in $(DIST_PLATFORMS); do \
		os=$${platform%/*}; arch=$${platform#*/}; out=$(BIN)/dist/.$$os-$$arch; \
		echo "==> $(DIST_COMMANDS) $(VERSION) for $$os/$$arch"; \
		CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch GOAMD64=v1 GOARM64=v8.0 GOFLAGS=-mod=readonly \
			go build -trimpath -buildvcs=false -ldflags="$$ldflags" -o $$out/ $(addprefix ./cmd/,$(DIST_COMMANDS)); \
		for cmd in $(DIST_COMMANDS); do mv $$out/$$cmd $(BIN)/dist/$$cmd-$$os-$$arch; done; \
		rmdir $$out; \
	done
	@cd $(BIN)/dist && sha256sum -- * >SHA256SUMS && cat SHA256SUMS

.PHONY: clean
clean: ## remove bin/
	rm -rf $(BIN)
