"""The virtualenv of the π0-FAST checks (fast_check.py, fast_policy_check.py): openpi's pins of transformers and
tokenizers, with sentencepiece, scipy and numpy, from PyPI, made once (PI0_FAST_VENV, default build/venv-fast) under a
lock that parallel test runs share. `enter(name, build)` returns at once inside that venv, else makes it if need be
and re-runs the calling script in it; no network for PyPI prints `NAME: 0 passed, 1 failed` and exits 1."""
import fcntl
import os
import subprocess
import sys

PINS = ["transformers==4.53.2", "tokenizers==0.21.4", "numpy==1.26.4", "scipy==1.15.3", "sentencepiece==0.2.0"]
PROBE = "import numpy, scipy, sentencepiece, tokenizers, transformers as t; assert t.__version__ == '4.53.2'"


def _have_packages():
    try:
        import numpy, scipy, sentencepiece, tokenizers, transformers  # noqa: F401
        return transformers.__version__ == "4.53.2"
    except ImportError:
        return False


def _ready(py):
    return os.path.exists(py) and subprocess.run([py, "-c", PROBE], capture_output=True).returncode == 0


def enter(name, build):
    if _have_packages():
        return
    venv = os.environ.get("PI0_FAST_VENV", "build/venv-fast")
    py = os.path.join(venv, "bin", "python")
    if not _ready(py):
        print("making %s: %s from PyPI (about a minute)" % (venv, " ".join(PINS)), flush=True)
        os.makedirs(os.path.dirname(os.path.abspath(venv)), exist_ok=True)
        with open(venv + ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not _ready(py):
                subprocess.run(["rm", "-rf", venv])
                tests = os.path.join(build, "tests")
                log = open(os.path.join(tests, "venv-fast.log"), "w") if os.path.isdir(tests) else None
                ok = subprocess.run([sys.executable, "-m", "venv", venv], stdout=log, stderr=log).returncode == 0 and \
                    subprocess.run([os.path.join(venv, "bin", "pip"), "install", "-q", "--disable-pip-version-check"] + PINS,
                                   stdout=log, stderr=log).returncode == 0
                if not ok:
                    print("FAIL could not install %s from PyPI into %s (log: %s/venv-fast.log)" % (PINS, venv, tests))
                    print("%s: 0 passed, 1 failed" % name)
                    sys.exit(1)
    os.execv(py, [py, os.path.abspath(sys.argv[0])] + sys.argv[1:])
