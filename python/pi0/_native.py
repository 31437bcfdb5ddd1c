"""ctypes declarations of libpi0's C API (include/pi0.h). Internal: use the classes of the pi0 package.

Every structure here mirrors one of pi0.h field for field; tests/python/test_abi.py compiles a C program that
prints the header's sizes and offsets and compares them with these, so a change to the header that is not made
here fails the tests instead of corrupting memory.
"""
import ctypes
import os
from ctypes import POINTER, Structure, c_char_p, c_double, c_float, c_int, c_int32, c_int64, c_size_t, c_uint, c_uint8, c_uint64, c_void_p

LIBRARY_ENV = "PI0_LIBRARY"
ABI_VERSION = 4   # pi0.h's PI0_ABI_VERSION that these structures restate (tests/python/test_abi.py checks both)


class ModelParams(Structure):
    _fields_ = [("backend", c_int), ("n_threads", c_int), ("device", c_int), ("quiet", c_int),
                ("action_horizon", c_int), ("max_token_len", c_int), ("precision", c_int), ("quant_stages", c_uint),
                ("action_dim", c_int)]


class _Vision(Structure):
    _fields_ = [("width", c_int), ("depth", c_int), ("mlp_dim", c_int), ("num_heads", c_int), ("patch_size", c_int)]


class _Llm(Structure):
    _fields_ = [("width", c_int), ("depth", c_int), ("mlp_dim", c_int), ("num_heads", c_int),
                ("num_kv_heads", c_int), ("head_dim", c_int)]


class ModelInfo(Structure):
    _fields_ = [("pi05", c_int), ("action_dim", c_int), ("action_horizon", c_int), ("max_token_len", c_int),
                ("n_cameras", c_int), ("image_size", c_int), ("vocab_size", c_int), ("n_params", c_int64),
                ("format", c_char_p), ("root", c_char_p), ("load_s", c_double), ("precision", c_int),
                ("quant_stages", c_uint), ("vision", _Vision),
                ("paligemma", _Llm), ("action_expert", _Llm), ("fast", c_int)]


class SessionParams(Structure):
    _fields_ = [("max_batch", c_int), ("num_steps", c_int), ("dump", c_void_p), ("dump_user", c_void_p),
                ("max_decoding_steps", c_int)]


class Inputs(Structure):
    _fields_ = [("batch", c_int), ("images", c_void_p), ("image_masks", c_void_p), ("state", c_void_p),
                ("tokens", c_void_p), ("token_mask", c_void_p), ("n_tokens", c_int), ("noise", c_void_p),
                ("seed", c_uint64), ("rtc", c_int), ("rtc_prev", c_void_p), ("rtc_weights", c_void_p),
                ("rtc_max_weights", c_void_p), ("rtc_exact", c_void_p), ("token_ar_mask", c_void_p)]


class Timing(Structure):
    _fields_ = [("vision_ms", c_double), ("prefill_ms", c_double), ("denoise_ms", c_double), ("total_ms", c_double)]


class PolicyParams(Structure):
    _fields_ = [("model", ModelParams), ("config", c_char_p), ("robot", c_char_p), ("tokenizer", c_char_p),
                ("asset_id", c_char_p), ("default_prompt", c_char_p), ("delta_actions", c_int),
                ("max_batch", c_int), ("num_steps", c_int), ("fast_tokenizer", c_char_p)]


class PolicyInfo(Structure):
    _fields_ = [("robot", c_int), ("robot_name", c_char_p), ("config", c_char_p), ("action_horizon", c_int),
                ("action_dim", c_int), ("max_batch", c_int), ("quantile", c_int), ("delta_actions", c_int),
                ("discrete_state", c_int), ("asset_id", c_char_p), ("default_prompt", c_char_p),
                ("metadata_json", c_char_p), ("lerobot", c_char_p), ("rtc_horizon", c_int), ("rtc_schedule", c_int),
                ("rtc_max_weight", c_float), ("model", c_void_p), ("session", c_void_p)]


class Array(Structure):
    _fields_ = [("key", c_char_p), ("dtype", c_int), ("ndim", c_int), ("shape", c_int64 * 4), ("data", c_void_p)]


class RtcRequest(Structure):
    _fields_ = [("prev", c_void_p), ("n_prev", c_int), ("delay", c_int), ("horizon", c_int), ("schedule", c_int),
                ("max_weight", c_float), ("mode", c_int)]


class Observation(Structure):
    _fields_ = [("arrays", POINTER(Array)), ("n_arrays", c_int), ("prompt", c_char_p), ("noise", c_void_p),
                ("seed", c_uint64), ("rtc", POINTER(RtcRequest))]


class PolicyTiming(Structure):
    _fields_ = [("model_ms", c_double), ("total_ms", c_double), ("zero_chunks", c_int)]


# enums of pi0.h
OK = 0
STATUS_NAMES = ("PI0_OK", "PI0_ERR_ARG", "PI0_ERR_IO", "PI0_ERR_FORMAT", "PI0_ERR_SHAPE", "PI0_ERR_NOMEM",
                "PI0_ERR_CUDA", "PI0_ERR_UNSUPPORTED")
BACKEND_DEFAULT, BACKEND_CPU, BACKEND_CUDA = 0, 1, 2
DT_F32, DT_F16, DT_BF16, DT_I32, DT_I64, DT_U8, DT_BOOL, DT_F64 = range(8)
RTC_OFF, RTC_LEROBOT, RTC_EXACT = 0, 1, 2
SCHEDULES = ("zeros", "ones", "linear", "exp")
PROMPT_PI0, PROMPT_PI05, PROMPT_RAW = 0, 1, 2

_VP = c_void_p
_SIGNATURES = {
    "pi0_status_str": (c_char_p, [c_int]),
    "pi0_abi_version": (c_int, []),
    "pi0_last_error": (c_char_p, []),
    "pi0_backend_check": (c_int, [c_int, c_int]),
    "pi0_model_load": (c_int, [POINTER(_VP), c_char_p, POINTER(ModelParams)]),
    "pi0_model_free": (None, [_VP]),
    "pi0_model_get_info": (None, [_VP, POINTER(ModelInfo)]),
    "pi0_session_create": (c_int, [POINTER(_VP), _VP, POINTER(SessionParams)]),
    "pi0_session_free": (None, [_VP]),
    "pi0_infer": (c_int, [_VP, POINTER(Inputs), _VP]),
    "pi0_session_get_timing": (None, [_VP, POINTER(Timing)]),
    "pi0_session_set_stage_timing": (None, [_VP, c_int]),
    "pi0_session_backend": (c_char_p, [_VP]),
    "pi0_session_device": (c_char_p, [_VP]),
    "pi0_session_driver": (c_char_p, [_VP]),
    "pi0_session_memory": (c_int, [_VP, POINTER(c_size_t), POINTER(c_size_t)]),
    "pi0_rtc_prefix_weights": (c_int, [c_int, c_int, c_int, c_int, c_int, _VP]),
    "pi0_tokenizer_load": (c_int, [POINTER(_VP), c_char_p]),
    "pi0_tokenizer_free": (None, [_VP]),
    "pi0_tokenize": (c_int, [_VP, c_char_p, c_size_t, _VP, c_size_t, POINTER(c_size_t)]),
    "pi0_tokenize_prompt": (c_int, [_VP, c_char_p, c_int, _VP, c_int, c_int, _VP, _VP, POINTER(c_int)]),
    "pi0_policy_load": (c_int, [POINTER(_VP), c_char_p, POINTER(PolicyParams)]),
    "pi0_policy_free": (None, [_VP]),
    "pi0_policy_get_info": (None, [_VP, POINTER(PolicyInfo)]),
    "pi0_policy_prepare": (c_int, [_VP, POINTER(Observation), POINTER(_VP)]),
    "pi0_prepared_free": (None, [_VP]),
    "pi0_policy_run": (c_int, [_VP, POINTER(_VP), c_int, _VP, POINTER(PolicyTiming)]),
    "pi0_policy_warmup": (c_int, [_VP, c_int, POINTER(c_double)]),
    "pi0_policy_warmup_prompt": (c_int, [_VP, c_int, c_char_p, POINTER(c_double)]),
    "pi0_policy_chunk": (c_int, [_VP, c_int, _VP]),
    "pi0_policy_infer": (c_int, [_VP, POINTER(Observation), _VP, POINTER(PolicyTiming)]),
    "pi0_prepared_save": (c_int, [_VP, c_char_p]),
}


def library_path():
    """The libpi0.so this package loads: $PI0_LIBRARY, else the one installed inside the package."""
    env = os.environ.get(LIBRARY_ENV)
    return os.path.abspath(env) if env else os.path.join(os.path.dirname(os.path.abspath(__file__)), "libpi0.so")


def load():
    path = library_path()
    if not os.path.exists(path):
        raise ImportError(f"pi0: the engine's library {path} does not exist (pip install ./python builds it with the "
                          f"repository's Makefile; {LIBRARY_ENV} names another one)")
    try:
        lib = ctypes.CDLL(path)   # CDLL, not PyDLL: every call releases the GIL
    except OSError as e:
        raise ImportError(f"pi0: cannot load {path}: {e}") from e
    for name, (res, args) in _SIGNATURES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError as e:
            raise ImportError(f"pi0: {path} has no function {name}: it is older than this package; rebuild it") from e
        fn.restype, fn.argtypes = res, args
    found = lib.pi0_abi_version()
    if found != ABI_VERSION:
        raise ImportError(f"pi0: {path} has structure layout version {found}, this package restates version "
                          f"{ABI_VERSION}: install the package and the library from the same checkout")
    return lib


lib = load()
