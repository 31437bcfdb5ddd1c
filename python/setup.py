"""Builds the package with the engine's shared library inside it.

`pip install ./python` runs the repository's Makefile for build/libpi0.so (with CUDA when make finds nvcc, as the
rest of the build) and installs it as pi0/libpi0.so, next to the ctypes binding. PI0_LIBRARY_FILE=/path/libpi0.so
installs a library built elsewhere instead; PI0_BUILD_DIR picks the build folder (default build).
"""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


def build_library():
    prebuilt = os.environ.get("PI0_LIBRARY_FILE")
    if prebuilt:
        if not os.path.isfile(prebuilt):
            raise SystemExit(f"pi0-engine: PI0_LIBRARY_FILE={prebuilt} does not exist")
        return prebuilt
    if not os.path.isfile(os.path.join(REPO, "Makefile")):
        raise SystemExit(f"pi0-engine: {REPO} has no Makefile: pip built the package from a copy of python/ (pip older "
                         "than 21.3 does; upgrade pip), or from an sdist; or set PI0_LIBRARY_FILE to a built libpi0.so")
    build = os.environ.get("PI0_BUILD_DIR", "build")
    target = os.path.join(build, "libpi0.so")
    jobs = str(max(1, min(os.cpu_count() or 1, 16)))
    try:
        subprocess.run(["make", "-C", REPO, "-j" + jobs, "BUILD=" + build, target], check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise SystemExit(f"pi0-engine: building {target} with the repository's Makefile failed ({e}); run "
                         "tools/install-deps.sh first (the README's first command)") from None
    return os.path.join(REPO, target) if not os.path.isabs(target) else target


class BuildPy(build_py):
    def run(self):
        super().run()
        lib = build_library()
        dst = os.path.join(self.build_lib, "pi0", "libpi0.so")
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copyfile(lib, dst)


class BinaryDistribution(Distribution):
    """The wheel holds a native library: tag it for this platform, not as pure Python."""
    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildPy}, distclass=BinaryDistribution)
