"""pi0 — Physical Intelligence's π0 / π0.5 / π0-FAST robot policies, run in-process by the pi0 engine (libpi0).

    import pi0
    policy = pi0.Policy("checkpoints/pi05_libero", config="pi05_libero", tokenizer="paligemma_tokenizer.model")
    result = policy.infer({"observation/image": img, "observation/wrist_image": wrist,
                           "observation/state": state, "prompt": "pick up the bowl"})
    result["actions"]        # numpy float64 [H, D], unnormalised, the robot's own action dimensions

The same call shape as openpi's `policy.infer(obs)`; numpy in and out. Observation arrays that are C-contiguous,
native-endian and of a dtype the engine reads are passed to the library as they are (no copy); every call
releases the GIL while the engine works.

Classes: Policy (observation -> action chunk: openpi's transforms, norm stats, tokenizer, LeRobot policy
directories), Model (model-level inputs -> normalised actions, as `pi0 infer`), Tokenizer (PaliGemma's
SentencePiece model, for Model users). Errors raise pi0.Error (pi0.InputError, also a ValueError, for bad
arguments, files and shapes) with the library's message.
"""
import ctypes
import json
import operator
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from . import _native as N
from ._native import lib

__all__ = ["Policy", "Model", "Tokenizer", "Error", "InputError", "backend_available", "library_path"]
__version__ = "0.1.0"

library_path = N.library_path

_INPUT_STATUSES = (1, 3, 4)   # PI0_ERR_ARG, PI0_ERR_FORMAT, PI0_ERR_SHAPE


class Error(Exception):
    """A failure reported by the engine. `status` is the C status name ("PI0_ERR_SHAPE"), `message` its detail."""

    def __init__(self, status: str, message: str):
        self.status = status
        self.message = message
        super().__init__(message if message else status)


class InputError(Error, ValueError):
    """Bad input: an argument, a file's contents, or an observation's key, shape or dtype."""


def _fail(status: int, context: str = "") -> Error:
    msg = (lib.pi0_last_error() or b"").decode("utf-8", "replace")   # this thread's message (ctypes calls run here)
    name = N.STATUS_NAMES[status] if 0 <= status < len(N.STATUS_NAMES) else f"status {status}"
    if context:
        msg = f"{context}: {msg}" if msg else context
    return (InputError if status in _INPUT_STATUSES else Error)(name, msg)


def _check(status: int, context: str = "") -> None:
    if status != N.OK:
        raise _fail(status, context)


def _bad(message: str) -> InputError:
    return InputError("PI0_ERR_SHAPE", message)


def _int(x: Any, what: str, lo: int, hi: int) -> int:
    """An integer lo..hi (no float truncation, no wrap-around in the C types), or InputError naming `what`."""
    try:
        v = operator.index(x)
    except TypeError:
        raise InputError("PI0_ERR_ARG", f"{what}: expected an integer, found {type(x).__name__} {x!r:.40}") from None
    if not lo <= v <= hi:
        raise InputError("PI0_ERR_ARG", f"{what}: expected {lo}..{hi}, found {v}")
    return v


def _float(x: Any, what: str) -> float:
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, np.integer, np.floating)):
        raise InputError("PI0_ERR_ARG", f"{what}: expected a number, found {type(x).__name__} {x!r:.40}")
    return float(x)


def _utf8(text: str, what: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InputError("PI0_ERR_FORMAT", f"{what}: not encodable as UTF-8 ({e.reason})") from None


_INT32 = 2 ** 31 - 1


def _str(b: Optional[bytes]) -> Optional[str]:
    return None if b is None else b.decode("utf-8", "replace")


def _cstr(s: Any, what: str) -> bytes:
    """A str argument that the library reads as a C string: UTF-8 without NUL, since C stops at the first NUL (it would
    take "pi0_libero" + NUL + "junk" for "pi0_libero"). Bytes and other types are refused, not guessed at."""
    if not isinstance(s, str):
        raise InputError("PI0_ERR_ARG", f"{what}: expected a str, found {type(s).__name__} {s!r:.40}")
    if "\0" in s:
        raise InputError("PI0_ERR_ARG", f"{what}: contains a NUL character ({s!r:.60})")
    return _utf8(s, what)


def _opt_cstr(s: Any, what: str) -> Optional[bytes]:
    return None if s is None else _cstr(s, what)


def _flag(x: Any, what: str) -> bool:
    """True / False (numpy's too) or 1 / 0: a string such as "false" is refused rather than taken as true."""
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)) and x in (0, 1):
        return bool(x)
    raise InputError("PI0_ERR_ARG", f"{what}: expected True or False, found {type(x).__name__} {x!r:.40}")


def _backend(name: str, device: int) -> int:
    if not isinstance(name, str):   # (a numpy array would compare element-wise below)
        raise InputError("PI0_ERR_ARG", f"backend: expected 'auto', 'cpu' or 'cuda', found {type(name).__name__}")
    if name == "cpu":
        return N.BACKEND_CPU
    if name == "cuda":
        return N.BACKEND_CUDA
    if name == "auto":
        return N.BACKEND_CUDA if lib.pi0_backend_check(N.BACKEND_CUDA, device) == N.OK else N.BACKEND_CPU
    raise InputError("PI0_ERR_ARG", f"backend: expected 'auto', 'cpu' or 'cuda', found {name!r}")


def backend_available(backend: str = "cuda", device: int = 0) -> Tuple[bool, str]:
    """Whether `backend` ("cpu" or "cuda") can run here, without loading a model; (False, the reason) otherwise.
    CUDA needs a library built with nvcc found and a GPU of compute capability 8.0 or later at `device`."""
    try:
        kind = _backend(backend, _int(device, "device", 0, 1024))
    except InputError as e:
        return False, e.message
    st = lib.pi0_backend_check(kind, device)
    return (True, "") if st == N.OK else (False, _fail(st).message)


def _path(p, what: str) -> bytes:
    """A path (str, bytes or os.PathLike) as the library's C string; one holding a NUL is refused, as open() does:
    the library would stop reading it there and open another file."""
    try:
        b = p if isinstance(p, bytes) else os.fsencode(p)
    except TypeError:
        raise InputError("PI0_ERR_ARG", f"{what}: expected a path, found {type(p).__name__}") from None
    if b"\0" in b:
        raise InputError("PI0_ERR_ARG", f"{what}: the path contains a NUL character ({p!r:.80})")
    return b


_STAGES = {"vision": 1, "prefix": 2, "expert": 4}   # pi0.h PI0_STAGE_*
_PRECISIONS = {"bf16": 0, "int8": 1, "fp8": 2}       # pi0.h pi0_precision


def _precision(precision, quant_stages):
    """precision "bf16" | "int8" | "fp8" and quant_stages (None = all the precision has a path for; else an iterable of
    "vision", "prefix", "expert", or one comma-separated string) as pi0.h's pi0_precision and PI0_STAGE_* bits
    (docs/precision.md)."""
    if precision not in _PRECISIONS:
        raise InputError("PI0_ERR_ARG", f"precision: expected 'bf16', 'int8' or 'fp8', found {precision!r:.80}")
    if quant_stages is None:
        return _PRECISIONS[precision], 0
    names = quant_stages.split(",") if isinstance(quant_stages, str) else list(quant_stages)
    bits = 0
    for n in names:
        if n not in _STAGES:
            raise InputError("PI0_ERR_ARG", f"quant_stages: expected vision, prefix or expert, found {n!r:.80}")
        bits |= _STAGES[n]
    if precision == "bf16" or not bits:
        raise InputError("PI0_ERR_ARG", "quant_stages: needs precision='int8' or 'fp8' and at least one stage")
    return _PRECISIONS[precision], bits


def _model_params(backend: str, device: int, threads: int, action_horizon: int, max_token_len: int,
                  quiet: bool, precision: str = "bf16", quant_stages=None, action_dim: int = 0) -> N.ModelParams:
    device = _int(device, "device", 0, 1024)
    prec, stages = _precision(precision, quant_stages)
    return N.ModelParams(backend=_backend(backend, device), n_threads=_int(threads, "threads", 0, 4096), device=device,
                         quiet=int(_flag(quiet, "quiet")),
                         action_horizon=_int(action_horizon or 0, "action_horizon", 0, 4096),
                         max_token_len=_int(max_token_len or 0, "max_token_len", 0, 4096),
                         precision=prec, quant_stages=stages, action_dim=_int(action_dim or 0, "action_dim", 0, 4096))


# numpy dtypes the library reads as they are (native byte order only: dict lookups of '>f4' miss)
_DTYPES = {np.dtype(np.uint8): N.DT_U8, np.dtype(np.float32): N.DT_F32, np.dtype(np.float64): N.DT_F64,
           np.dtype(np.int32): N.DT_I32, np.dtype(np.int64): N.DT_I64, np.dtype(np.bool_): N.DT_BOOL,
           np.dtype(np.float16): N.DT_F16}
_DTYPE_WORDS = "uint8, float16, float32, float64, int32, int64 or bool"
# The largest observation array any of the library's readers takes: an image of sides up to 8192 with 3 channels
# (src/robot.c get_image; src/lerobot_pipeline.c LR_MAX_SIDE, where a leading batch axis of 1 may come first); state
# vectors are far shorter. An array outside these bounds is refused by every key that reads it, so a view that
# would need a copy is judged on its shape first: a broadcast view of a few bytes can describe terabytes.
_MAX_SIDE = 8192
_MAX_ELEMENTS = 3 * _MAX_SIDE * _MAX_SIDE


def _c_array(key: str, value: Any) -> Union[np.ndarray, str]:
    """An observation value as an array the library can read (the same object when it already is one), or why it
    cannot be one: such a value is left out, as openpi ignores keys its transforms do not read, and the reason is
    given if the policy turns out to need the key."""
    if isinstance(value, np.ndarray):
        a = value
    else:
        try:
            a = np.asarray(value)
        except (TypeError, ValueError) as e:
            return f"a {type(value).__name__} that is no numeric array ({e})"
    if a.dtype not in _DTYPES or not (a.flags.c_contiguous and a.flags.aligned):
        if a.dtype.kind in "biuf" and a.dtype.newbyteorder("=") in _DTYPES:   # another byte order, strided, unaligned
            if a.ndim > 4:
                return f"{a.ndim} dimensions {list(a.shape)}, at most 4"
            if a.size > _MAX_ELEMENTS or max(a.shape, default=0) > _MAX_SIDE:
                return (f"a non-contiguous {a.dtype} view of shape {list(a.shape)}, larger than any array the "
                        f"engine reads (sides of at most {_MAX_SIDE}, {_MAX_ELEMENTS} elements): not copied")
            a = np.require(a, dtype=a.dtype.newbyteorder("="), requirements="CA")
        else:
            return f"dtype {a.dtype}, which the engine does not read ({_DTYPE_WORDS})"
    if a.ndim > 4:
        return f"{a.ndim} dimensions {list(a.shape)}, at most 4"
    return a


def _prompt_text(key: str, v: Any) -> Optional[str]:
    if v is None:
        return None
    if isinstance(v, np.ndarray) and v.dtype.kind == "U" and v.size == 1:   # openpi's TokenizePrompt calls .item()
        v = v.item()
    if isinstance(v, (bytes, bytearray)):   # DROID clients send bytes
        try:
            v = bytes(v).decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputError("PI0_ERR_FORMAT", f"{key}: invalid UTF-8 ({e})") from None
    if not isinstance(v, str):
        raise InputError("PI0_ERR_FORMAT", f"{key}: expected a str, found {type(v).__name__}")
    if "\0" in v:
        raise InputError("PI0_ERR_FORMAT", f"{key}: contains a NUL character")
    return v


def _floats(x: Any, what: str, shape: Tuple[int, ...]) -> np.ndarray:
    """float32 C-contiguous and aligned (the same object when it already is) of the given shape. The library refuses
    non-finite values itself, with the index. An array's shape is checked before it is converted (a copy)."""
    if isinstance(x, np.ndarray) and x.shape != shape:
        raise _bad(f"{what}: expected shape {list(shape)}, found {list(x.shape)}")
    try:
        a = np.require(x, dtype=np.float32, requirements="CA")
    except (TypeError, ValueError) as e:
        raise _bad(f"{what}: expected float32 numbers of shape {list(shape)} ({e})") from None
    if a.shape != shape:
        raise _bad(f"{what}: expected shape {list(shape)}, found {list(a.shape)}")
    return a


_KEYS: Dict[str, bytes] = {}   # observation keys encoded once (a robot sends the same few keys every time)


def _key_bytes(key: str) -> bytes:
    b = _KEYS.get(key)
    if b is None:
        b = _utf8(key, f"observation key {key!r:.80}")
        if len(_KEYS) < 4096:
            _KEYS[key] = b
    return b


class _Closing:
    """`with pi0.Policy(...) as p:` closes the engine's objects at the end of the block."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class _Obs:
    """One observation converted for pi0_policy_prepare; holds every buffer the C structures point into."""
    __slots__ = ("c", "keep", "rtc", "skipped")

    def __init__(self):
        self.keep = []
        self.rtc = None
        self.skipped = {}


_RTC_KEYS = ("executed", "inference_delay", "execution_horizon", "schedule", "max_guidance_weight", "prev_chunk", "mode")


class Policy(_Closing):
    """A served policy in-process: openpi's observation dict in, its result dict out (docs/python.md).

    checkpoint: openpi's PyTorch conversion, an Orbax checkpoint (params/) or a LeRobot policy directory.
    config: an openpi config name ("pi05_libero", "pi0_droid", "pi0_fast_droid", ...) that sets the robot transform,
      delta actions, default prompt and norm-stats asset; or robot ("libero" | "droid" | "aloha") without one. A
      LeRobot directory takes neither: its own processor files say it all.
    tokenizer: PaliGemma's SentencePiece model (paligemma_tokenizer.model); required.
    fast_tokenizer: π0-FAST's action tokenizer, the directory of Hugging Face's physical-intelligence/fast
      (tokenizer.json, processor_config.json) or its tokenizer.json; required for a π0-FAST checkpoint, refused for
      π0 / π0.5. action_dim: π0-FAST's chunk width (0 = the config's, else the checkpoint's). A π0-FAST policy decodes
      greedily (up to 256 tokens), takes no noise, steps or rtc, and its infer results add "zero_chunk": True when the
      tokens held no actions (openpi's zero chunk, unnormalised); `zero_chunks` counts them over the policy's life.
    backend: "auto" (CUDA when this library has it and a usable GPU is at `device`, else the CPU), "cpu", "cuda".
    max_batch: observations per infer_batch; steps: flow-matching steps (None = 10); threads: CPU threads (0 = all
    cores).
    asset_id, default_prompt, delta_actions (None = the config's), action_horizon, max_token_len: as `pi0 run`.
    precision: "bf16", "int8" or "fp8"; quant_stages: the 8-bit stages ("vision", "prefix", "expert"; None = all the
    precision has a path for: fp8 has none for the expert), as
    `pi0 infer --precision --quant-stages` (docs/precision.md; check your checkpoint first: `pi0 check-precision`).

    Thread safety: infer and infer_batch may be called from several threads; observations are prepared
    concurrently (resize, normalisation, tokenizer) and the model runs one batch at a time. The real-time chunking
    state (the last chunk) is the policy's: one robot per Policy when rtc uses `executed`.
    """

    def __init__(self, checkpoint, config: Optional[str] = None, robot: Optional[str] = None, tokenizer=None,
                 backend: str = "auto", device: int = 0, max_batch: int = 1, steps: Optional[int] = None,
                 threads: int = 0, asset_id: Optional[str] = None, default_prompt: Optional[str] = None,
                 delta_actions: Optional[bool] = None, action_horizon: int = 0, max_token_len: int = 0,
                 quiet: bool = False, precision: str = "bf16", quant_stages=None, fast_tokenizer=None,
                 action_dim: int = 0):
        self._p = None
        self._lock = threading.Lock()           # one run at a time (pi0_policy_run)
        self._idle = threading.Condition()      # close() waits for the calls in flight (prepare runs unlocked)
        self._users = 0
        if tokenizer is None:
            raise InputError("PI0_ERR_ARG", "tokenizer: the path of paligemma_tokenizer.model is required")
        max_batch = _int(max_batch, "max_batch", 1, 4096)
        steps = 0 if steps is None else _int(steps, "steps", 1, 1000)
        pp = N.PolicyParams(
            model=_model_params(backend, device, threads, action_horizon, max_token_len, quiet, precision, quant_stages,
                                action_dim),
            config=_opt_cstr(config, "config"), robot=_opt_cstr(robot, "robot"),
            tokenizer=_path(tokenizer, "tokenizer"), asset_id=_opt_cstr(asset_id, "asset_id"),
            default_prompt=_opt_cstr(default_prompt, "default_prompt"),
            delta_actions=0 if delta_actions is None else (1 if _flag(delta_actions, "delta_actions") else -1),
            max_batch=max_batch, num_steps=steps,
            fast_tokenizer=None if fast_tokenizer is None else _path(fast_tokenizer, "fast_tokenizer"))
        p = ctypes.c_void_p()
        _check(lib.pi0_policy_load(ctypes.byref(p), _path(checkpoint, "checkpoint"), ctypes.byref(pp)))
        self._p = p
        info = N.PolicyInfo()
        lib.pi0_policy_get_info(p, ctypes.byref(info))
        mi = N.ModelInfo()
        lib.pi0_model_get_info(info.model, ctypes.byref(mi))
        self._H, self._D = info.action_horizon, info.action_dim   # the returned chunk
        self._mH, self._A = mi.action_horizon, mi.action_dim      # the model's (noise, RTC chunks)
        self._max_batch = info.max_batch
        self._task_key = "task" if info.lerobot is not None else None
        self._rtc_defaults = (info.rtc_horizon, info.rtc_schedule, info.rtc_max_weight)
        self._chunk = None   # model-space chunk of the last infer, for real-time chunking
        self._fast = bool(mi.fast)
        self.zero_chunks = 0
        """π0-FAST: the chunks so far whose tokens held no actions (openpi's zero chunk, unnormalised)."""
        self.metadata: Dict[str, Any] = json.loads(_str(info.metadata_json) or "{}")
        """What openpi's server sends a client first ({} or ALOHA's reset pose; a LeRobot policy's features)."""
        self.info: Dict[str, Any] = {
            "robot": _str(info.robot_name), "config": _str(info.config), "action_horizon": info.action_horizon,
            "action_dim": info.action_dim, "max_batch": info.max_batch, "quantile_norm": bool(info.quantile),
            "delta_actions": bool(info.delta_actions), "discrete_state": bool(info.discrete_state),
            "asset_id": _str(info.asset_id), "default_prompt": _str(info.default_prompt),
            "lerobot": _str(info.lerobot), "backend": _str(lib.pi0_session_backend(info.session)),
            "device": _str(lib.pi0_session_device(info.session)), "format": _str(mi.format), "pi05": bool(mi.pi05),
            "fast": bool(mi.fast),
            "model_action_horizon": mi.action_horizon, "model_action_dim": mi.action_dim,
            "max_token_len": mi.max_token_len, "n_params": mi.n_params,
            "rtc_defaults": {"execution_horizon": info.rtc_horizon, "schedule": N.SCHEDULES[info.rtc_schedule],
                             "max_guidance_weight": info.rtc_max_weight}}

    # ---- life cycle ----
    def close(self) -> None:
        """Frees the model and its session now (also done when the object is collected). Calls in flight on other
        threads finish first; later calls raise pi0.Error."""
        with self._idle:
            p, self._p = self._p, None
            while self._users:
                self._idle.wait()
        if p:
            lib.pi0_policy_free(p)

    def __del__(self):
        if getattr(self, "_p", None):
            lib.pi0_policy_free(self._p)
            self._p = None

    def _acquire(self):
        with self._idle:
            if not self._p:
                raise Error("PI0_ERR_ARG", "the policy is closed")
            self._users += 1
            return self._p

    def _release(self) -> None:
        with self._idle:
            self._users -= 1
            if not self._users:
                self._idle.notify_all()

    @property
    def backend(self) -> str:
        """"cpu" or "cuda": where the model runs."""
        return self.info["backend"]

    # ---- observations ----
    def _convert(self, obs: Mapping, noise, seed: Optional[int], rtc: Optional[Mapping], what: str) -> _Obs:
        if type(obs) is not dict and not isinstance(obs, Mapping):
            raise _bad(f"{what}: expected a dict of arrays, found {type(obs).__name__}")
        o = _Obs()
        keep = o.keep
        arrays: List[Tuple[bytes, np.ndarray]] = []
        skipped: Dict[str, str] = {}
        found = {"prompt": None, "noise": None}
        top = ("prompt", "noise", self._task_key)

        def walk(m: Mapping, prefix: str, level: int) -> None:
            for k, v in m.items():
                if not isinstance(k, str):
                    raise _bad(f"{what}: key {k!r} of '{prefix}': keys must be strings")
                key = prefix + k
                if "\0" in k:   # keys reach the library as C strings: 'observation/state' + NUL + 'x' is the state
                    raise InputError("PI0_ERR_FORMAT", f"{what}: key {key!r:.80} contains a NUL character")
                if type(v) is np.ndarray and v.dtype.kind not in "USO" and not (level == 0 and k in top):
                    add(key, v)   # the common case, first
                elif level == 0 and (k == "prompt" or k == self._task_key):
                    if v is None:   # None: no prompt (the default prompt, else "Prompt is required")
                        continue
                    if found["prompt"] is not None:
                        raise _bad(f"{key}: the prompt comes once (as 'prompt'" +
                                   (" or as 'task')" if self._task_key else ")"))
                    found["prompt"] = _prompt_text(key, v)
                elif level == 0 and k == "noise":
                    found["noise"] = v
                elif type(v) is dict or isinstance(v, Mapping):
                    if level >= 7:
                        raise _bad(f"{key}: maps nested deeper than 8 levels")
                    walk(v, key + "/", level + 1)
                elif v is None or isinstance(v, (str, bytes)):
                    continue   # strings other than the prompt: no policy reads them (openpi ignores them too)
                elif isinstance(v, np.ndarray) and v.dtype.kind in "USO":
                    continue
                else:
                    add(key, v)

        def add(key: str, v: Any) -> None:
            a = _c_array(key, v)
            if isinstance(a, str):
                skipped[key] = a
            else:
                arrays.append((_key_bytes(key), a))

        walk(obs, "", 0)
        if skipped and self._task_key:   # LeRobot reads or refuses every key: a skipped camera would read as absent
            key, why = next(iter(skipped.items()))
            raise _bad(f"{what}: '{key}' was given as {why} (a LeRobot policy reads every key it is sent)")
        o.skipped = skipped
        c = N.Observation()
        if arrays:
            ca = (N.Array * len(arrays))()
            for i, (kb, a) in enumerate(arrays):
                s = ca[i]
                s.key, s.dtype, s.ndim, s.data = kb, _DTYPES[a.dtype], a.ndim, a.ctypes.data
                for d in range(a.ndim):
                    s.shape[d] = a.shape[d]
            keep.append(ca)
            keep.append(arrays)
            c.arrays, c.n_arrays = ca, len(arrays)
        if found["prompt"] is not None:
            pb = _utf8(found["prompt"], "prompt")
            keep.append(pb)
            c.prompt = pb
        if noise is not None and found["noise"] is not None:
            raise _bad(f"{what}: noise given twice (the argument and the observation's 'noise')")
        nz = noise if noise is not None else found["noise"]
        if nz is not None:
            a = nz if isinstance(nz, np.ndarray) else _floats(nz, f"{what}: noise", np.shape(nz))
            if a.ndim == 3 and a.shape[0] == 1:
                a = a[0]
            a = _floats(a, f"{what}: noise", (self._mH, self._A))
            keep.append(a)
            c.noise = a.ctypes.data
        if seed is not None:
            c.seed = _int(seed, "seed", 0, 2 ** 64 - 1)
        if rtc is not None:
            c.rtc = ctypes.pointer(self._rtc_request(rtc, o, what))
        o.c = c
        return o

    def _rtc_request(self, rtc: Mapping, o: _Obs, what: str) -> N.RtcRequest:
        if not isinstance(rtc, Mapping):
            raise InputError("PI0_ERR_ARG", f"{what}: rtc: expected a dict ({', '.join(_RTC_KEYS)})")
        for k in rtc:
            if k not in _RTC_KEYS:
                raise InputError("PI0_ERR_ARG", f"{what}: rtc: unknown key '{k}' (expected {', '.join(_RTC_KEYS)})")
        hz, sched, maxw = self._rtc_defaults
        r = N.RtcRequest(delay=_int(rtc.get("inference_delay", 0), f"{what}: rtc.inference_delay", 0, 4096),
                         horizon=_int(rtc.get("execution_horizon", hz), f"{what}: rtc.execution_horizon", 0, 4096),
                         schedule=sched, max_weight=_float(rtc.get("max_guidance_weight", maxw),
                                                           f"{what}: rtc.max_guidance_weight"))
        if "schedule" in rtc:
            s = rtc["schedule"].lower() if isinstance(rtc["schedule"], str) else None
            if s not in N.SCHEDULES:
                raise InputError("PI0_ERR_ARG", f"{what}: rtc.schedule: expected ZEROS, ONES, LINEAR or EXP, found {rtc['schedule']!r}")
            r.schedule = N.SCHEDULES.index(s)
        if "mode" in rtc:
            if not isinstance(rtc["mode"], str) or rtc["mode"] not in ("exact", "lerobot"):
                raise InputError("PI0_ERR_ARG", f"{what}: rtc.mode: expected 'exact' or 'lerobot', found {rtc['mode']!r}")
            r.mode = N.RTC_EXACT if rtc["mode"] == "exact" else N.RTC_LEROBOT
        executed = _int(rtc.get("executed", 0), f"{what}: rtc.executed", 0, self._mH)
        if rtc.get("prev_chunk") is not None:
            prev = rtc["prev_chunk"]
            prev = prev if isinstance(prev, np.ndarray) else _floats(prev, f"{what}: rtc.prev_chunk", np.shape(prev))
            if prev.ndim != 2 or prev.shape[1] != self._A or prev.shape[0] > self._mH:
                raise _bad(f"{what}: rtc.prev_chunk: expected shape [0..{self._mH}, {self._A}], found {list(prev.shape)}")
            prev = _floats(prev, f"{what}: rtc.prev_chunk", prev.shape)
        else:
            chunk = self._chunk
            if chunk is None:   # the first chunk has nothing to guide towards: unguided, as the server does
                prev = np.zeros((0, self._A), np.float32)
            else:
                prev = chunk[executed:]
        o.keep.append(prev)
        r.prev, r.n_prev = (prev.ctypes.data if prev.shape[0] else None), prev.shape[0]
        o.rtc = r
        return r

    @staticmethod
    def _prepare(p, o: _Obs, what: str) -> ctypes.c_void_p:
        x = ctypes.c_void_p()
        st = lib.pi0_policy_prepare(p, ctypes.byref(o.c), ctypes.byref(x))
        if st != N.OK:
            e = _fail(st, what)
            for key, why in o.skipped.items():   # "missing 'state'" when state came as something unreadable
                if f"'{key}'" in e.message:
                    e = type(e)(e.status, f"{e.message} ('{key}' was given as {why})")
            raise e
        return x

    # ---- inference ----
    def infer(self, obs: Mapping, noise: Optional[np.ndarray] = None, *, seed: Optional[int] = None,
              rtc: Optional[Mapping] = None) -> Dict[str, Any]:
        """Runs one observation; returns {"actions": float64 [H, D], "policy_timing": {"infer_ms", "total_ms"}} (a
        π0-FAST policy's also "zero_chunk": True when its tokens held no actions, docs/fast.md 5.3).

        obs: openpi's observation dict: the robot's keys nested ({"images": {"cam_high": ...}}) or flattened with
          '/' ("observation/image"), images uint8 or float (x255, as openpi), HWC or CHW, any size; "prompt" (a
          LeRobot policy also takes "task"); an optional "noise". Keys the policy does not read are ignored
          (a LeRobot policy reads every key).
        noise: float32 [H, A] (the model's horizon and action width, 32): the start of the flow; None = drawn
          from `seed` (None or 0: the policy's own random stream).
        rtc: real-time chunking towards the previous chunk (docs/model.md 3.11), keys as pi0-server's request:
          executed (rows of the last chunk the robot ran), inference_delay, execution_horizon, schedule,
          max_guidance_weight, or prev_chunk (float32 [n, A], model space) instead of this policy's last chunk;
          mode "lerobot" (default: LeRobot's form) or "exact" (the paper's, through the expert's transpose).
        """
        o = self._convert(obs, noise, seed, rtc, "observation")
        p = self._acquire()
        x = None
        try:
            x = self._prepare(p, o, "observation")
            out = np.empty((self._H, self._D), np.float64)
            tm = N.PolicyTiming()
            chunk = np.empty((self._mH, self._A), np.float32)
            with self._lock:
                xs = (ctypes.c_void_p * 1)(x)
                _check(lib.pi0_policy_run(p, xs, 1, out.ctypes.data, ctypes.byref(tm)), "inference")
                _check(lib.pi0_policy_chunk(p, 0, chunk.ctypes.data))
                self._chunk = chunk
                self.zero_chunks += tm.zero_chunks
        finally:
            if x:
                lib.pi0_prepared_free(x)
            self._release()
        result = {"actions": out, "policy_timing": {"infer_ms": tm.model_ms, "total_ms": tm.total_ms}}
        if self._fast:
            result["zero_chunk"] = tm.zero_chunks > 0
        return result

    def infer_batch(self, observations: Sequence[Mapping], noise: Optional[np.ndarray] = None, *,
                    seeds: Optional[Sequence[int]] = None,
                    rtc: Optional[Sequence[Optional[Mapping]]] = None) -> List[Dict[str, Any]]:
        """Runs B = len(observations) (1..max_batch) observations as one batch; one result dict per observation,
        equal to what infer returns for it alone. noise: float32 [B, H, A]; seeds: one per observation; rtc: one
        dict or None per observation, each with its own prev_chunk (the policy's last chunk is not used)."""
        if isinstance(observations, Mapping) or not isinstance(observations, Sequence):
            raise InputError("PI0_ERR_ARG", "infer_batch: expected a list of observation dicts")
        B = len(observations)
        if not 1 <= B <= self._max_batch:
            raise InputError("PI0_ERR_ARG", f"infer_batch: {B} observations, the policy holds 1..{self._max_batch} "
                                            "(max_batch)")
        nz = None
        if noise is not None:
            nz = _floats(noise, "noise", (B, self._mH, self._A))
        for name, v in (("seeds", seeds), ("rtc", rtc)):
            if v is not None and (not isinstance(v, Sequence) or isinstance(v, (str, bytes)) or len(v) != B):
                raise InputError("PI0_ERR_ARG", f"infer_batch: {name}: expected a list of {B} entries, one per observation")
        if rtc is not None and any(r is not None and (not isinstance(r, Mapping) or r.get("prev_chunk") is None)
                                   for r in rtc):
            raise InputError("PI0_ERR_ARG", "infer_batch: rtc of a batch element: a dict with its prev_chunk, or None")
        convs = [self._convert(ob, None if nz is None else nz[b], None if seeds is None else seeds[b],
                               None if rtc is None else rtc[b], f"observation {b}") for b, ob in enumerate(observations)]
        xs = (ctypes.c_void_p * B)()
        p = self._acquire()
        try:
            for b, o in enumerate(convs):
                xs[b] = self._prepare(p, o, f"observation {b}")
            out = np.empty((B, self._H, self._D), np.float64)
            tm = N.PolicyTiming()
            with self._lock:
                _check(lib.pi0_policy_run(p, xs, B, out.ctypes.data, ctypes.byref(tm)), "inference")
                self._chunk = None   # a batch is no robot's chunk: rtc `executed` runs unguided after it
                self.zero_chunks += tm.zero_chunks
        finally:
            for b in range(B):
                if xs[b]:
                    lib.pi0_prepared_free(xs[b])
            self._release()
        timing = {"infer_ms": tm.model_ms, "total_ms": tm.total_ms}
        return [{"actions": out[b], "policy_timing": dict(timing)} for b in range(B)]

    def last_chunk(self) -> Optional[np.ndarray]:
        """The model-space chunk (float32 [H, A], normalised, before the output transforms) of the last infer:
        what rtc's prev_chunk is made of. None before the first."""
        return None if self._chunk is None else self._chunk.copy()

    def warmup(self, batch: int = 1, prompt: Optional[str] = None) -> float:
        """Runs one synthetic batch so that the first real call does not pay one-time costs (CUDA module loading,
        graph capture); `prompt`: the one the real calls will send (its length sets the model's shapes; default: the
        default prompt or "warm up"). Returns the milliseconds taken."""
        ms = ctypes.c_double()
        batch = _int(batch, "warmup: batch", 1, self._max_batch)
        text = _opt_cstr(prompt, "warmup: prompt")
        p = self._acquire()
        try:
            with self._lock:
                _check(lib.pi0_policy_warmup_prompt(p, batch, text, ctypes.byref(ms)), "warmup")
        finally:
            self._release()
        return ms.value

    def save_inputs(self, obs: Mapping, path, noise=None, *, seed: Optional[int] = None) -> None:
        """Writes the model inputs the policy makes of `obs` (after every transform) as a safetensors file, the
        names of `pi0 infer --inputs`: for checking the transforms against another implementation."""
        o = self._convert(obs, noise, seed, None, "observation")
        p = self._acquire()
        try:
            x = self._prepare(p, o, "observation")
            try:
                _check(lib.pi0_prepared_save(x, _path(path, "path")))
            finally:
                lib.pi0_prepared_free(x)
        finally:
            self._release()


def _model_info(m) -> Dict[str, Any]:
    mi = N.ModelInfo()
    lib.pi0_model_get_info(m, ctypes.byref(mi))
    llm = lambda s: {f: getattr(s, f) for f, _ in s._fields_}   # noqa: E731
    return {"pi05": bool(mi.pi05), "fast": bool(mi.fast), "action_dim": mi.action_dim, "action_horizon": mi.action_horizon,
            "precision": {1: "int8", 2: "fp8"}.get(mi.precision, "bf16") if mi.quant_stages else "bf16",
            "quant_stages": [n for n, b in _STAGES.items() if mi.quant_stages & b],
            "max_token_len": mi.max_token_len, "n_cameras": mi.n_cameras, "image_size": mi.image_size,
            "vocab_size": mi.vocab_size, "n_params": mi.n_params, "format": _str(mi.format), "root": _str(mi.root),
            "load_s": mi.load_s, "vision": llm(mi.vision), "paligemma": llm(mi.paligemma),
            "action_expert": llm(mi.action_expert)}


class Model(_Closing):
    """The model alone, on model-level inputs (docs/formats.md 2), as `pi0 infer`: for users who do their own
    preprocessing. infer returns the normalised actions float32 [B, H, A].

    Thread safety: one session; calls from several threads run one at a time.
    """

    def __init__(self, checkpoint, backend: str = "auto", device: int = 0, threads: int = 0, max_batch: int = 1,
                 steps: int = 10, action_horizon: int = 0, max_token_len: int = 0, quiet: bool = False,
                 precision: str = "bf16", quant_stages=None):
        self._m = self._s = None
        self._lock = threading.Lock()
        max_batch, steps = _int(max_batch, "max_batch", 1, 4096), _int(steps, "steps", 1, 1000)
        mp = _model_params(backend, device, threads, action_horizon, max_token_len, quiet, precision, quant_stages)
        m = ctypes.c_void_p()
        _check(lib.pi0_model_load(ctypes.byref(m), _path(checkpoint, "checkpoint"), ctypes.byref(mp)))
        self._m = m
        s = ctypes.c_void_p()
        sp = N.SessionParams(max_batch=max_batch, num_steps=steps)
        _check(lib.pi0_session_create(ctypes.byref(s), m, ctypes.byref(sp)))
        self._s = s
        self.max_batch = max_batch
        self.info: Dict[str, Any] = _model_info(m)
        self.info["backend"] = _str(lib.pi0_session_backend(s))
        self.info["device"] = _str(lib.pi0_session_device(s))

    def close(self) -> None:
        with self._lock:
            if self._s:
                lib.pi0_session_free(self._s)
                self._s = None
            if self._m:
                lib.pi0_model_free(self._m)
                self._m = None

    def __del__(self):
        if getattr(self, "_s", None):
            lib.pi0_session_free(self._s)
        if getattr(self, "_m", None):
            lib.pi0_model_free(self._m)

    @property
    def backend(self) -> str:
        return self.info["backend"]

    def infer(self, images: np.ndarray, state: np.ndarray, tokens: np.ndarray,
              token_mask: Optional[np.ndarray] = None, image_masks: Optional[np.ndarray] = None,
              noise: Optional[np.ndarray] = None, seed: int = 0, rtc: Optional[Mapping] = None) -> np.ndarray:
        """images float32 [B, N, R, R, 3] in [-1, 1]; state float32 [B, A] (normalised, zero-padded; π0.5 does not
        read it, but it must be given); tokens int32 [B, L] and token_mask [B, L] (None = all real); image_masks [B, N] (None = all present);
        noise float32 [B, H, A] (None = N(0, 1) drawn from seed). rtc (real-time chunking, LeRobot's form):
        {"prev": float32 [B, H, A] the leftover in model space, "weights": [B, H] prefix weights in [0, 1]
        (Model.prefix_weights), "max_weight": a number or [B]}. Returns the actions float32 [B, H, A].
        Arrays of the right dtype and layout are read in place; others are converted (a copy)."""
        i = self.info
        N_, R, A, H = i["n_cameras"], i["image_size"], i["action_dim"], i["action_horizon"]
        if not isinstance(images, np.ndarray):
            try:
                images = np.asarray(images)
            except (TypeError, ValueError) as e:
                raise _bad(f"images: expected float32 numbers of shape [B, {N_}, {R}, {R}, 3] ({e})") from None
        if images.ndim != 5 or images.shape[1:] != (N_, R, R, 3):   # before the conversion: a view can be huge
            raise _bad(f"images: expected shape [B, {N_}, {R}, {R}, 3], found {list(images.shape)}")
        B = images.shape[0]
        if not 1 <= B <= self.max_batch:
            raise InputError("PI0_ERR_ARG", f"images: batch {B}, the model's session holds 1..{self.max_batch}")
        images = _floats(images, "images", images.shape)
        state = _floats(state, "state", (B, A))
        tokens = tokens if isinstance(tokens, np.ndarray) else np.asarray(tokens)
        if tokens.ndim != 2 or tokens.shape[0] != B or tokens.dtype.kind not in "iu":
            raise _bad(f"tokens: expected integers of shape [{B}, L], found {tokens.dtype} {list(tokens.shape)}")
        if not 1 <= tokens.shape[1] <= i["max_token_len"]:   # before the scan and the copy below
            raise _bad(f"tokens: {tokens.shape[1]} per row, the model takes 1..{i['max_token_len']} (max_token_len)")
        if tokens.size and (tokens.min() < 0 or tokens.max() > _INT32):
            raise _bad(f"tokens: ids must be 0..{_INT32}, found {tokens.min()}..{tokens.max()}")
        tokens = np.require(tokens, dtype=np.int32, requirements="CA")
        L = tokens.shape[1]
        token_mask = np.ones((B, L), np.uint8) if token_mask is None else self._mask(token_mask, "token_mask", (B, L))
        keep = [images, state, tokens, token_mask]
        c = N.Inputs(batch=B, images=images.ctypes.data, state=state.ctypes.data, tokens=tokens.ctypes.data,
                     token_mask=token_mask.ctypes.data, n_tokens=L,
                     seed=_int(seed, "seed", 0, 2 ** 64 - 1))
        if image_masks is not None:
            im = self._mask(image_masks, "image_masks", (B, N_))
            keep.append(im)
            c.image_masks = im.ctypes.data
        if noise is not None:
            nz = _floats(noise, "noise", (B, H, A))
            keep.append(nz)
            c.noise = nz.ctypes.data
        if rtc is not None:
            mode = rtc.get("mode", "lerobot") if isinstance(rtc, Mapping) else None
            if not isinstance(rtc, Mapping) or set(rtc) - {"prev", "weights", "max_weight", "mode"} or "prev" not in rtc \
                    or "weights" not in rtc or not isinstance(mode, str) or mode not in ("lerobot", "exact"):
                raise InputError("PI0_ERR_ARG", "rtc: expected {'prev': [B, H, A], 'weights': [B, H], 'max_weight', "
                                 "'mode': 'lerobot' | 'exact'}")
            prev = _floats(rtc["prev"], "rtc prev", (B, H, A))
            w = _floats(rtc["weights"], "rtc weights", (B, H))
            mw = rtc.get("max_weight", 10.0)
            mw = _floats(np.full(B, _float(mw, "rtc max_weight")) if np.ndim(mw) == 0 else mw, "rtc max_weight", (B,))
            keep += [prev, w, mw]
            c.rtc, c.rtc_prev, c.rtc_weights, c.rtc_max_weights = N.RTC_LEROBOT, prev.ctypes.data, w.ctypes.data, mw.ctypes.data
            if mode == "exact":
                c.rtc = N.RTC_EXACT
        out = np.empty((B, H, A), np.float32)
        with self._lock:
            if not self._s:
                raise Error("PI0_ERR_ARG", "the model is closed")
            _check(lib.pi0_infer(self._s, ctypes.byref(c), out.ctypes.data), "inference")
        return out

    @staticmethod
    def _mask(m, what: str, shape: Tuple[int, ...]) -> np.ndarray:
        a = np.asarray(m)
        if a.shape != shape:
            raise _bad(f"{what}: expected shape {list(shape)}, found {list(a.shape)}")
        return np.ascontiguousarray(a.astype(bool).view(np.uint8) if a.dtype != np.bool_ else a.view(np.uint8))

    def timing(self) -> Dict[str, float]:
        """Milliseconds of the last infer: total, and vision / prefill / denoise where stage timing is on (always on
        the CPU backend)."""
        t = N.Timing()
        with self._lock:
            if not self._s:
                raise Error("PI0_ERR_ARG", "the model is closed")
            lib.pi0_session_get_timing(self._s, ctypes.byref(t))
        return {"vision_ms": t.vision_ms, "prefill_ms": t.prefill_ms, "denoise_ms": t.denoise_ms, "total_ms": t.total_ms}

    @staticmethod
    def prefix_weights(horizon_rows: int, delay: int, execution_horizon: int, leftover: int,
                       schedule: str = "linear") -> np.ndarray:
        """LeRobot's real-time-chunking prefix weights of `horizon_rows` action rows (float32 [H])."""
        s = schedule.lower() if isinstance(schedule, str) else None
        horizon_rows = _int(horizon_rows, "horizon_rows", 1, 4096)
        delay, execution_horizon = _int(delay, "delay", 0, 4096), _int(execution_horizon, "execution_horizon", 0, 4096)
        leftover = _int(leftover, "leftover", 0, 4096)
        if s not in N.SCHEDULES:
            raise InputError("PI0_ERR_ARG", f"schedule: expected zeros, ones, linear or exp, found {schedule!r}")
        w = np.empty(horizon_rows, np.float32)
        _check(lib.pi0_rtc_prefix_weights(N.SCHEDULES.index(s), delay, execution_horizon, leftover, horizon_rows,
                                          w.ctypes.data))
        return w


class Tokenizer:
    """PaliGemma's SentencePiece model (paligemma_tokenizer.model), for Model users who tokenize themselves."""

    def __init__(self, path):
        self._t = None
        t = ctypes.c_void_p()
        _check(lib.pi0_tokenizer_load(ctypes.byref(t), _path(path, "tokenizer")))
        self._t = t

    def __del__(self):
        if getattr(self, "_t", None):
            lib.pi0_tokenizer_free(self._t)
            self._t = None

    def encode(self, text: str) -> List[int]:
        """Plain SentencePiece ids (no BOS / EOS), like spm_encode --output_format=id."""
        if not isinstance(text, str):
            raise InputError("PI0_ERR_ARG", f"encode: expected a str, found {type(text).__name__}")
        b = _utf8(text, "text")
        n = ctypes.c_size_t()
        cap = len(b) + 16
        while True:
            ids = np.empty(cap, np.int32)
            _check(lib.pi0_tokenize(self._t, b, len(b), ids.ctypes.data, cap, ctypes.byref(n)))
            if n.value <= cap:
                return ids[:n.value].tolist()
            cap = n.value

    def prompt(self, text: str, max_len: int, fmt: str = "pi0",
               state: Optional[np.ndarray] = None) -> Tuple[np.ndarray, np.ndarray]:
        """The model's prompt tokens (openpi's PaligemmaTokenizer): fmt "pi0" (BOS + text + newline), "pi05" (the
        state discretised into the prompt; state = the normalised state values) or "raw" (LeRobot's π0). Returns
        (tokens int32 [max_len], mask bool [max_len]), right-padded or truncated."""
        fmts = {"pi0": N.PROMPT_PI0, "pi05": N.PROMPT_PI05, "raw": N.PROMPT_RAW}
        text_c = _cstr(text, "prompt")
        max_len = _int(max_len, "max_len", 1, 4096)
        if not isinstance(fmt, str) or fmt not in fmts:
            raise InputError("PI0_ERR_ARG", f"fmt: expected pi0, pi05 or raw, found {fmt!r:.40}")
        st = None
        if state is not None:
            st = state if isinstance(state, np.ndarray) else np.asarray(state)
            if st.size > 4096:   # the library's bound, checked before the conversion (a view can be huge)
                raise _bad(f"state: {st.size} values, at most 4096")
            st = np.ascontiguousarray(st, dtype=np.float64).ravel()
        tokens = np.zeros(max_len, np.int32)
        mask = np.zeros(max_len, np.uint8)
        nv = ctypes.c_int()
        _check(lib.pi0_tokenize_prompt(self._t, text_c, fmts[fmt],
                                       None if st is None else st.ctypes.data, 0 if st is None else st.size, max_len,
                                       tokens.ctypes.data, mask.ctypes.data, ctypes.byref(nv)))
        return tokens, mask.view(np.bool_)
