# The two commands of the README: `make test` and `make demo`. Everything else is a helper.
BUILD    ?= build
JOBS     ?= $(shell nproc)
CMAKE_FLAGS ?=
# The CUDA backend is built whenever nvcc is found (so every CI run compiles and links it, and
# its tests report SKIP without a GPU); without nvcc the CPU library alone. CUDA=OFF forces it off.
NVCC ?= $(firstword $(wildcard /usr/local/cuda/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
CUDA ?= $(if $(NVCC),ON,OFF)
CUDA_FLAGS := -DPERCEIVER_WITH_CUDA=$(CUDA) $(if $(filter ON,$(CUDA)),-DCMAKE_CUDA_COMPILER=$(NVCC))
# MEDIA=OFF: the core alone (-DPERCEIVER_WITH_MEDIA=OFF; no FFmpeg/libsndfile packages, no
# perceiver-prep), e.g. `make test MEDIA=OFF BUILD=build-nomedia`. README "Building without media".
MEDIA ?= ON

.PHONY: all deps configure build test test-sanitize demo demo-clean demo-check bench clean help

all: build

help:
	@echo "make test   install missing Debian packages, build (Release) and run every test"
	@echo "make test-sanitize  clang build with ASan+UBSan into $(SANITIZE_BUILD)/: the unit, data, io, train"
	@echo "            and fuzz suites, each libFuzzer target for FUZZ_SECONDS (default 60)"
	@echo "make demo   install, build, make the synthetic Kinetics set, train, evaluate, show results"
	@echo "make demo-clean  remove the demo's data and logs (the next make demo starts afresh)"
	@echo "make demo-check  the demo from scratch in $(BUILD)/demo-check, failing below 25 dB video PSNR or"
	@echo "           above 5 minutes of training"
	@echo "make build  configure and build into $(BUILD)/ (with the CUDA backend when nvcc is found; CUDA=OFF: without;"
	@echo "           MEDIA=OFF: without FFmpeg/libsndfile, the core alone)"
	@echo "make bench  run the op benchmarks against PyTorch (bench/README.md)"
	@echo "make clean  remove $(BUILD)/"

deps:
	@cmake/install-deps.sh $(if $(filter OFF,$(MEDIA)),--no-media)

configure: deps
	@echo "CUDA backend: $(CUDA)$(if $(NVCC), (nvcc: $(NVCC)), (no nvcc found))"
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DPERCEIVER_WITH_MEDIA=$(MEDIA) $(CUDA_FLAGS) $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Tests run one at a time: each uses every core through OpenMP.
test: build
	cd $(BUILD) && ctest --output-on-failure --timeout 900

# A second build with clang, AddressSanitizer, UndefinedBehaviorSanitizer and libFuzzer's
# coverage instrumentation (tests/fuzz/README.md): the unit, data, io, train and fuzz suites,
# each libFuzzer target running FUZZ_SECONDS from its seeds. .ci/run calls it after make test.
# Without oneDNN: Debian's links GNU OpenMP, and this build uses clang's libomp.
SANITIZE_BUILD ?= build-sanitize
FUZZ_SECONDS ?= 60
test-sanitize: deps
	cmake -S . -B $(SANITIZE_BUILD) -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang-14 \
	  -DCMAKE_CXX_COMPILER=clang++-14 -DPERCEIVER_SANITIZE=ON -DPERCEIVER_FUZZ=ON \
	  -DPERCEIVER_FUZZ_SECONDS=$(FUZZ_SECONDS) -DPERCEIVER_BUILD_BENCH=OFF -DPERCEIVER_INSTALL=OFF \
	  -DPERCEIVER_WITH_DNNL=OFF $(CMAKE_FLAGS)
	cmake --build $(SANITIZE_BUILD) -j $(JOBS)
	cd $(SANITIZE_BUILD) && ctest --output-on-failure --timeout 900 -L '^(unit|data|io|train|fuzz)$$'

# The main job on the default data set: a synthetic Kinetics-layout set made with FFmpeg, the
# demo model (configs/demo.yaml) trained with configs/main.yaml, then evaluated.
DEMO_DIR ?= build/demo
demo: build
	@echo "== 1/3 synthetic Kinetics set: 8 classes x 24 train clips, and its HDF5 shards: 8 frames of 64x64," \
	  "48 kHz audio (data/make-synthetic-kinetics.sh)"
	@data/make-synthetic-kinetics.sh $(DEMO_DIR)/kinetics --bin $(BUILD)/bin || \
	  { echo "make demo-clean starts afresh"; exit 1; }
	@echo "== 2/3 training (perceiver-train --config_file_path configs/main.yaml)"
	@$(BUILD)/bin/perceiver-train --config_file_path configs/main.yaml --dataset_dir $(DEMO_DIR)/kinetics \
	  --logdir $(DEMO_DIR)/logs || { echo "a run left by an older demo? make demo-clean starts afresh"; exit 1; }
	@echo "== 3/3 evaluation of the last checkpoint (perceiver-eval)"
	$(BUILD)/bin/perceiver-eval --checkpoint $$(ls $(DEMO_DIR)/logs/checkpoints/ckpt-*.h5 | tail -1) --dataset_dir $(DEMO_DIR)/kinetics
	@clip="$$(ls $(DEMO_DIR)/kinetics/val/*/*.mp4 | head -1)"; \
	  $(BUILD)/bin/perceiver-eval --checkpoint $$(ls $(DEMO_DIR)/logs/checkpoints/ckpt-*.h5 | tail -1) \
	    --video "$$clip" --dataset_dir $(DEMO_DIR)/kinetics
	@echo "== results"
	@echo "   report:          $(DEMO_DIR)/logs/eval.json"
	@echo "   reconstructions: $$(ls -dv $(DEMO_DIR)/logs/eval/step-* | tail -1)/ (side-by-side MP4 with audio, WAV, PNG frame grid)"
	@echo "   TensorBoard:     tensorboard --logdir $(DEMO_DIR)/logs"
	@echo "   classify a clip: $(BUILD)/bin/perceiver-eval --checkpoint $$(ls $(DEMO_DIR)/logs/checkpoints/ckpt-*.h5 | tail -1) --video CLIP.mp4"

demo-clean:
	rm -rf $(DEMO_DIR)

# The demo's promise, checked from scratch in its own folder: video PSNR >= 25 dB on the validation
# clips after under 5 minutes of training (tests/train/check_demo.py). Not in `make test`: it takes
# both cores for 5 minutes, and its PSNR moves by tenths of a dB with the CPU's kernels.
demo-check: build
	rm -rf $(BUILD)/demo-check
	@$(MAKE) --no-print-directory demo DEMO_DIR=$(BUILD)/demo-check
	python3 tests/train/check_demo.py $(BUILD)/demo-check/logs

bench: build
	bench/run_ops.sh --threads $(JOBS)

clean:
	rm -rf $(BUILD)

# Container image and Kubernetes manifests (deploy/README.md).
.PHONY: image manifests
# The amd64 image with buildah (vfs storage, chroot isolation, debootstrap base; as root), smoke-tested.
# IMAGE_VARIANT=cuda builds the CUDA variant (the CUDA runtime libraries from this machine's toolkit).
IMAGE_VARIANT ?= cpu
IMAGE_TAG ?= localhost/perceiver:$(if $(filter cuda,$(IMAGE_VARIANT)),dev-cuda,dev)
image:
	deploy/build-image.sh --arch amd64 --variant $(IMAGE_VARIANT) --tag $(IMAGE_TAG) --jobs $(JOBS)

# Re-render deploy/manifests/ from deploy/values.yaml and validate them offline.
manifests:
	/usr/bin/python3 deploy/render.py
	/usr/bin/python3 tests/deploy/validate_manifests.py --quiet --schemas deploy/schemas deploy/manifests
