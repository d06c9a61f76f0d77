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

# The whole suite: vet and gofmt, then every test once, in two streams
# side by side (measured in docs/contributing.md). Tests that need Docker
# skip with a message where no engine answers.
#
# - The scenarios: ./tests (the end-to-end scenarios, the longest package
#   by far, mostly waiting on timers, processes and containers) and, beside
#   it, SLOW_PLAIN, the longest of the other packages.
# - Beside them, the rest of the packages not in PKGS_RACE, then every test
#   of the PKGS_RACE packages (the ones with concurrency) under the race
#   detector. These do not run without it too: -short would change nothing
#   in them, and a test sized for the plain run checks raceEnabled.
#
# Everything but the race run builds with CGO_ENABLED=0, as the images and
# binaries the tests build are (static, FROM scratch): one compile cache
# serves them all. Tests run up to TEST_PARALLEL at once within a package.
# The second stream's output is held and printed after the first's, so the
# two never interleave.
TEST_PARALLEL ?= 4
SLOW_PLAIN = ./internal/mgr/ ./internal/devmode/
test: vet
	@skip=$$(mktemp); log=$$(mktemp); $(GO) list $(PKGS_RACE) ./tests/ $(SLOW_PLAIN) > $$skip; \
	rest=$$($(GO) list ./... | grep -vxF -f $$skip); rm -f $$skip; \
	{ echo "CGO_ENABLED=0 $(GO) test -timeout 20m -parallel $(TEST_PARALLEL) <./... but ./tests/, SLOW_PLAIN and PKGS_RACE>"; \
	  CGO_ENABLED=0 $(GO) test -timeout 20m -parallel $(TEST_PARALLEL) $$rest; rest_rc=$$?; \
	  echo "$(GO) test -race -timeout 20m -parallel $(TEST_PARALLEL) $(PKGS_RACE)"; \
	  $(GO) test -race -timeout 20m -parallel $(TEST_PARALLEL) $(PKGS_RACE) && test $$rest_rc -eq 0; \
	} > $$log 2>&1 & second=$$!; \
	echo "CGO_ENABLED=0 $(GO) test -timeout 20m -parallel $(TEST_PARALLEL) ./tests/ $(SLOW_PLAIN)"; \
	CGO_ENABLED=0 $(GO) test -timeout 20m -parallel $(TEST_PARALLEL) ./tests/ $(SLOW_PLAIN); first_rc=$$?; \
	wait $$second; second_rc=$$?; cat $$log; rm -f $$log; \
	test $$first_rc -eq 0 && test $$second_rc -eq 0

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
