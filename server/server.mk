# pi0-server, included by the Makefile: the openpi websocket policy server, its tests and its
# fuzz target. libwebsockets and msgpack-c (and libwebsockets' libcap and zlib) are linked statically
# when their Debian archives exist, so the binary runs on the GPU machine (Ubuntu) too; OpenSSL, which
# libwebsockets.a is built against, stays dynamic (libssl.so.3: present on Debian 12 and Ubuntu 24.04).
# Cross-builds take libwebsockets' archive and headers from its target package, unpacked into AARCH64_DEPS: Debian's
# arm64 and amd64 packages cannot be installed side by side (tools/install-deps-aarch64.sh).
LWS_DIR   := $(if $(CROSS),$(AARCH64_DEPS)/libwebsockets/usr,/usr)
LWS_A     := $(wildcard $(LWS_DIR)/lib/$(MULTIARCH)/libwebsockets.a)
SRV_INC   := -Iserver $(if $(CROSS),-I$(LWS_DIR)/include,)
MSGPACK_A := $(wildcard $(LIBDIR_A)/libmsgpackc.a)
CAP_A     := $(wildcard $(LIBDIR_A)/libcap.a)
Z_A       := $(wildcard $(LIBDIR_A)/libz.a)
SRV_LIBS  := $(if $(LWS_A),$(LWS_A) $(if $(CAP_A),$(CAP_A),-lcap) $(if $(Z_A),$(Z_A),-lz),-lwebsockets) \
             $(if $(MSGPACK_A),$(MSGPACK_A),-lmsgpackc) -lssl -lcrypto -lpthread -ldl
SRV_HDRS  := $(wildcard server/*.h) include/pi0.h
# the protocol layer: everything but main.c and the policy binding, unit-tested without a policy
SRV_CORE  := $(addprefix $(BUILD)/server/,msgnp.o msgnp_encode.o engine.o ws.o)

.PHONY: test-server fuzz-server

all: $(BUILD)/pi0-server $(BUILD)/tests/test_server

$(BUILD)/server/%.o: server/%.c $(SRV_HDRS) $(BUILD)/flags.txt
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SRV_INC) -c $< -o $@

$(BUILD)/tests/server/%.o: tests/server/%.c $(SRV_HDRS) tests/server/wsclient.h tests/test.h $(BUILD)/flags.txt
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(SRV_INC) -Itests -c $< -o $@

$(BUILD)/tests/test_server: $(BUILD)/tests/server/test_server.o $(SRV_CORE)
	$(CC) $(CFLAGS) $^ -o $@ $(SRV_LIBS) $(LDLIBS)

$(BUILD)/pi0-server: $(BUILD)/server/main.o $(BUILD)/server/policy_backend.o $(SRV_CORE) $(BUILD)/libpi0.a
	$(CC) $(CFLAGS) $^ -o $@ $(SRV_LIBS) $(LDLIBS)

test-server: $(BUILD)/tests/test_server
	sh tests/server/run.sh $(BUILD)

# libFuzzer on the request decoder (msgnp_decode: scan + msgpack-c + numpy checks); FUZZ_SECONDS.
# `make fuzz` runs it too.
$(BUILD)/fuzz/fuzz_msgpack: tests/fuzz/fuzz_msgpack.c server/msgnp.c $(SRV_HDRS)
	@mkdir -p $(dir $@)
	clang $(FUZZ_CFLAGS) -Iserver $< server/msgnp.c -o $@ -lmsgpackc -ljansson
fuzz-server: $(BUILD)/fuzz/fuzz_msgpack
	@mkdir -p $(BUILD)/fuzz/corpus_msgpack
	$(PY) tests/server/fuzz_seeds.py $(BUILD)/fuzz/corpus_msgpack
	cp tests/fuzz/regress_msgpack/* $(BUILD)/fuzz/corpus_msgpack/   # inputs that once failed (a 255-byte map key)
	$(BUILD)/fuzz/fuzz_msgpack $(FUZZ_OUT) -max_total_time=$(FUZZ_SECONDS) -max_len=16384 $(BUILD)/fuzz/corpus_msgpack
fuzz: fuzz-server
