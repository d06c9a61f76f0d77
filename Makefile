# The Norsk Manager's tasks. `make test` is what CI runs (.ci/run).
GO ?= go
PKGS_RACE = ./internal/manager/... ./internal/cluster/... ./internal/auth/... ./internal/worker/... ./internal/store/... \
            ./internal/events/... ./internal/nodes/... ./internal/runtime/... \
            ./sdk/... ./internal/cli ./internal/cli/cmdutil ./internal/cli/nodes ./internal/automanager/... ./internal/providers \
            ./internal/providers/mock/... ./internal/providers/cloudhypervisor/... \
            ./internal/hostagent/... ./internal/chsim/... ./internal/sim/... \
            ./pkg/jobsocket/... ./tests/sdkcontract

.PHONY: all build test test-fast test-race vet dev images proto bench bench-compare fuzz clean

all: build

build:
	CGO_ENABLED=0 $(GO) build -o bin/ ./cmd/...

# CGO_ENABLED=0, as the first test pass builds: vet compiles the packages it
# checks, and with the same settings the test pass finds them in the cache
# instead of compiling everything a second time (nothing here uses cgo).
vet:
	CGO_ENABLED=0 $(GO) vet ./...
	@test -z "$$(gofmt -l $$(git ls-files '*.go' | grep -v '^api/gen/'))" || { gofmt -l $$(git ls-files '*.go' | grep -v '^api/gen/'); echo "gofmt needed"; exit 1; }

# The whole suite: vet and gofmt, every test, then the race detector over
# the packages with concurrency. Tests that need Docker skip with a message
# where no engine answers. Every test runs once, in one of two streams that
# run side by side (measured in docs/contributing.md):
#
# - ./tests, the end-to-end scenarios, alone in its own go test: it is the
#   longest package by far, and mostly waits on timers, processes and
#   containers.
# - Beside it, every other package not in PKGS_RACE, then every test of the
#   PKGS_RACE packages under the race detector (they do not run without it
#   too; -short would change nothing in them, and a test sized for the
#   first pass checks raceEnabled).
#
# Both build with CGO_ENABLED=0 but the race pass (it needs cgo), as the
# images and binaries the tests build are static, FROM scratch: one compile
# cache serves them all. Tests run up to TEST_PARALLEL at once within a
# package.
TEST_PARALLEL ?= 4
test: vet
	@race_pkgs=$$(mktemp); $(GO) list $(PKGS_RACE) ./tests/ > $$race_pkgs; \
	plain=$$($(GO) list ./internal/mgr/ ./... | awk '!seen[$$0]++' | grep -vxF -f $$race_pkgs); rm -f $$race_pkgs; \
	echo "CGO_ENABLED=0 $(GO) test -timeout 20m -parallel $(TEST_PARALLEL) ./tests/ &"; \
	CGO_ENABLED=0 $(GO) test -timeout 20m -parallel $(TEST_PARALLEL) ./tests/ & scenarios=$$!; \
	echo "CGO_ENABLED=0 $(GO) test -timeout 20m -parallel $(TEST_PARALLEL) <./... but ./tests/ and PKGS_RACE>"; \
	CGO_ENABLED=0 $(GO) test -timeout 20m -parallel $(TEST_PARALLEL) $$plain; plain_rc=$$?; \
	echo "$(GO) test -race -timeout 20m -parallel $(TEST_PARALLEL) $(PKGS_RACE)"; \
	$(GO) test -race -timeout 20m -parallel $(TEST_PARALLEL) $(PKGS_RACE); race_rc=$$?; \
	wait $$scenarios; scenarios_rc=$$?; \
	test $$plain_rc -eq 0 && test $$race_rc -eq 0 && test $$scenarios_rc -eq 0

# The packages' own tests, without the long end-to-end scenarios.
test-fast:
	CGO_ENABLED=0 $(GO) test -short -parallel $(TEST_PARALLEL) ./...

test-race:
	$(GO) test -race -timeout 30m -parallel $(TEST_PARALLEL) $(PKGS_RACE)

# A complete system on this machine: a Manager, a worker and a demo job.
dev:
	$(GO) run ./cmd/norsk-manager dev

# The example images, FROM scratch, built locally (nothing is pulled).
images:
	mkdir -p build
	CGO_ENABLED=0 $(GO) build -o build/hello ./examples/hello
	CGO_ENABLED=0 $(GO) build -o build/sample-media ./examples/sample-media
	docker build -t norsk-examples/hello:dev -f examples/hello/Dockerfile build/
	docker build -t norsk-examples/sample-media:dev -f examples/sample-media/Dockerfile build/

# Regenerate api/gen from api/proto (needs buf, protoc-gen-go and
# protoc-gen-connect-go: see docs/contributing.md).
proto:
	buf lint
	buf generate

bench:
	$(GO) test ./bench -run '^$$' -bench . -benchtime=3000x

# The store benchmarks beside etcd (Debian's etcd-server; skipped without
# it), in the same run, with the ratio (decision 0037).
bench-compare:
	$(GO) test ./bench/compare -run '^$$' -bench . -benchtime=3000x -timeout 30m

fuzz:
	$(GO) test ./sdk/norsk -run '^$$' -fuzz FuzzDecodeJobSpec -fuzztime 30s
	$(GO) test ./pkg/jobspec -run '^$$' -fuzz FuzzValidateJob -fuzztime 30s
	$(GO) test ./internal/store/state -run '^$$' -fuzz FuzzApply -fuzztime 30s
	$(GO) test ./internal/store -run '^$$' -fuzz FuzzVerifyChecksum -fuzztime 30s
	$(GO) test ./pkg/discovery -run '^$$' -fuzz FuzzParseNodeToken -fuzztime 30s
	$(GO) test ./internal/mgr -run '^$$' -fuzz FuzzSessionDecode -fuzztime 30s
	$(GO) test ./internal/providers -run '^$$' -fuzz FuzzParseOverrides -fuzztime 30s
	$(GO) test ./internal/providers -run '^$$' -fuzz FuzzDecodeUserData -fuzztime 30s

clean:
	rm -rf bin build
