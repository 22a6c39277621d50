# flashgpt — build with `make`, test with `make test`.
#   make                 build/flashgpt (with CUDA when nvcc is found, else CPU only)
#   make test            CPU tests (and GPU tests when built; they skip without a GPU)
#   make test-cpu | test-gpu
#   make PRECISION=FP32  fp32 GPU trainer (debugging, tight tests); default BF16
#   make GPU_ARCH=90a    target architecture for nvcc (default 90a: H100/H200, wgmma)
#   make NO_CUDA=1       force the CPU-only build
GPU_ARCH ?= 90a
PRECISION ?= BF16
BUILD ?= build

CXX ?= g++
NVCC ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
ifeq ($(NO_CUDA),1)
NVCC :=
endif
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))

MARCH ?= $(shell grep -q avx2 /proc/cpuinfo 2>/dev/null && echo x86-64-v3 || echo x86-64-v2)
CXXFLAGS ?= -O3 -march=$(MARCH) -g
CXXFLAGS += -std=c++17 -fopenmp -Wall -Wextra -Wno-unused-parameter -I. -MMD -MP
LDFLAGS_CPU = -fopenmp -lpthread
GTEST_LIBS = -lgtest -lpthread

NVCCFLAGS ?= -O3 -g -lineinfo
NVCCFLAGS += -std=c++17 -I. -MMD -MP --expt-relaxed-constexpr -Xcompiler -fopenmp \
  -gencode arch=compute_$(GPU_ARCH),code=sm_$(GPU_ARCH) -DENABLE_$(PRECISION)
CUDA_LIBS = -L$(CUDA_HOME)/lib64 -lcudart -lcublasLt -lcublas -lnccl -lgomp -lpthread

# Sources by folder: host code (.cpp, g++) goes into libflashgpt_cpu.a, CUDA code (.cu, nvcc)
# into libflashgpt_cuda.a; bench/ holds the benchmark code of both kinds.
SRC_DIRS := kernels kernels/attention model data train bench
STUB_SRC := model/cuda_unavailable.cpp bench/cuda_unavailable.cpp
CPU_SRC  := $(filter-out train/main.cpp $(STUB_SRC),$(wildcard $(SRC_DIRS:%=%/*.cpp)))
# CPU-only programs (the CPU test binary; flashgpt without nvcc) link these instead of the
# CUDA code: the same functions, saying that they need the CUDA build.
STUB_OBJ := $(STUB_SRC:%.cpp=$(BUILD)/%.o)
CUDA_SRC := $(wildcard $(SRC_DIRS:%=%/*.cu))
CPU_OBJ  := $(CPU_SRC:%.cpp=$(BUILD)/%.o)
CUDA_OBJ := $(CUDA_SRC:%.cu=$(BUILD)/cuda/%.o)
# The CPU tests also check the GPU tests' tolerance rule on its plain bf16 baseline (CUDA-free).
TEST_CPU_OBJ := $(patsubst %.cpp,$(BUILD)/%.o,$(wildcard tests/cpu/*.cpp) tests/main.cpp \
  tests/gpu/plain_bf16_attention.cpp)
TEST_GPU_SRC := $(wildcard tests/gpu/*.cu tests/gpu/*.cpp)
TEST_GPU_OBJ := $(patsubst %,$(BUILD)/cuda/%.o,$(basename $(TEST_GPU_SRC)))

ifneq ($(NVCC),)
  WITH_CUDA := 1
  ALL_BINS := $(BUILD)/flashgpt $(BUILD)/test_cpu $(BUILD)/test_gpu
else
  WITH_CUDA := 0
  ALL_BINS := $(BUILD)/flashgpt $(BUILD)/test_cpu
endif

.PHONY: all train test test-cpu test-gpu bench clean
all: $(ALL_BINS)
train: $(BUILD)/flashgpt

# Rebuilt from scratch: a source that was deleted or moved must not linger in the archive.
$(BUILD)/libflashgpt_cpu.a: $(CPU_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/libflashgpt_cuda.a: $(CUDA_OBJ)
	@mkdir -p $(@D)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/%.o: %.cpp
	@mkdir -p $(@D)
	$(CXX) $(CXXFLAGS) -c $< -o $@

# ptxas reports wgmma instructions it had to serialize, or waits it injected (C7510-C7519), as
# "info" and builds on; kernels that hit them measured 13-33% slower
# (docs/notes/attention-experiments.md). So such a build fails, naming the file.
$(BUILD)/cuda/%.o: %.cu
	@mkdir -p $(@D)
	@rm -f $@.ptxas
	$(NVCC) $(NVCCFLAGS) -c $< -o $@ 2> $@.ptxas || { cat $@.ptxas >&2; rm -f $@.ptxas; exit 1; }
	@cat $@.ptxas >&2; if grep -q '(C751[0-9])' $@.ptxas; then rm -f $@ $@.ptxas; \
	  echo "error: $<: ptxas serialized wgmma or injected a wait (the C751x lines above);" \
	    "restructure the kernel (docs/notes/attention-experiments.md)" >&2; exit 1; fi; \
	  rm -f $@.ptxas

$(BUILD)/cuda/%.o: %.cpp
	@mkdir -p $(@D)
	$(NVCC) $(NVCCFLAGS) -x cu -c $< -o $@

ifeq ($(WITH_CUDA),1)
$(BUILD)/flashgpt: $(BUILD)/train/main.o $(BUILD)/libflashgpt_cuda.a $(BUILD)/libflashgpt_cpu.a
	$(NVCC) -gencode arch=compute_$(GPU_ARCH),code=sm_$(GPU_ARCH) -o $@ $^ $(CUDA_LIBS)
else
$(BUILD)/flashgpt: $(BUILD)/train/main.o $(STUB_OBJ) $(BUILD)/libflashgpt_cpu.a
	$(CXX) -o $@ $^ $(LDFLAGS_CPU)
endif

# The CPU test binary links no CUDA code: it builds and runs on a machine with no GPU.
$(BUILD)/test_cpu: $(TEST_CPU_OBJ) $(STUB_OBJ) $(BUILD)/libflashgpt_cpu.a
	$(CXX) -o $@ $^ $(GTEST_LIBS) $(LDFLAGS_CPU)

$(BUILD)/test_gpu: $(TEST_GPU_OBJ) $(BUILD)/tests/main.o $(BUILD)/libflashgpt_cuda.a $(BUILD)/libflashgpt_cpu.a
	$(NVCC) -gencode arch=compute_$(GPU_ARCH),code=sm_$(GPU_ARCH) -o $@ $^ $(GTEST_LIBS) $(CUDA_LIBS)

# GPU tests first, CPU tests last: the closing "N passed, N failed, N skipped" line is the
# CPU suite's, which runs everywhere (the GPU suite only skips without a device).
test: $(ALL_BINS)
ifeq ($(WITH_CUDA),1)
	./$(BUILD)/test_gpu
endif
	./$(BUILD)/test_cpu

test-cpu: $(BUILD)/test_cpu
	./$(BUILD)/test_cpu

test-gpu: $(BUILD)/test_gpu
	./$(BUILD)/test_gpu

bench: $(BUILD)/flashgpt
	python3 scripts/bench_train.py
	python3 scripts/bench_attention.py

clean:
	rm -rf $(BUILD)

-include $(CPU_OBJ:.o=.d) $(CUDA_OBJ:.o=.d) $(TEST_CPU_OBJ:.o=.d) $(TEST_GPU_OBJ:.o=.d) $(STUB_OBJ:.o=.d) $(BUILD)/train/main.d
