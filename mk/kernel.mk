# Kernel track: the CUDA verify-attention library (files/csrc), its binding's tests, benchmark, GPU check.
.PHONY: build-kernel test-kernel test-kernel-fast bench-kernel gpu-check gpu-rehearsal hostlib test-kernel-cpu \
  test-kernel-cpu-full bench-kernel-plan bench-kernel-model

# The supported arches come from build.sh, the one owner of the compute capability -> arch map.
KERNEL_BUILD_SH := $(ROOT)/files/csrc/build.sh
KERNEL_ARCHS := $(shell bash $(KERNEL_BUILD_SH) --list-arches)
KERNEL_NVCC ?= $(firstword $(wildcard /usr/local/cuda-13.0/bin/nvcc) $(shell command -v nvcc 2>/dev/null))
KERNEL_BUILD := $(ROOT)/build/kernel
# The torch venv is the one venv recipe of the project: mk/ext.mk's sglang-venv (scripts/sglang-venv.sh).
KERNEL_PY := $(SGLANG_VENV)/bin/python

# Build the kernel for one arch: make build-kernel ARCH=<arch>.
# make build-kernel ARCH=<one of KERNEL_ARCHS>  ->  build/kernel/<arch>/libkdtree_verify.so (+ build.log, ptxas report)
build-kernel:
	@test -n "$(ARCH)" || { echo "usage: make build-kernel ARCH=<one of: $(KERNEL_ARCHS)>" >&2; exit 2; }
	@test -n "$(KERNEL_NVCC)" || { echo "nvcc not found (install the CUDA toolkit or set KERNEL_NVCC)" >&2; exit 1; }
	@mkdir -p $(KERNEL_BUILD)/$(ARCH)
	@start=$$(date +%s); \
	  bash $(KERNEL_BUILD_SH) --arch $(ARCH) --out $(KERNEL_BUILD)/$(ARCH) --nvcc $(KERNEL_NVCC) 2>&1 \
	    | tee $(KERNEL_BUILD)/$(ARCH)/build.log; \
	  echo "build-kernel: $(ARCH) in $$(( $$(date +%s) - start )) s"

HOSTLIB_BUILD := $(ROOT)/build/hostlib
# The host-memory test double of the library (g++, fp32, no GPU).
# The host-memory TEST DOUBLE of the library (tests/doubles/hostlib: same C ABI, fp32 on the CPU; g++ only) -> build/hostlib/libkdtree_verify.so, for CPU engines under test (the real-engine test host's deploy builds it through the build role); never for a GPU host.
hostlib:
	bash $(ROOT)/tests/doubles/hostlib/build.sh --out $(HOSTLIB_BUILD)

# Kernel builds for every arch and the binding's CPU-side tests.
# Every arch build.sh supports (no GPU needed), exported symbols, ptxas report, build.sh, probe_library,
# the arch-map agreement, and the binding's CPU-side tests (argument validation, C helper bounds, error
# codes); GPU tests skip here.
test-kernel: venv sglang-venv
	@for arch in $(KERNEL_ARCHS); do $(MAKE) --no-print-directory build-kernel ARCH=$$arch | grep -E "^build-kernel:|Used|spill"; done
	$(KERNEL_PY) -m pytest -q -p no:cacheprovider tests/kernel --ignore=tests/kernel/cpu_emu

# make test-kernel-cpu FAULT=<build.sh --fault name>: the emulated library with that fault.
FAULT ?=
# The kernel's own source on a CPU emulator against the fp32 reference.
# The kernel's own source run on the CPU (tests/kernel/cpu_emu: g++ and a warp-synchronous emulator of
# ldmatrix / mma.sync / shfl / __syncthreads from the PTX ISA), against the fp32 reference: the short cases
# of every variant, ASan+UBSan and TSan runs, the fault builds and the emulator's hard errors (about 2 min
# on 2 cores; in make test's first phase). FAULT=last-tile|one-split builds that fault: the suite must fail.
test-kernel-cpu: venv sglang-venv
	KDTREE_EMU_FAULT=$(FAULT) $(KERNEL_PY) -m pytest -q -p no:cacheprovider tests/kernel/cpu_emu

# test-kernel-cpu with long prefixes and more random cases (long).
# The same with prefixes up to 5000 keys and 24 more seeded random cases (not in make test).
test-kernel-cpu-full: venv sglang-venv
	KDTREE_EMU_FAULT=$(FAULT) KDTREE_EMU_FULL=1 $(KERNEL_PY) -m pytest -q -p no:cacheprovider tests/kernel/cpu_emu \
	  --durations=10

# The kernel's work plan per benchmark batch: balance, no GPU.
# kernel_bench.py --plan with the CPU emulator's build of the kernel source: every benchmark batch's
# bytes, roofline and the balance of the library's own work plan (busiest SM / even share; 1.00 = even).
bench-kernel-plan: venv sglang-venv
	@bash $(ROOT)/tests/kernel/cpu_emu/build.sh --out $(ROOT)/build/cpu-emu-plan --lib-only
	$(KERNEL_PY) $(ROOT)/bench/kernel_bench.py --plan --lib $(ROOT)/build/cpu-emu-plan/libkdtree_verify.so \
	  | grep -E "^(plan|balance|triton)"

# The kernel's time model on the CPU: predicted warm us and % of copy against the goals.
# bench/kernel_model.py with the CPU emulator's build of the kernel source: the library's own plan for the
# goal shapes on 132 and 188 SMs, priced with the pinned H200 constants (T_fixed, t_tile, t_split);
# prints predicted warm us and % of copy bandwidth, fails when a goal is missed (seconds; in make test).
bench-kernel-model: venv sglang-venv
	@bash $(ROOT)/tests/kernel/cpu_emu/build.sh --out $(ROOT)/build/cpu-emu-model --lib-only
	$(KERNEL_PY) $(ROOT)/bench/kernel_model.py --lib $(ROOT)/build/cpu-emu-model/libkdtree_verify.so

# Quick kernel subset (< 1 min, no torch).
# Quick subset (< 1 min, no torch): library tests for every arch (rebuilds only if sources changed), the
# arch-map agreement test, and gpu-check's budget and tier logic (bench/gpu_check.py).
test-kernel-fast: venv
	$(VBIN)/pytest -q -p no:cacheprovider tests/kernel/test_library.py tests/kernel/test_arch_map.py \
	  tests/kernel/test_gpu_tiers.py

# gpu-check's --budget-s (seconds); empty: bench/gpu_check.py's default (docs/gpu-check.md).
BUDGET ?=
# GPU only: the kernel against SGLang's Triton kernel.
# GPU only: build for this GPU's arch and benchmark against SGLang's Triton kernel (out/gpu-check/).
bench-kernel:
	bash scripts/gpu-check.sh --skip-tests $(if $(BUDGET),--budget-s $(BUDGET))

# GPU only: the kernel's tiered check within one budget (BUDGET).
# GPU only: build, quick tier, quick benchmark, then the full tiers while BUDGET lasts; $${OUT:-out}/gpu-check/.
gpu-check:
	bash scripts/gpu-check.sh $(if $(BUDGET),--budget-s $(BUDGET))

GPU_REHEARSAL_VENV := $(ROOT)/.cache/gpu-rehearsal-venv
# No GPU: gpu-check rehearsed on the CPU in the GPU machine's software.
# No GPU: gpu-check rehearsed on the CPU in the GPU machine's software (Python 3.12, torch 2.11, triton
# 3.6 from the package index into .cache/, ~5 GB, built once); every step up to the first CUDA call.
# Not part of make test. Results in $${OUT:-out}/gpu-rehearsal/.
gpu-rehearsal:
	bash scripts/gpu-rehearsal.sh $(GPU_REHEARSAL_VENV)

TEST_TARGETS += test-kernel test-kernel-cpu bench-kernel-model
TEST_FAST_TARGETS += test-kernel-fast
