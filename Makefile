# The two commands of the README: `make test` and `make demo`. Everything else is a helper.
BUILD    ?= build
JOBS     ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build test demo bench clean help

all: build

help:
	@echo "make test   install missing Debian packages, build (Release) and run every test"
	@echo "make demo   install, build, make the synthetic Kinetics set, train, evaluate (issue #5)"
	@echo "make build  configure and build into $(BUILD)/"
	@echo "make bench  run the op benchmarks against PyTorch (bench/README.md)"
	@echo "make clean  remove $(BUILD)/"

deps:
	@cmake/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Tests run one at a time: each uses every core through OpenMP.
test: build
	cd $(BUILD) && ctest --output-on-failure --timeout 900

demo: build
	@echo "make demo: the trainer (perceiver-train, issue #5) is not built yet; see README.md." >&2
	@exit 2

bench: build
	bench/run_ops.sh --threads $(JOBS)

clean:
	rm -rf $(BUILD)
