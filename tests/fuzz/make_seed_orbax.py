#!/usr/bin/env python3
"""Writes the seeds of fuzz_orbax (tests/fuzz/seeds_orbax): tiny π0 and π0.5 checkpoints written by orbax-checkpoint
(tools/reference/orbax_checkpoint.py, from the tiny fixtures, one zarr directory per array), as the harness's
records (u16 LE name length, name, u32 LE data length, data) of the params directory: _METADATA and every
.zarray. Chunks of at most 512 stored bytes stay (real zstd frames for the fuzzer to mutate); the others are
dropped and their arrays given fill_value 0, so that a seed is ~35 KB instead of ~400 KB. Orbax's own
bookkeeping (_sharding, array_metadatas), which the reader does not open, is left out.

  build/venv-orbax-pinned/bin/python tests/fuzz/make_seed_orbax.py tests/fuzz/seeds_orbax
"""
import argparse
import json
import os
import struct
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
import orbax_checkpoint as oc  # noqa: E402


def records(params):
    out = bytearray()

    def add(name, data):
        nb = name.encode()
        out.extend(struct.pack("<H", len(nb)) + nb + struct.pack("<I", len(data)) + data)

    add("_METADATA", open(os.path.join(params, "_METADATA"), "rb").read())
    for arr in sorted(os.listdir(params)):
        za = os.path.join(params, arr, ".zarray")
        if not os.path.isfile(za):
            continue
        meta = json.load(open(za))
        chunks = sorted(f for f in os.listdir(os.path.join(params, arr)) if f != ".zarray")
        keep = all(os.path.getsize(os.path.join(params, arr, c)) <= 512 for c in chunks)
        if not keep:
            meta["fill_value"] = 0
        add(arr + "/.zarray", json.dumps(meta, separators=(",", ":")).encode())
        for c in chunks if keep else []:
            add(arr + "/" + c, open(os.path.join(params, arr, c), "rb").read())
    return bytes(out)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        for name, fixture, kw in (("pi0", "tiny-pi0", dict(dtype="bf16", nnx_value=False)),
                                  ("pi05", "tiny-pi05", dict(dtype="mixed", nnx_value=True))):
            d = os.path.join(tmp, name)
            oc.write(argparse.Namespace(src=os.path.join(ROOT, "tests", "fixtures", fixture), out=d, ocdbt=0,
                                        train_run=None, expect=None, **kw))
            data = records(os.path.join(d, "params"))
            open(os.path.join(a.out, name), "wb").write(data)
            print(f"{a.out}/{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
