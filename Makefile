# edgeplane: one static binary. CGO_ENABLED=0 everywhere: kine then uses the
# pure-Go modernc.org/sqlite driver, and the binary cross-builds to arm64/armv7.
export CGO_ENABLED := 0


VERSION       ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
BIN           ?= bin/edgeplane
DATA_DIR      ?= ./.edgeplane
TEST_TIMEOUT  ?= 25m

# Stamp the Kubernetes version: unstamped, /version reports v0.0.0-master and
# kubectl cannot parse it. See hack/ldflags.sh, which tests use too.
LDFLAGS := $(shell ./hack/ldflags.sh $(VERSION))

.PHONY: build run test unit vet fmt clean
build:
	go build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/edgeplane

run: build
	$(BIN) server --data-dir $(DATA_DIR) --bind-address 127.0.0.1 $(ARGS)

# The whole suite: unit tests and integration tests against the real binary,
# both datastores. .ci/run calls this.
test: vet
	go test -count=1 -timeout $(TEST_TIMEOUT) ./...

unit:
	go test -count=1 -short ./...

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	go vet ./...

clean:
	rm -rf bin
