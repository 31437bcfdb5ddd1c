#!/bin/sh
# What the aarch64 cross-build (`make CROSS=aarch64-linux-gnu-`, docs/jetson.md) and its emulated tests need on a
# Debian 12 x86-64 machine: the cross compiler, qemu-user, Debian's arm64 libraries through multiarch, and the
# aarch64 CUDA headers and libraries from NVIDIA's wheels on PyPI, unpacked into a cache folder (AARCH64_DEPS, by
# default ~/.cache/pi0-aarch64). Called by `tools/install-deps.sh --aarch64`. Does nothing for what is already
# there; prints what it does; on failure one line says what and why, and it exits 1.
set -u
cache=${AARCH64_DEPS:-${XDG_CACHE_HOME:-$HOME/.cache}/pi0-aarch64}
py=/usr/bin/python3

# The CUDA pieces of CUDA 13.0 Update 2, the release of the x86-64 toolkit that compiles the device code: the runtime
# (cudart, linked statically), its headers (runtime, crt, CCCL, NVTX, and fatbinary_section.h, which nvcc's generated
# host code includes and only the nvcc wheel carries) and cuBLAS (cuBLASLt, linked dynamically: the Jetson's own is used).
wheels="nvidia-cuda-runtime==13.0.96 nvidia-cuda-crt==13.0.88 nvidia-cuda-cccl==13.0.85 nvidia-nvtx==13.0.85
        nvidia-cuda-nvcc==13.0.88 nvidia-cublas==13.1.0.3"
# cuobjdump, to show which GPU code the binaries carry (an x86-64 tool; its first release as a wheel is 13.2)
tool_wheel="nvidia-cuda-cuobjdump==13.2.51"

fail() { echo "install-deps-aarch64: $*"; exit 1; }
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=$(command -v sudo >/dev/null 2>&1 && echo sudo || echo none)
run_root() {
    [ "$SUDO" = none ] && fail "cannot run '$*': not root and no sudo"
    $SUDO "$@"
}
command -v dpkg >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1 || fail "no dpkg / apt-get (a Debian 12 machine is assumed)"
[ "$(dpkg --print-architecture)" = amd64 ] || fail "expected an amd64 (x86-64) host, found $(dpkg --print-architecture)"

# Debian packages. libwebsockets-dev is left out: its arm64 and amd64 packages both ship /usr/include/lws_config.h
# (which differ in one path string), so they cannot be installed together; its arm64 package is unpacked into the cache.
pk="gcc-aarch64-linux-gnu g++-aarch64-linux-gnu qemu-user-static file python3-pip libc6:arm64 libstdc++6:arm64
    libjansson-dev:arm64 libzstd-dev:arm64 libmsgpack-dev:arm64 libwebsockets17:arm64 libssl-dev:arm64 libcap-dev:arm64
    zlib1g-dev:arm64 libturbojpeg0-dev:arm64 libspng-dev:arm64"
missing=""
for p in $pk; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    log=$(mktemp)
    if ! dpkg --print-foreign-architectures | grep -qx arm64; then
        echo "install-deps-aarch64: dpkg --add-architecture arm64"
        run_root dpkg --add-architecture arm64 || fail "dpkg --add-architecture arm64 failed"
    fi
    echo "install-deps-aarch64: apt-get update"
    run_root apt-get update -qq >"$log" 2>&1 || { rm -f "$log"; fail "apt-get update failed: $(tail -n 1 "$log")"; }
    echo "install-deps-aarch64: installing $(echo $missing | wc -w) Debian package(s):$missing"
    if ! run_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >"$log" 2>&1; then
        msg=$(tail -n 1 "$log"); rm -f "$log"; fail "apt-get install failed: $msg"
    fi
    rm -f "$log"
fi

mkdir -p "$cache" || fail "cannot create the cache folder $cache"

# libwebsockets' arm64 archive and headers, unpacked from its Debian package (the same version as the amd64 one)
lws="$cache/libwebsockets"
lws_ver=$(dpkg-query -W -f='${Version}' libwebsockets17:arm64)
if [ "$(cat "$lws/VERSION" 2>/dev/null)" != "$lws_ver" ]; then
    echo "install-deps-aarch64: libwebsockets-dev:arm64 $lws_ver into $lws"
    tmp=$(mktemp -d)
    (cd "$tmp" && apt-get download "libwebsockets-dev:arm64=$lws_ver" >/dev/null 2>&1) ||
        { rm -rf "$tmp"; fail "apt-get download libwebsockets-dev:arm64=$lws_ver failed (run apt-get update?)"; }
    rm -rf "$lws" && mkdir -p "$lws" && dpkg-deb -x "$tmp"/libwebsockets-dev_*_arm64.deb "$lws" ||
        { rm -rf "$tmp" "$lws"; fail "cannot unpack libwebsockets-dev:arm64 into $lws"; }
    rm -rf "$tmp" "$lws/usr/share"
    echo "$lws_ver" > "$lws/VERSION"
fi

# unzip_wheels DEST PATTERN WHEEL...: the wheel members under nvidia/cu13/ that match PATTERN (a Python regex) into DEST
unzip_wheels() {
    dest=$1; pat=$2; shift 2
    "$py" - "$dest" "$pat" "$@" <<'EOF'
import os, re, sys, zipfile
dest, pat = sys.argv[1], re.compile(sys.argv[2])
for w in sys.argv[3:]:
    with zipfile.ZipFile(w) as z:
        for m in z.infolist():
            rel = m.filename[len("nvidia/cu13/"):] if m.filename.startswith("nvidia/cu13/") else None
            if rel is None or m.is_dir() or not pat.fullmatch(rel):
                continue
            out = os.path.join(dest, rel)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(m) as src, open(out, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
            os.chmod(out, 0o755 if rel.startswith("bin/") else 0o644)
EOF
}

# pip_get DIR ARCH WHEEL...: download the wheels for ARCH (no dependencies, binaries only) into DIR
pip_get() {
    dir=$1; arch=$2; shift 2
    log=$(mktemp)
    if ! "$py" -m pip download --no-deps --only-binary=:all: --platform "manylinux2014_$arch" --platform "manylinux_2_27_$arch" \
            -d "$dir" "$@" >"$log" 2>&1; then
        msg=$(grep -E "ERROR" "$log" | head -n 1); rm -f "$log"; rm -rf "$dir"
        fail "pip download $* failed: ${msg:-see pip's output}"
    fi
    rm -f "$log"
}

# The aarch64 CUDA headers and libraries (cuda/include, cuda/lib); cuBLASLt alone is ~600 MB unpacked
cuda="$cache/cuda"
if [ "$(cat "$cuda/VERSIONS" 2>/dev/null)" != "$(echo $wheels)" ]; then
    echo "install-deps-aarch64: aarch64 CUDA wheels ($(echo $wheels)) into $cuda (about 550 MB to download)"
    tmp=$(mktemp -d -p "$cache")
    pip_get "$tmp" aarch64 $wheels
    rm -rf "$cuda"
    unzip_wheels "$cuda" 'include/(?!nvblas|cublasXt).*|lib/libcudart_static\.a|lib/libcublasLt\.so\.13' "$tmp"/*.whl ||
        { rm -rf "$tmp" "$cuda"; fail "cannot unpack the CUDA wheels into $cuda"; }
    rm -rf "$tmp"
    [ -f "$cuda/include/cuda_runtime.h" ] && [ -f "$cuda/include/fatbinary_section.h" ] && [ -f "$cuda/lib/libcublasLt.so.13" ] ||
        { rm -rf "$cuda"; fail "the CUDA wheels lack cuda_runtime.h, fatbinary_section.h or libcublasLt.so.13"; }
    echo $wheels > "$cuda/VERSIONS"
fi

tools="$cache/tools"
if [ "$(cat "$tools/VERSIONS" 2>/dev/null)" != "$tool_wheel" ]; then
    echo "install-deps-aarch64: $tool_wheel (x86-64) into $tools"
    tmp=$(mktemp -d -p "$cache")
    pip_get "$tmp" x86_64 "$tool_wheel"
    rm -rf "$tools"
    unzip_wheels "$tools" 'bin/cuobjdump' "$tmp"/*.whl || { rm -rf "$tmp" "$tools"; fail "cannot unpack $tool_wheel"; }
    rm -rf "$tmp"
    [ -x "$tools/bin/cuobjdump" ] || { rm -rf "$tools"; fail "$tool_wheel has no bin/cuobjdump"; }
    echo "$tool_wheel" > "$tools/VERSIONS"
fi
