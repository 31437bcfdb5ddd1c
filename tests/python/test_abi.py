"""The ctypes structures of pi0/_native.py have the C header's layout: a C program compiled against
include/pi0.h prints every structure's size and every field's offset, and they must match."""
import ctypes
import os
import subprocess

from pi0 import _native as N
from conftest import ROOT

STRUCTS = {"pi0_model_params": N.ModelParams, "pi0_model_info": N.ModelInfo, "pi0_session_params": N.SessionParams,
           "pi0_inputs": N.Inputs, "pi0_timing": N.Timing, "pi0_policy_params": N.PolicyParams,
           "pi0_policy_info": N.PolicyInfo, "pi0_array": N.Array, "pi0_rtc_request": N.RtcRequest,
           "pi0_observation": N.Observation, "pi0_policy_timing": N.PolicyTiming}


def test_struct_layouts(tmp_path):
    lines = ['#include <stdio.h>', '#include <stddef.h>', '#include "pi0.h"', "int main(void) {"]
    for cname, cls in STRUCTS.items():
        lines.append(f'printf("{cname} %zu\\n", sizeof({cname}));')
        for f, _ in cls._fields_:
            lines.append(f'printf("{cname}.{f} %zu\\n", offsetof({cname}, {f}));')
    lines.append('printf("enums %d %d %d %d %d\\n", (int)PI0_ERR_UNSUPPORTED, (int)PI0_BACKEND_CUDA, (int)PI0_DT_F64, '
                 '(int)PI0_RTC_LEROBOT, (int)PI0_PROMPT_RAW);')
    lines.append('printf("abi %d\\n", PI0_ABI_VERSION);')
    lines.append("return 0; }")
    src, exe = tmp_path / "abi.c", tmp_path / "abi"
    src.write_text("\n".join(lines))
    subprocess.run(["cc", "-std=c11", "-I", os.path.join(ROOT, "include"), str(src), "-o", str(exe)], check=True)
    c = dict(line.split(" ", 1) for line in subprocess.run([str(exe)], capture_output=True, text=True,
                                                            check=True).stdout.splitlines())
    for cname, cls in STRUCTS.items():
        assert int(c[cname]) == ctypes.sizeof(cls), cname
        for f, _ in cls._fields_:
            assert int(c[f"{cname}.{f}"]) == getattr(cls, f).offset, f"{cname}.{f}"
    assert c["enums"] == f"{len(N.STATUS_NAMES) - 1} {N.BACKEND_CUDA} {N.DT_F64} {N.RTC_LEROBOT} {N.PROMPT_RAW}"
    # the header, the binding and the library loaded agree on the layout version
    assert int(c["abi"]) == N.ABI_VERSION == N.lib.pi0_abi_version()
