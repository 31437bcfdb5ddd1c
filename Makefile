# pi0 engine — one Makefile. `make help` lists the targets.
# Builds build/libpi0.a, build/pi0 and the tests; `make debug` does the same with ASan+UBSan in build-debug/.

CC      ?= gcc
# Cross-builds: CROSS is the toolchain's prefix (CROSS=aarch64-linux-gnu-: the Jetson build, docs/jetson.md, into
# build-aarch64). Everything target-specific below keys on the compiler's target, never on the build machine.
CROSS   ?=
ifneq ($(CROSS),)
CC      := $(CROSS)gcc
endif
TARGET  := $(shell $(CC) -dumpmachine)
ARCH    := $(firstword $(subst -, ,$(TARGET)))
MULTIARCH := $(shell $(CC) -print-multiarch)
LIBDIR_A := /usr/lib/$(MULTIARCH)
BUILD   ?= $(if $(CROSS),build-$(ARCH),build)
OPT     ?= -O3
SAN     ?=
WERROR  ?= $(if $(CI),-Werror,)
COMMIT  := $(shell git rev-parse --short HEAD 2>/dev/null || echo unknown)
CFLAGS  += -std=c11 -D_GNU_SOURCE $(OPT) -g -fopenmp -Wall -Wextra -Wshadow -Wno-unknown-pragmas $(WERROR) $(SAN) \
           -Iinclude -Isrc -DPI0_COMMIT='"$(COMMIT)"' -fPIC -fno-semantic-interposition
# Debian libraries are linked statically when their archives exist, so the binaries also run on the
# GPU machine (another distribution): jansson, zstd and libgomp.
JANSSON_A := $(wildcard $(LIBDIR_A)/libjansson.a)
ZSTD_A  := $(wildcard $(LIBDIR_A)/libzstd.a)
GOMP_A  := $(shell f=$$($(CC) -print-file-name=libgomp.a); [ -f "$$f" ] && echo $$f)
DEB_LIBS := $(if $(JANSSON_A),$(JANSSON_A),-ljansson) $(if $(ZSTD_A),$(ZSTD_A),-lzstd)
LDLIBS  += $(DEB_LIBS) $(if $(GOMP_A),$(GOMP_A) -lpthread -ldl,-fopenmp) -lm $(SAN)
SO_LIBS := -ljansson -lzstd -fopenmp -lm $(SAN)   # Debian's archives (jansson, gomp) are not position-independent: the .so links the shared ones

# CUDA backend: built when nvcc is found, for every GPU generation from Ampere on (CUDA_ARCHS: SASS for each; CUDA_PTX:
# PTX that newer GPUs compile at load time). Hopper (90a) runs its own kernels, the others the portable path
# (README, GPU). cudart is linked statically, cuBLASLt from /usr/local/cuda/lib64 (present on the GPU machine too).
# An aarch64 target is a Jetson: Orin (87) and Thor (110), with PTX that later Jetsons compile at load time.
ifeq ($(ARCH),aarch64)
CUDA_ARCHS ?= 87 110
CUDA_PTX   ?= 87
else
CUDA_ARCHS ?= 80 86 89 90a 100 120
CUDA_PTX   ?= 80
endif
# Hopper's kernels need sm_90a (wgmma, setmaxnreg): plain 90 would compile them as traps, and the backend cannot tell
# compute_90 code from compute_90a code when it picks the path at run time
ifneq ($(filter 90,$(CUDA_ARCHS) $(CUDA_PTX)),)
$(error CUDA_ARCHS / CUDA_PTX: 90 compiles Hopper's kernels as traps; use 90a (README, GPU))
endif
comma   := ,
CUDA_GENCODE := $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a),code=sm_$(a)) \
                $(if $(CUDA_PTX),-gencode arch=compute_$(CUDA_PTX)$(comma)code=compute_$(CUDA_PTX))
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
CUDA_HOME ?= /usr/local/cuda
# A cross-build compiles device code with the host's nvcc and host code with the cross g++ (-ccbin); the target's
# CUDA headers and libraries come from NVIDIA's aarch64 wheels, which tools/install-deps.sh --aarch64 unpacks into
# AARCH64_DEPS. The binaries find cuBLASLt where JetPack installs it, /usr/local/cuda/lib64.
AARCH64_DEPS ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/pi0-aarch64
ifneq ($(CROSS),)
CUDA_TARGET := $(AARCH64_DEPS)/cuda
ifneq ($(NVCC),)
ifeq ($(wildcard $(CUDA_TARGET)/VERSIONS),)
$(error CROSS=$(CROSS): no $(ARCH) CUDA libraries in $(CUDA_TARGET): run tools/install-deps.sh --aarch64, or build without CUDA: make CROSS=$(CROSS) NVCC=)
endif
# the target's CUDA headers (crt/) belong to one nvcc release: the wheels' must be the host nvcc's
NVCC_VER := $(shell $(NVCC) --version | sed -n 's/.*, V\([0-9.]*\)$$/\1/p')
ifeq ($(findstring nvidia-cuda-nvcc==$(NVCC_VER) ,$(file < $(CUDA_TARGET)/VERSIONS) ),)
$(error CROSS=$(CROSS): $(NVCC) is CUDA $(NVCC_VER), but the $(ARCH) CUDA headers in $(CUDA_TARGET) are for another release ($(filter nvidia-cuda-nvcc%,$(file < $(CUDA_TARGET)/VERSIONS))): tools/install-deps-aarch64.sh pins the wheels of the nvcc they go with)
endif
endif
CUDA_INC := -I$(CUDA_TARGET)/include
NV_HOST := -ccbin $(CROSS)g++ $(CUDA_INC) -isystem $(CUDA_TARGET)/include/cccl
CU_LIBS := -L$(CUDA_TARGET)/lib -Wl,-rpath,/usr/local/cuda/lib64 -l:libcublasLt.so.13 -lcudart_static -ldl -lrt -lstdc++
else
CUDA_INC := -I$(CUDA_HOME)/include
CU_LIBS := -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcublasLt -lcudart_static -lrt -lstdc++
endif
ifneq ($(NVCC),)
CU_SRC  := $(wildcard src/cuda/*.cu)
CFLAGS  += -DPI0_HAVE_CUDA $(CUDA_INC)
LDLIBS  += $(CU_LIBS)
SO_LIBS += $(CU_LIBS)
NVFLAGS ?= -O3 -std=c++17 $(CUDA_GENCODE) -lineinfo -Iinclude -Isrc -DPI0_HAVE_CUDA $(NV_HOST) \
           -Xcompiler -fPIC,-Wall,-Wextra,-Wno-unused-parameter $(if $(CI),-Werror all-warnings,)
endif
CU_OBJ  := $(CU_SRC:%.cu=$(BUILD)/%.o)
PY      ?= /usr/bin/python3
ifeq ($(ARCH),x86_64)
CFLAGS  += -march=x86-64-v3 -ffp-contract=fast   # AVX2 + FMA for the CPU GEMM (any x86 server since ~2015)
endif
# aarch64: Armv8.2-A with half precision is what Orin's Cortex-A78AE implements, and Thor's Neoverse V3AE (Armv9.2-A)
# implements all of it, so one binary runs on both. SVE is left out: Orin has none, and Thor's SVE2 vectors are 128 bits
# wide, the width of the NEON vectors the CPU GEMM compiles to (fused multiply-adds, as on x86).
ifeq ($(ARCH),aarch64)
CFLAGS  += -march=armv8.2-a+fp16 -ffp-contract=fast
endif

LIB_SRC := src/util.c src/safetensors.c src/ocdbt.c src/zarr.c src/orbax.c src/lerobot.c src/lerobot_pipeline.c src/config.c src/weights.c \
           src/model.c src/model_rtc.c src/model_fast.c src/backends.c \
           src/api_model.c src/api_session.c src/api_inputs.c src/tensors.c src/checkpoint.c src/tokenizer.c src/fast_json.c \
           src/fast_tokenizer.c src/fast_prompt.c src/image.c \
           src/norm_stats.c src/robot.c src/openpi_config.c src/pi0_policy.c src/fast_policy.c src/quant.c \
           src/cpu/cpu_backend.c src/cpu/cpu_weights.c src/cpu/cpu_decode.c
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(CU_OBJ)
CLI_SRC := tools/main.c tools/cli.c tools/bench.c tools/run.c tools/imagefile.c tools/check.c
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
TESTS   := test_unit test_golden test_errors test_image test_policy test_policy_api test_grad test_fast test_fast_model
TEST_BIN:= $(TESTS:%=$(BUILD)/tests/%) $(if $(NVCC),$(BUILD)/tests/test_cuda_ops $(BUILD)/tests/test_cuda_e2e,)
HDRS    := $(wildcard include/*.h src/*.h src/cpu/*.h tools/*.h tests/*.h)

.SECONDARY:
.PHONY: FORCE all test test-aarch64 test-cuda debug fuzz fuzz-build help clean fixtures check-ref bench-quick lab lab-no-nvcc

all: $(BUILD)/libpi0.a $(BUILD)/libpi0.so $(BUILD)/pi0 $(TEST_BIN)

$(BUILD)/%.o: %.c $(HDRS) $(BUILD)/flags.txt
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/src/cuda/%.o: src/cuda/%.cu $(wildcard src/cuda/*.cuh) $(HDRS) $(BUILD)/flags.txt
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -c $< -o $@

# the policy's float64 transforms must round like numpy: separate multiply and add, no FMA contraction
$(BUILD)/src/norm_stats.o $(BUILD)/src/robot.o $(BUILD)/src/pi0_policy.o $(BUILD)/src/fast_policy.o \
$(BUILD)/src/lerobot_pipeline.o: CFLAGS += -ffp-contract=off

# every object is compiled again when the compiler flags change (the commit id aside: bench.c has its own rule), so
# that a build folder from before a flag change (say -fPIC for the shared library) cannot link stale objects
FLAGS_ID := $(CC) $(filter-out -DPI0_COMMIT%,$(CFLAGS)) | $(NVCC) $(NVFLAGS)
$(BUILD)/flags.txt: FORCE
	@mkdir -p $(BUILD); echo '$(FLAGS_ID)' | cmp -s - $@ || echo '$(FLAGS_ID)' > $@

# the commit id is compiled into bench.c: rebuild it when HEAD moves
$(BUILD)/commit.txt: FORCE
	@mkdir -p $(BUILD); echo '$(COMMIT)' | cmp -s - $@ || echo '$(COMMIT)' > $@
$(BUILD)/tools/bench.o: $(BUILD)/commit.txt
FORCE:

# the archive is made afresh, and again when its member list changes, so that a renamed or removed source leaves
# no stale member behind (after a rename, the old object beside the new one defined its symbols twice)
$(BUILD)/objs.txt: FORCE
	@mkdir -p $(BUILD); echo '$(LIB_OBJ)' | cmp -s - $@ || echo '$(LIB_OBJ)' > $@
$(BUILD)/libpi0.a: $(LIB_OBJ) $(BUILD)/objs.txt
	rm -f $@ && ar rcs $@ $(LIB_OBJ)

# The shared library (the Python package loads it): the same objects (all compiled -fPIC), the Debian archives
# inside it with their symbols hidden, and only the functions of include/pi0.h exported (a version script made from it).
$(BUILD)/libpi0.map: include/pi0.h
	@mkdir -p $(dir $@)
	(echo '{ global:'; grep -oE '[ *]pi0_[a-z0-9_]+\(' $< | tr -d '( *' | sort -u | sed 's/$$/;/'; echo 'local: *; };') > $@
$(BUILD)/libpi0.so: $(LIB_OBJ) $(BUILD)/libpi0.map
	$(CC) -shared -o $@ $(LIB_OBJ) -Wl,--version-script=$(BUILD)/libpi0.map -Wl,--exclude-libs,ALL -Wl,-soname,libpi0.so \
	    $(SO_LIBS)

# Image files in the CLI: TurboJPEG linked statically; libspng has no static archive in Debian, so its
# shared library is copied next to the binary (build/lib, found through an $$ORIGIN rpath) and travels
# with the build folder to the GPU machine.
TJ_A    := $(wildcard $(LIBDIR_A)/libturbojpeg.a)
SPNG_SO := $(firstword $(wildcard $(LIBDIR_A)/libspng.so.0))
IMG_LIBS := $(if $(TJ_A),$(TJ_A),-lturbojpeg) -lspng -lz -Wl,-rpath,'$$ORIGIN/lib'
$(BUILD)/lib/libspng.so.0: $(SPNG_SO)
	@mkdir -p $(dir $@)
	$(if $(SPNG_SO),cp -L $< $@,touch $@)

$(BUILD)/pi0: $(CLI_OBJ) $(BUILD)/libpi0.a | $(BUILD)/lib/libspng.so.0
	$(CC) $(CFLAGS) $^ -o $@ $(IMG_LIBS) $(LDLIBS)

$(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libpi0.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# The CUDA tests link the CUDA objects compiled again with the tests' hooks (src/cuda/testing.h: launch counters,
# injected graph faults, forced tile widths, under PI0_CUDA_TESTING); the library carries none of them.
CU_TOBJ := $(CU_SRC:%.cu=$(BUILD)/testhooks/%.o)
$(BUILD)/testhooks/src/cuda/%.o: src/cuda/%.cu $(wildcard src/cuda/*.cuh) $(HDRS) $(BUILD)/flags.txt
	@mkdir -p $(dir $@)
	$(NVCC) $(NVFLAGS) -DPI0_CUDA_TESTING -c $< -o $@
$(BUILD)/libpi0-testhooks.a: $(LIB_SRC:%.c=$(BUILD)/%.o) $(CU_TOBJ)
	rm -f $@ && ar rcs $@ $^
$(BUILD)/tests/test_cuda_ops $(BUILD)/tests/test_cuda_e2e: $(BUILD)/tests/%: $(BUILD)/tests/%.o $(BUILD)/libpi0-testhooks.a
	$(CC) $(CFLAGS) $^ -o $@ $(LDLIBS)

# The kernel lab (bench/kernels, its README says what each lab is; run on the GPU machine by bench/kernels/run_lab.sh
# run): `make lab` whenever nvcc is found. Each lab links libpi0.a; the *_prof labs compile the production kernels'
# files again with a lab switch (src/cuda/lab_hooks.cuh), which turns their compiled-out stamps on.
LAB      := $(BUILD)/lab
LAB_NV   := $(NVCC) -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -lineinfo -Iinclude -Isrc -Isrc/cuda -DPI0_HAVE_CUDA
LAB_LINK := $(BUILD)/libpi0.a $(if $(JANSSON_A),$(JANSSON_A),-ljansson) $(if $(ZSTD_A),$(ZSTD_A),-lzstd) -Xcompiler -fopenmp \
            -lcublasLt -lgomp
LAB_BINS := gemv_smallm decode_attn denoise_chain gateup_lab gelu_epilogue pdl_drain wgmma_rate lt_search lt_fp8 chain_prof \
            wg_prof fw_prof
LAB_HDRS := $(wildcard bench/kernels/*.cuh) $(wildcard src/cuda/*.cuh)
lab: $(if $(NVCC),$(LAB_BINS:%=$(LAB)/%),lab-no-nvcc)
lab-no-nvcc:
	@echo "make lab: no nvcc found (the kernel lab needs the CUDA toolkit)"; exit 1
$(LAB)/%: bench/kernels/%.cu $(BUILD)/libpi0.a $(LAB_HDRS)
	@mkdir -p $(dir $@)
	$(LAB_NV) $< $(LAB_LINK) -o $@
$(LAB)/wgmma_rate: bench/kernels/wgmma_rate.cu $(LAB_HDRS)
	@mkdir -p $(dir $@)
	$(LAB_NV) $< -o $@
$(LAB)/lt_search: bench/kernels/lt_search.cu
	@mkdir -p $(dir $@)
	$(LAB_NV) $< -o $@ -lcublasLt
$(LAB)/lt_fp8: bench/kernels/lt_fp8.cu
	@mkdir -p $(dir $@)
	$(LAB_NV) $< -o $@ -lcublasLt
# denoise_chain with the phase stamps of the few-row products and decode attention (LAB_PROF=1 prints them)
$(LAB)/chain_prof: bench/kernels/denoise_chain.cu src/cuda/gemv.cu src/cuda/attn_decode.cu $(BUILD)/libpi0.a $(LAB_HDRS)
	@mkdir -p $(dir $@)
	$(LAB_NV) -DGEMV_PROF $< src/cuda/gemv.cu src/cuda/attn_decode.cu $(LAB_LINK) -o $@
# the warpgroup product (17-64 rows) with its phase stamps
$(LAB)/wg_prof: bench/kernels/wg_prof.cu src/cuda/gemv.cu $(BUILD)/libpi0.a $(LAB_HDRS)
	@mkdir -p $(dir $@)
	$(LAB_NV) -DWG_PROF $< src/cuda/gemv.cu $(LAB_LINK) -o $@
# the prefix's wgmma flash kernel with per-block, per-step stamps
$(LAB)/fw_prof: bench/kernels/fw_prof.cu src/cuda/attn_flash_wg.cu $(BUILD)/libpi0.a $(LAB_HDRS)
	@mkdir -p $(dir $@)
	$(LAB_NV) -DFW_PROF -DPI0_CUDA_TESTING $< src/cuda/attn_flash_wg.cu $(LAB_LINK) -o $@

# the test dependencies (Debian packages) first: `make test` is all the set-up a bare machine needs after the build
test:
	@tools/install-deps.sh --test
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) PY=$(PY) sh tests/run.sh

# The aarch64 (Jetson) cross-build, checked and tested on this x86-64 machine (docs/jetson.md): its dependencies, the
# build, the binaries' architecture and GPU code, NEON in the CPU backend's hot loops, then the CPU test suite under
# qemu-user (tests/run_emulated.sh).
AARCH64_BUILD ?= build-aarch64
test-aarch64:
	@tools/install-deps.sh --test
	@tools/install-deps.sh --aarch64
	@$(MAKE) --no-print-directory CROSS=aarch64-linux-gnu- BUILD=$(AARCH64_BUILD) all
	@sh tools/check-aarch64.sh $(AARCH64_BUILD)
	@PY=$(PY) sh tests/run_emulated.sh $(AARCH64_BUILD)

# GPU tests (on the device machine): op tests vs the CPU twins, tiny fixtures, resources.
# FULL="DIR_PI0 DIR_PI05" adds the full-size GPU-vs-CPU comparison.
test-cuda: all
	$(BUILD)/tests/test_cuda_ops
	$(BUILD)/tests/test_cuda_e2e $(if $(FULL),--full $(FULL),)
	PI0_CUDA_PATH=portable $(BUILD)/tests/test_cuda_ops
	PI0_CUDA_PATH=portable $(BUILD)/tests/test_cuda_e2e $(if $(FULL),--full $(FULL),)

debug:
	$(MAKE) BUILD=build-debug OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" \
	    CUDA_ARCHS=90a CUDA_PTX= test   # the sanitizers do not reach device code: one GPU target is enough here

# libFuzzer targets (clang): safetensors header, config.json, tokenizer .model, FAST tokenizer.json + processor config
# and FAST decoding (ids, prompts), norm stats + robot observations, LeRobot config.json + observations, whole LeRobot
# policy directories, OCDBT + zarr, whole Orbax params directories, JPEG / PNG images. FUZZ_SECONDS per target. UBSan
# findings halt like ASan's.
FUZZ_SECONDS ?= 30
FUZZ_OUT := -artifact_prefix=$(BUILD)/fuzz/   # crash/leak reproducers go to the build folder, not the repo root
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE -g -O1 -Iinclude -Isrc -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all
FUZZ_SRC := src/util.c src/safetensors.c src/config.c src/tokenizer.c src/norm_stats.c src/robot.c src/ocdbt.c src/zarr.c \
            src/lerobot.c src/lerobot_pipeline.c src/fast_json.c src/fast_tokenizer.c src/fast_prompt.c
fuzz-build: $(BUILD)/fuzz/fuzz_safetensors $(BUILD)/fuzz/fuzz_config $(BUILD)/fuzz/fuzz_tokenizer $(BUILD)/fuzz/fuzz_policy \
            $(BUILD)/fuzz/fuzz_ocdbt $(BUILD)/fuzz/fuzz_image $(BUILD)/fuzz/fuzz_lerobot $(BUILD)/fuzz/fuzz_orbax \
            $(BUILD)/fuzz/fuzz_lerobot_dir $(BUILD)/fuzz/fuzz_fast_tokenizer $(BUILD)/fuzz/fuzz_fast_decode
# Orbax checkpoints as a whole (orbax.c, with its OpenMP decode tasks: clang's libomp)
$(BUILD)/fuzz/fuzz_orbax: tests/fuzz/fuzz_orbax.c tests/fuzz/fuzz_dir.h src/orbax.c $(FUZZ_SRC) $(HDRS)
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -fopenmp $< src/orbax.c $(FUZZ_SRC) -o $@ -ljansson -lzstd -lm
# images: the CLI's decoder (TurboJPEG, libspng) and the library's resize
$(BUILD)/fuzz/fuzz_image: tests/fuzz/fuzz_image.c tools/imagefile.c src/image.c src/util.c $(HDRS) tools/imagefile.h
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) $< tools/imagefile.c src/image.c src/util.c -o $@ -lturbojpeg -lspng -lm
$(BUILD)/fuzz/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_SRC) $(HDRS) tests/fuzz/fuzz_arrays.h tests/fuzz/fuzz_dir.h
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) $< $(FUZZ_SRC) -o $@ -ljansson -lzstd -lm
fuzz: fuzz-build
	@mkdir -p $(BUILD)/fuzz/corpus_st $(BUILD)/fuzz/corpus_cfg
	cp tests/fixtures/tiny-pi0/b1.in.safetensors tests/fixtures/tiny-pi05/b2.out.safetensors $(BUILD)/fuzz/corpus_st/
	cp tests/fixtures/tiny-pi0/config.json $(BUILD)/fuzz/corpus_cfg/
	cp tests/fuzz/regress_config/* $(BUILD)/fuzz/corpus_cfg/   # an image grid that overflowed int (fixed in 3ca7642)
	$(BUILD)/fuzz/fuzz_safetensors $(FUZZ_OUT) -max_total_time=$(FUZZ_SECONDS) -max_len=65536 $(BUILD)/fuzz/corpus_st
	$(BUILD)/fuzz/fuzz_config $(FUZZ_OUT) -max_total_time=$(FUZZ_SECONDS) $(BUILD)/fuzz/corpus_cfg
	@mkdir -p $(BUILD)/fuzz/corpus_tok
	$(PY) -c "import sentencepiece as s, io; s.SentencePieceTrainer.train(sentence_iterator=iter(['pick up the red block', 'open the drawer 42']*50), model_prefix='$(BUILD)/fuzz/corpus_tok/seed', vocab_size=60, model_type='bpe', byte_fallback=False, hard_vocab_limit=False, minloglevel=2)" && rm -f $(BUILD)/fuzz/corpus_tok/seed.vocab
	$(PY) -c "import sentencepiece as s, io; s.SentencePieceTrainer.train(sentence_iterator=iter(['pick up the red block', 'open the drawer 42']*50), model_prefix='$(BUILD)/fuzz/corpus_tok/seed_bytes', vocab_size=300, model_type='bpe', byte_fallback=True, normalization_rule_name='identity', hard_vocab_limit=False, minloglevel=2)" && rm -f $(BUILD)/fuzz/corpus_tok/seed_bytes.vocab   # with the 256 <0xXX> byte pieces
	cp tests/fuzz/regress_tokenizer/* $(BUILD)/fuzz/corpus_tok/   # inputs that once leaked (fixed in 143f3c3) or overflowed the prompt (fixed in 1c9ab5e)
	$(BUILD)/fuzz/fuzz_tokenizer $(FUZZ_OUT) -max_total_time=$(FUZZ_SECONDS) -max_len=16384 $(BUILD)/fuzz/corpus_tok
	@mkdir -p $(BUILD)/fuzz/corpus_fast $(BUILD)/fuzz/corpus_fast_decode
	$(PY) tests/fuzz/make_seed_fast.py $(BUILD)/fuzz/corpus_fast $(BUILD)/fuzz/corpus_fast_decode   # FAST tokenizer.json + config, .model + ids
	$(BUILD)/fuzz/fuzz_fast_tokenizer $(FUZZ_OUT) -max_total_time=$(FUZZ_SECONDS) -max_len=65536 $(BUILD)/fuzz/corpus_fast
	$(BUILD)/fuzz/fuzz_fast_decode $(FUZZ_OUT) -max_total_time=$(FUZZ_SECONDS) -max_len=16384 $(BUILD)/fuzz/corpus_fast_decode
	@mkdir -p $(BUILD)/fuzz/corpus_pol
	(printf '\001'; cat tests/fixtures/tiny-pi0/assets/tiny/norm_stats.json) > $(BUILD)/fuzz/corpus_pol/stats
	printf '\006\002\002\001\010\000\000' > $(BUILD)/fuzz/corpus_pol/state
	$(BUILD)/fuzz/fuzz_policy $(FUZZ_OUT) -max_total_time=$(FUZZ_SECONDS) -max_len=8192 $(BUILD)/fuzz/corpus_pol
	@mkdir -p $(BUILD)/fuzz/corpus_lerobot
	printf '\001{"type": "pi05", "chunk_size": 10, "input_features": {"observation.images.a": {"type": "VISUAL", "shape": [3, 8, 8]}, "observation.state": {"type": "STATE", "shape": [8]}}, "empty_cameras": 1, "image_resolution": [224, 224], "use_peft": false}' > $(BUILD)/fuzz/corpus_lerobot/config
	printf '\004\000\000\003\005\007\003\003\001\001\010\000\000' > $(BUILD)/fuzz/corpus_lerobot/obs
	printf '\004\000\000\003\004\004\003\003\001\372\002\011\000%048d' 0 > $(BUILD)/fuzz/corpus_lerobot/empty_state   # an empty 2^31 x 2^33 x 0 state (fixed in 57807e5)
	$(BUILD)/fuzz/fuzz_lerobot $(FUZZ_OUT) -max_total_time=$(FUZZ_SECONDS) -max_len=8192 $(BUILD)/fuzz/corpus_lerobot
	@mkdir -p $(BUILD)/fuzz/corpus_ocdbt
	cp tests/fuzz/seeds_ocdbt/* $(BUILD)/fuzz/corpus_ocdbt/   # orbax-checkpoint's manifests + root nodes; a tensorstore tree of 1 KB nodes (make_seed_orbax.py)
	cp tests/fuzz/regress_ocdbt/* $(BUILD)/fuzz/corpus_ocdbt/   # a hostile tree that shares nodes (refused: a node has one parent)
	$(BUILD)/fuzz/fuzz_ocdbt $(FUZZ_OUT) -max_total_time=$(FUZZ_SECONDS) -max_len=16384 $(BUILD)/fuzz/corpus_ocdbt
	@mkdir -p $(BUILD)/fuzz/corpus_orbax
	cp tests/fuzz/seeds_orbax/* $(BUILD)/fuzz/corpus_orbax/   # tiny π0 / π0.5 params dirs, zarr and OCDBT (make_seed_orbax.py)
	for s in tests/fuzz/seeds_orbax/*; do PI0_FUZZ_VERBOSE=1 $(BUILD)/fuzz/fuzz_orbax $$s 2>&1 | grep -q "^orbax_load: OK" \
	  || { echo "fuzz_orbax: seed $$s no longer loads: PI0_FUZZ_VERBOSE=1 $(BUILD)/fuzz/fuzz_orbax $$s"; exit 1; }; done
	$(BUILD)/fuzz/fuzz_orbax $(FUZZ_OUT) -max_total_time=$(FUZZ_SECONDS) -max_len=65536 $(BUILD)/fuzz/corpus_orbax
	@mkdir -p $(BUILD)/fuzz/corpus_lerobot_dir
	cp tests/fuzz/seeds_lerobot_dir/* $(BUILD)/fuzz/corpus_lerobot_dir/   # LeRobot policy dirs as tests/lerobot_check.py writes them
	for s in tests/fuzz/seeds_lerobot_dir/*; do PI0_FUZZ_VERBOSE=1 $(BUILD)/fuzz/fuzz_lerobot_dir $$s 2>&1 | grep -q "^lerobot_pipeline_load: OK" \
	  || { echo "fuzz_lerobot_dir: seed $$s no longer loads: PI0_FUZZ_VERBOSE=1 $(BUILD)/fuzz/fuzz_lerobot_dir $$s"; exit 1; }; done
	$(BUILD)/fuzz/fuzz_lerobot_dir $(FUZZ_OUT) -max_total_time=$(FUZZ_SECONDS) -max_len=65536 $(BUILD)/fuzz/corpus_lerobot_dir
	@mkdir -p $(BUILD)/fuzz/corpus_img
	$(PY) -c "from PIL import Image; import random; r = random.Random(1); \
	  [Image.frombytes(m, (13, 7), bytes(r.randrange(256) for _ in range(13 * 7 * len(m)))).save('$(BUILD)/fuzz/corpus_img/%s.%s' % (m, e)) \
	   for m in ('RGB', 'L', 'RGBA', 'LA') for e in ('png', 'jpg') if not (e == 'jpg' and 'A' in m)]"
	$(BUILD)/fuzz/fuzz_image $(FUZZ_OUT) -max_total_time=$(FUZZ_SECONDS) -max_len=65536 $(BUILD)/fuzz/corpus_img

# Regenerate the golden fixtures with the independent PyTorch reference, and run its self-checks.
fixtures:
	$(PY) tools/reference/make_fixtures.py
	$(PY) tools/reference/make_fast_fixtures.py
check-ref:
	$(PY) tools/reference/check_ref.py

bench-quick: $(BUILD)/pi0
	$(BUILD)/pi0 bench --workload all

# pi0-server: its rules live next to its code.
-include server/server.mk

help:
	@echo "make              build build/libpi0.a, build/pi0 and the tests"
	@echo "make test         build and run every test that needs no GPU (unit, golden fixtures, bad input, CLI)"
	@echo "make test-cuda    GPU tests on the device machine (FULL=\"DIR_PI0 DIR_PI05\" adds full-size checks)"
	@echo "make CROSS=aarch64-linux-gnu-   the Jetson (aarch64) cross-build into build-aarch64 (docs/jetson.md)"
	@echo "make test-aarch64 that cross-build, checked, and its CPU tests under qemu"
	@echo "make lab          the kernel lab (bench/kernels) into build/lab, when nvcc is found"
	@echo "make debug        the same under ASan + UBSan in build-debug/"
	@echo "make fuzz         libFuzzer on the safetensors, config.json, tokenizer .model, FAST tokenizer, policy, OCDBT/zarr and image parsers (FUZZ_SECONDS=30 each)"
	@echo "make test-server  pi0-server tests (protocol, openpi-client from PyPI, load, faults, HAProxy)"
	@echo "make fuzz-server  libFuzzer on the server's msgpack-numpy decoder (also part of make fuzz)"
	@echo "make fixtures     regenerate tests/fixtures with tools/reference (PyTorch)"
	@echo "make check-ref    self-checks of the PyTorch reference"
	@echo "make bench-quick  pi0 bench on every workload (reduced sizes on the CPU)"
	@echo "make clean"

clean:
	rm -rf build build-debug build-aarch64
