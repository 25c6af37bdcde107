# clpool's build. `make demo` and `make test` set up everything they need on a
# fresh Debian machine (as root, or with sudo).

GO      ?= go
BUILD   := build
ICD_DIR := $(abspath $(BUILD)/icd)
PKGS    := pocl-opencl-icd ocl-icd-opencl-dev opencl-headers oclgrind clinfo chromium
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# Every OpenCL program run from here sees exactly POCL and Oclgrind; the
# demo and benchmarks run on POCL unless CLPOOL_DEVICE says otherwise (the
# ICD loader lists Oclgrind, a simulator, first).
export OCL_ICD_VENDORS := $(ICD_DIR)
export CLPOOL_DEVICE ?= pocl

.PHONY: all deps demo test fmt vet test-pocl test-oclgrind bench bench-pyopencl replay viz screenshots fuzz clean

all: test

# deps installs the missing Debian packages (one apt-get update, only when
# something is missing) and writes the ICD directory naming both runtimes.
deps:
	@missing=$$(for p in $(PKGS); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing:" $$missing; \
		$(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing >/dev/null; \
	fi
	@rm -rf $(ICD_DIR) && mkdir -p $(ICD_DIR)
	@cp /etc/OpenCL/vendors/pocl.icd $(ICD_DIR)/pocl.icd
	@echo /usr/lib/oclgrind/liboclgrind-rt-icd.so > $(ICD_DIR)/oclgrind.icd

demo: deps
	$(GO) run ./examples/cg

fmt:
	@out=$$(gofmt -l $$(git ls-files --cached --others --exclude-standard '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet: deps
	$(GO) vet ./...

# -timeout: go test's default of 10 minutes a package is too near what the
# largest take on a loaded machine with the race detector (mempool, array).
test-pocl: deps
	CLPOOL_DEVICE=pocl $(GO) test -race -count=1 -timeout 30m ./...

# Oclgrind simulates every work-item: -short keeps the sizes small there.
test-oclgrind: deps
	CLPOOL_DEVICE=oclgrind $(GO) test -race -short -count=1 -timeout 30m ./...

test: deps fmt vet test-pocl test-oclgrind

bench: deps
	$(GO) test -run '^$$' -bench . -benchmem ./...

# replay runs the cg trace through every allocator configuration.
replay: deps
	$(GO) build -o $(BUILD)/clpool ./cmd/clpool
	$(BUILD)/clpool replay -warmup 50 testdata/cg.tsv

# viz draws the mlp trace as $(BUILD)/mlp.html and screenshots it to
# $(BUILD)/viz.png with headless Chromium: it writes under $(BUILD) only
# (Chromium's profile too, which it would otherwise keep in $HOME).
viz: deps
	$(GO) build -o $(BUILD)/clpool ./cmd/clpool
	$(BUILD)/clpool viz -o $(BUILD)/mlp.html testdata/mlp.tsv
	chromium --headless --no-sandbox --disable-gpu --window-size=1400,1600 \
		--user-data-dir=$(abspath $(BUILD)/chromium) --screenshot=$(abspath $(BUILD)/viz.png) file://$(abspath $(BUILD)/mlp.html) 2>/dev/null

# screenshots regenerates the pictures README.md shows (docs/viz.png, a
# tracked file) from viz's.
screenshots: viz
	@mkdir -p docs
	cp $(BUILD)/viz.png docs/viz.png

# bench-pyopencl replays the same trace through PyOpenCL and clpool in one run.
bench-pyopencl: deps
	@dpkg -s python3-pyopencl >/dev/null 2>&1 || { $(SUDO) apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq python3-pyopencl >/dev/null; }
	$(GO) build -o $(BUILD)/clpool ./cmd/clpool
	/usr/bin/python3 -W ignore scripts/bench_pyopencl.py $(BUILD)/clpool testdata/cg.tsv 5 50

fuzz: deps
	$(GO) test -run '^$$' -fuzz FuzzPool -fuzztime 60s ./mempool/

clean:
	rm -rf $(BUILD)
