# edgeplane: one static binary. CGO_ENABLED=0 everywhere: kine then uses the
# pure-Go modernc.org/sqlite driver, and the binary cross-builds to arm64/armv7.
export CGO_ENABLED := 0


VERSION       ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
BIN           ?= bin/edgeplane
DATA_DIR      ?= ./.edgeplane
TEST_TIMEOUT  ?= 60m

# Stamp edgeplane's version and commit (and the Kubernetes version, which an
# unstamped build also reports: internal/kubeversion). See hack/ldflags.sh.
LDFLAGS := $(shell ./hack/ldflags.sh $(VERSION))

.PHONY: build run test unit vet fmt clean dist test-qemu
build:
	go build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/edgeplane

# The API listens on every address, so that the server's own pods (when a
# container runtime makes it a node) and other nodes reach it at the
# kubernetes Service's endpoint. test/e2e's TestMakeRun runs this recipe's
# command (make -n run) as a node and checks that pods reach the API.
run: build
	$(BIN) server --data-dir $(DATA_DIR) $(ARGS)

# The whole suite: unit tests and integration tests against the real binary,
# both datastores. .ci/run calls this. The vet target has run every analyzer
# already, so go test's own vet pass is off; test binaries are linked without
# DWARF and symbol table (-s -w: half the link time of each of ~40 binaries
# of 80-120 MB; stack traces keep their file:line). hack/gotest runs go test
# -json and prints each package's line, the output of failed tests, and at
# the end every skipped test with its reason; under CI it fails on a skip
# that internal/testing/testenv.ByDesign does not list. test/e2e, longer
# than all the other packages together, starts first in a go test of its own
# and the others run beside it at nice 10 (-first). TEST_TIMEOUT bounds
# each package: test/e2e took 37 min on a machine with a cold build cache
# (it builds four earlier releases for the upgrade tests), 20 min warm.
TEST_FLAGS ?= -count=1 -vet=off -ldflags='-s -w'
test: vet
	go run ./hack/gotest -first=./test/e2e $(TEST_FLAGS) -timeout $(TEST_TIMEOUT) ./...

unit:
	go test -count=1 -short ./...

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	go vet ./...

# Release folder dist/: static, stripped, stamped binaries for linux/amd64,
# linux/arm64 and linux/arm (ARMv7), each one's container runtime for a node
# (runtime-linux-<arch>.tar.gz, hack/dist-runtime.sh: Debian's containerd,
# runc and CNI plugins through apt, crictl built from source), install.sh,
# edgeplane-uninstall.sh and SHA256SUMS. A cold cross build takes minutes per
# architecture; the runtime adds an apt index download and a crictl build per
# architecture. DIST_RUNTIME=0 leaves the runtime out. Not part of make test.
dist:
	./hack/dist.sh $(VERSION)

# Cross-builds what make dist ships for boards, linux/arm64 and linux/arm
# (ARMv7, GOARM=7), and runs each under qemu-user (Debian's qemu-user-static:
# qemu-aarch64, qemu-arm): `edgeplane version`, then a server start to /readyz
# and a write and read through SQLite. Not part of `make test`: the cross
# builds are slow. QEMU_ARM64_BINARY=dist/edgeplane-linux-arm64 and
# QEMU_ARM_BINARY=dist/edgeplane-linux-arm reuse `make dist` binaries;
# QEMU_RUN=TestQEMU/armv7 runs one architecture.
QEMU_RUN ?= TestQEMU
test-qemu:
	EDGEPLANE_TEST_QEMU=1 EDGEPLANE_QEMU_ARM64_BINARY=$(QEMU_ARM64_BINARY) EDGEPLANE_QEMU_ARM_BINARY=$(QEMU_ARM_BINARY) \
		go test $(TEST_FLAGS) -v -timeout 60m -run '$(QEMU_RUN)' ./test/e2e/

# Benchmark against upstream kube-apiserver + etcd (bench/, docs/PERFORMANCE.md):
# builds the baseline from go.mod's versions, runs everything side by side on
# loopback, prints the table and writes bench/RESULTS.md. About 30 min;
# bench-smoke is a few minutes. BENCH_ARGS go to the driver (bench/run.sh -h).
# Simulated nodes (bench/nodes.sh, bench/cmd/nodes): N simulated nodes per
# configuration, the control plane's cost per node. NODES, PODS, CHURN,
# WINDOW, CONFIGS, KILL_AT, SIM (hollow, lite, auto) as in bench/nodes.sh.
# About 6 min per (config, N) up to N = 100.
.PHONY: bench-nodes
bench-nodes:
	./bench/nodes.sh

# The board benchmark (bench/board.sh, bench/cmd/board, docs/PERFORMANCE.md):
# the server as its own node on a private containerd, in a memory cgroup
# (512 MiB --profile default, 256 MiB --profile small, and 384 MiB over
# edgeplane, containerd and the pods together) with one Cortex-A53 core's CPU
# quota; 30 pods, a rolling update, then BOARD_IDLE (default 30m) idle. Runs
# as root; about 35 min per configuration. BOARD_ARGS go to the driver
# (-configs, -cpu, ...); BOARD_LOCK names a file to flock while it runs.
.PHONY: bench-board
bench-board:
	BOARD_IDLE=$(BOARD_IDLE) BOARD_LOCK=$(BOARD_LOCK) ./bench/board.sh $(BOARD_ARGS)

# Cluster network figures (docs/NETWORKING.md): two two-node clusters on this
# host (the agent in a network namespace of its own), network parts on and off;
# deploy-to-answering time, pod-to-pod and pod-to-Service latency against plain
# routing between the namespaces, RSS and CPU. Runs as root; about 10 min.
.PHONY: bench-network
bench-network:
	EDGEPLANE_NET_FIGURES=1 go test -count=1 -v -timeout 40m -run 'TestClusterNetworkFigures$$' ./test/e2e/

.PHONY: bench-metrics
bench-metrics:
	EDGEPLANE_METRICS_FIGURES=1 go test -count=1 -v -timeout 40m -run 'TestMetricsServerFigures$$' ./test/e2e/

# The application add-ons together (docs/ADDONS.md, "at a glance"): a server
# that is its own node with every add-on on, all four off, and each one off;
# idle disk writes, CPU and RSS over a 2-minute window (ADDONS_IDLE), and a
# failure when all-on writes more than 10% above all-off. Runs as root; about
# 4 min per configuration. ADDONS narrows the list (e.g. ADDONS=all,none).
ADDONS ?= all,none,local-storage,metrics-server,helm-controller,ingress
ADDONS_IDLE ?= 2m
.PHONY: bench-addons
bench-addons:
	EDGEPLANE_ADDON_FIGURES=$(ADDONS) EDGEPLANE_ADDON_FIGURES_IDLE=$(ADDONS_IDLE) go test -count=1 -v -timeout 60m -run 'TestAddonFigures$$' ./test/e2e/

# Node tunnel figures (docs/NODES.md, "Edge links"): kubectl exec, logs and a
# port-forward request to a pod on an agent, direct and through the tunnel, and
# the agent's RSS with and without it (a two-node cluster, about 5 min), then
# the tunnel's own cost on loopback. Runs as root.
.PHONY: bench-tunnel
bench-tunnel:
	EDGEPLANE_TUNNEL_FIGURES=1 go test -count=1 -v -timeout 30m -run 'TestNodeTunnelFigures$$' ./test/e2e/
	go test -count=3 -run '^$$' -bench . -benchtime 2s ./pkg/nodetunnel/

# The node's API cache (docs/NODES.md, "Offline: the node's API cache"):
# agent RSS with and without it, its writes idle and during a partition
# (APICACHE_WINDOW each), an offline restart's time to pods running.
APICACHE_WINDOW ?= 5m
.PHONY: bench-apicache
bench-apicache:
	EDGEPLANE_APICACHE_FIGURES=1 EDGEPLANE_APICACHE_WINDOW=$(APICACHE_WINDOW) go test -count=1 -v -timeout 60m -run 'TestAPICacheFigures$$' ./test/e2e/

# An agent's memory at rest (docs/PERFORMANCE.md, "An agent's memory"):
# VmRSS, anonymous and file RSS from Ready over AGENT_WINDOW, the binary
# dropped from the page cache first; AGENT_ENV adds configurations
# (";"-separated environments, e.g. AGENT_ENV='GOGC=100').
AGENT_WINDOW ?= 30m
AGENT_ENV ?=
.PHONY: bench-agent
bench-agent:
	EDGEPLANE_AGENT_FIGURES=1 EDGEPLANE_AGENT_WINDOW=$(AGENT_WINDOW) EDGEPLANE_AGENT_FIGURES_ENV='$(AGENT_ENV)' go test -count=1 -v -timeout 180m -run 'TestAgentMemoryFigures$$' ./test/e2e/

.PHONY: bench bench-smoke
bench:
	BENCH_COMMAND="make bench$(if $(BENCH_ARGS), BENCH_ARGS='$(BENCH_ARGS)')" ./bench/run.sh $(BENCH_ARGS)

bench-smoke:
	BENCH_COMMAND="make bench-smoke$(if $(BENCH_ARGS), BENCH_ARGS='$(BENCH_ARGS)')" ./bench/run.sh -short $(BENCH_ARGS)

# Reliability, full form (docs/RELIABILITY.md): 20+ SIGKILL/restart cycles per
# datastore, a 30-minute storage soak, datastore and disk faults, 5-minute
# load runs, hostile input. `make test` runs the same tests in a short form.
# Roughly 90 minutes on 2 cores; RELIABILITY_RUN narrows it (a -run regexp).
RELIABILITY_RUN ?= TestCrash|TestPowerCut|TestSoak|TestDiskFault|TestEtcdFault|TestLoad|TestHostile
.PHONY: reliability
reliability:
	EDGEPLANE_RELIABILITY_FULL=1 go test -count=1 -v -timeout 180m -run '$(RELIABILITY_RUN)' ./test/e2e/

# The upstream [Conformance] suite on a two-node cluster (docs/CONFORMANCE.md):
# builds e2e.test and the images into a cache (CONFORMANCE_DIR), then runs the
# parallel and [Serial] specs under the host's e2e lock and prints the table.
# About an hour per datastore on 2 cores; not part of make test.
# CONFORMANCE_DATASTORE=etcd runs on embedded etcd; CONFORMANCE_FOCUS=REGEXP
# runs the specs it matches.
.PHONY: conformance
conformance:
	./hack/conformance.sh

# Why the linker keeps methods edgeplane never calls: the chain from main to
# each function that looks a method up by a computed name (docs/PERFORMANCE.md,
# "Binary size"). Exits 1 while there is one.
.PHONY: deadcode
deadcode:
	go build -ldflags=-dumpdep -o /dev/null ./cmd/edgeplane 2>&1 | go run ./hack/whydead

clean:
	rm -rf bin dist
