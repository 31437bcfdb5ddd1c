#!/usr/bin/env python3
"""Writes the seeds of fuzz_orbax (tests/fuzz/seeds_orbax) and, given a second directory, of fuzz_ocdbt
(tests/fuzz/seeds_ocdbt): tiny π0 and π0.5 checkpoints written by orbax-checkpoint (tools/reference/orbax_checkpoint.py,
from the tiny fixtures), kept to tens of KB.

fuzz_orbax's seeds are the harness's records (u16 LE name length, name, u32 LE data length, data) of a params
directory; Orbax's own bookkeeping (_sharding, array_metadatas, each process's manifest), which the reader does not
open, is left out.
- pi0, pi05 (OCDBT off: one zarr directory per array): _METADATA and every .zarray. Chunks of at most 512 stored
  bytes stay (real zstd frames for the fuzzer to mutate); the others are dropped and their arrays given fill_value 0.
- pi0-ocdbt (OCDBT, Orbax's default, as Orbax lays it out: manifest.ocdbt, the root node in d/, the values it does
  not inline in ocdbt.process_0/d/): arrays of more than 1024 elements are saved as zeros, whose chunks are ~20-byte
  zstd frames inlined in the root node; the smaller ones keep their values, and those whose chunks pass Orbax's
  1 KB inline limit are read from the data files.
- pi05-ocdbt-tree: π0.5's keys and values (arrays zeroed as above) copied by tensorstore into an OCDBT database
  with 1 KB nodes, values over 100 bytes out of line and numbered manifests: a B+tree with interior nodes (Orbax's
  trees of this size are one leaf), manifest.ocdbt naming the newest manifest.<generation>.
fuzz_ocdbt's seed `tree` is π0's first 40 keys (20 arrays) copied the same way with a single manifest (u32 LE manifest
length, the manifest, then the one data file, which the harness serves as every file the database names).

  build/venv-orbax-pinned/bin/python tests/fuzz/make_seed_orbax.py tests/fuzz/seeds_orbax tests/fuzz/seeds_ocdbt
"""
import argparse
import json
import os
import struct
import sys
import tempfile

import numpy as np
import tensorstore as ts

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "reference"))
import orbax_checkpoint as oc  # noqa: E402

ZERO_ABOVE = 1024   # elements: larger arrays are saved as zeros in the OCDBT seeds


def record(name, data):
    nb = name.encode()
    return struct.pack("<H", len(nb)) + nb + struct.pack("<I", len(data)) + data


def zarr_records(params):
    out = bytearray(record("_METADATA", open(os.path.join(params, "_METADATA"), "rb").read()))
    for arr in sorted(os.listdir(params)):
        za = os.path.join(params, arr, ".zarray")
        if not os.path.isfile(za):
            continue
        meta = json.load(open(za))
        chunks = sorted(f for f in os.listdir(os.path.join(params, arr)) if f != ".zarray")
        keep = all(os.path.getsize(os.path.join(params, arr, c)) <= 512 for c in chunks)
        if not keep:
            meta["fill_value"] = 0
        out += record(arr + "/.zarray", json.dumps(meta, separators=(",", ":")).encode())
        for c in chunks if keep else []:
            out += record(arr + "/" + c, open(os.path.join(params, arr, c), "rb").read())
    return bytes(out)


def ocdbt_records(params, db):
    """_METADATA of params, then the files of the OCDBT database db that the reader opens: manifest.*, d/* and
    ocdbt.process_<i>/d/*."""
    def wanted(parts):
        if len(parts) == 1:
            return parts[0].startswith("manifest.")
        return parts[-2] == "d" and (len(parts) == 2 or (len(parts) == 3 and parts[0].startswith("ocdbt.process_")))

    out = bytearray(record("_METADATA", open(os.path.join(params, "_METADATA"), "rb").read()))
    for d, dirs, files in sorted(os.walk(db)):
        dirs.sort()
        for f in sorted(files):
            rel = os.path.relpath(os.path.join(d, f), db).replace(os.sep, "/")
            if wanted(rel.split("/")):
                out += record(rel, open(os.path.join(d, f), "rb").read())
    return bytes(out)


def write(fixture, out, ocdbt, zero, **kw):
    """orbax_checkpoint.py write, with arrays of more than ZERO_ABOVE elements zeroed when `zero`."""
    to_jax = oc.to_jax

    def zeroed(src, cfg):
        flat, dtypes = to_jax(src, cfg)
        return {k: v if v.size <= ZERO_ABOVE else np.zeros_like(v) for k, v in flat.items()}, dtypes

    oc.to_jax = zeroed if zero else to_jax
    try:
        oc.write(argparse.Namespace(src=os.path.join(ROOT, "tests", "fixtures", fixture), out=out, ocdbt=ocdbt,
                                    train_run=None, expect=None, **kw))
    finally:
        oc.to_jax = to_jax
    return os.path.join(out, "params")


def copy_tree(params, out, manifest_kind, n_keys=None):
    """The keys and values of the OCDBT database params (the first n_keys of them) copied into a new one at out, with
    small nodes."""
    src = ts.KvStore.open({"driver": "ocdbt", "base": "file://" + params + "/"}).result()
    dst = ts.KvStore.open({"driver": "ocdbt", "base": "file://" + out + "/", "config": {
        "max_decoded_node_bytes": 1024, "max_inline_value_bytes": 100, "manifest_kind": manifest_kind,
        "compression": {"id": "zstd"}}}).result()
    txn = ts.Transaction()
    for k in sorted(src.list().result())[:n_keys]:
        dst.with_transaction(txn)[k] = src.read(k).result().value
    txn.commit_async().result()
    return out


def save(path, data):
    open(path, "wb").write(data)
    print(f"{path}: {len(data)} bytes")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out", help="fuzz_orbax's seed directory")
    ap.add_argument("ocdbt_out", nargs="?", help="fuzz_ocdbt's seed directory")
    a = ap.parse_args()
    for d in filter(None, (a.out, a.ocdbt_out)):
        os.makedirs(d, exist_ok=True)
    pi0, pi05 = dict(dtype="bf16", nnx_value=False), dict(dtype="mixed", nnx_value=True)
    with tempfile.TemporaryDirectory() as tmp:
        t = lambda name: os.path.join(tmp, name)   # noqa: E731
        save(os.path.join(a.out, "pi0"), zarr_records(write("tiny-pi0", t("pi0"), 0, False, **pi0)))
        save(os.path.join(a.out, "pi05"), zarr_records(write("tiny-pi05", t("pi05"), 0, False, **pi05)))
        p = write("tiny-pi0", t("pi0-ocdbt"), 1, True, **pi0)
        save(os.path.join(a.out, "pi0-ocdbt"), ocdbt_records(p, p))
        p = write("tiny-pi05", t("pi05-ocdbt"), 1, True, **pi05)
        save(os.path.join(a.out, "pi05-ocdbt-tree"), ocdbt_records(p, copy_tree(p, t("pi05-tree"), "numbered")))
        if a.ocdbt_out:
            db = copy_tree(os.path.join(t("pi0-ocdbt"), "params"), t("pi0-tree"), "single", 40)
            files = os.listdir(os.path.join(db, "d"))
            if len(files) != 1:
                sys.exit(f"{db}: {len(files)} data files, the harness serves one")
            man = open(os.path.join(db, "manifest.ocdbt"), "rb").read()
            save(os.path.join(a.ocdbt_out, "tree"), struct.pack("<I", len(man)) + man +
                 open(os.path.join(db, "d", files[0]), "rb").read())


if __name__ == "__main__":
    main()
