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
# where no engine answers. Every test runs once:
#
# - The first pass runs ./tests (the end-to-end scenarios) and every package
#   not in PKGS_RACE, built with CGO_ENABLED=0, as the images and binaries
#   the tests build are (static, FROM scratch): one compile cache serves
#   them all instead of two. ./tests runs in a go test of its own beside the
#   other packages' (its scenarios spend most of their time waiting on
#   timers, processes and containers, and it is the longest package: in one
#   go test the others would queue behind it or it behind them). Its output
#   is printed when it ends. Tests run up to TEST_PARALLEL at once within a
#   package. ./internal/mgr, the longest of the others, is named first:
#   go test starts packages' runs in the order given.
# - The race pass runs every test of the PKGS_RACE packages, under the race
#   detector: they do not run in the first pass too. (-short changes nothing
#   in them; a test sized for the first pass checks raceEnabled.)
#
# The race pass's test binaries are compiled and linked during the first
# pass, at the lowest CPU priority (nice 19): the first pass's scenarios
# leave part of the two cores idle while they wait, and the build takes
# only that part, never the scenarios' share. The race pass then runs those
# binaries (scripts/race-pass.sh) instead of go test, which would link each
# one again.
TEST_PARALLEL ?= 4
test: vet
	@race_dir=$$(mktemp -d); \
	GO="$(GO)" nice -n 19 scripts/race-pass.sh build $$race_dir $(PKGS_RACE) > $$race_dir/build.log 2>&1 & race_build=$$!; \
	$(GO) list $(PKGS_RACE) ./tests > $$race_dir/not-plain; \
	plain=$$($(GO) list ./internal/mgr/ ./... | awk '!seen[$$0]++' | grep -vxF -f $$race_dir/not-plain); \
	echo "CGO_ENABLED=0 $(GO) test -timeout 20m -parallel $(TEST_PARALLEL) ./tests/   (beside)"; \
	CGO_ENABLED=0 $(GO) test -timeout 20m -parallel $(TEST_PARALLEL) ./tests/ > $$race_dir/tests.log 2>&1 & tests=$$!; \
	echo "CGO_ENABLED=0 $(GO) test -timeout 20m -parallel $(TEST_PARALLEL) <./... but ./tests and PKGS_RACE>"; \
	CGO_ENABLED=0 $(GO) test -timeout 20m -parallel $(TEST_PARALLEL) $$plain; plain_rc=$$?; \
	wait $$tests; tests_rc=$$?; cat $$race_dir/tests.log; \
	wait $$race_build; build_rc=$$?; \
	if [ $$plain_rc -ne 0 ] || [ $$tests_rc -ne 0 ]; then rm -rf $$race_dir; exit 1; fi; \
	if [ $$build_rc -ne 0 ]; then echo "building the race pass's test binaries failed:"; cat $$race_dir/build.log; fi; \
	echo "race pass: $(GO) test -race -c of PKGS_RACE, each binary run with -test.timeout=20m -test.parallel=$(TEST_PARALLEL)"; \
	scripts/race-pass.sh run $$race_dir -test.timeout=20m -test.parallel=$(TEST_PARALLEL); race_rc=$$?; \
	rm -rf $$race_dir; exit $$race_rc

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
