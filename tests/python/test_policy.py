"""pi0.Policy against `pi0 run --json` (bit for bit), batches against single calls, errors, threads, leaks."""
import os
import threading
import time

import numpy as np
import pytest

import pi0
from conftest import A, H, TOKENIZER, cli_actions, flatten, observation, read_st, run_cli, write_st

CASES = [("pi0", "pi0_libero", "libero"), ("pi05", "pi05_libero", "libero"), ("pi0", "pi0_droid", "droid"),
         ("pi05", "pi05_droid", "droid"), ("pi0", "pi0_aloha", "aloha"), ("pi05", "pi05_aloha", "aloha")]


def policy(ckpts, model, config, **kw):
    return pi0.Policy(ckpts[model], config=config, tokenizer=TOKENIZER, backend="cpu", **kw)


@pytest.mark.parametrize("model,config,robot", CASES)
def test_infer_equals_cli(ckpts, tmp_path, model, config, robot):
    rng = np.random.RandomState(hash(config) % 1000)
    obs = observation(robot, rng, nested=(robot == "aloha"))
    obs["prompt"] = "pick up the red block"
    noise = rng.randn(H, A).astype(np.float32)
    with policy(ckpts, model, config) as p:
        got = p.infer(obs, noise)
    want = cli_actions(tmp_path, ckpts[model], config, {k: v for k, v in obs.items() if k != "prompt"},
                       "pick up the red block", noise)
    assert got["actions"].dtype == np.float64
    assert got["actions"].shape == want.shape == (H, {"libero": 7, "droid": 8, "aloha": 14}[robot])
    assert np.array_equal(got["actions"], want), np.abs(got["actions"] - want).max()
    assert got["policy_timing"]["infer_ms"] > 0


def test_model_inputs_equal_cli(ckpts, tmp_path):
    """The transformed inputs (images, state, tokens, masks) are the CLI's, byte for byte."""
    rng = np.random.RandomState(3)
    obs = observation("droid", rng)
    noise = rng.randn(H, A).astype(np.float32)
    with policy(ckpts, "pi05", "pi05_droid") as p:
        p.save_inputs({**obs, "prompt": "open the drawer"}, tmp_path / "py.safetensors", noise)
    write_st(tmp_path / "obs.safetensors", flatten(obs))
    write_st(tmp_path / "noise.safetensors", {"noise": noise})
    run_cli("run", "--checkpoint", ckpts["pi05"], "--tokenizer", TOKENIZER, "--config", "pi05_droid", "--obs",
            str(tmp_path / "obs.safetensors"), "--noise", str(tmp_path / "noise.safetensors"), "--prompt",
            "open the drawer", "--dump-inputs", str(tmp_path / "cli.safetensors"), "--backend", "cpu")
    a, b = read_st(tmp_path / "py.safetensors"), read_st(tmp_path / "cli.safetensors")
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k]), k


def test_nested_flat_and_types(ckpts):
    """Nested and '/'-flattened keys, lists, float64 images (x255), numpy str prompts give the same actions."""
    rng = np.random.RandomState(5)
    noise = rng.randn(H, A).astype(np.float32)
    nested = observation("aloha", rng, nested=True)
    flat = flatten(nested)
    with policy(ckpts, "pi0", "pi0_aloha") as p:
        a = p.infer({**nested, "prompt": "fold"}, noise)["actions"]
        b = p.infer({**flat, "prompt": np.array("fold")}, noise)["actions"]
        c = p.infer({**flat, "state": flat["state"].tolist(), "prompt": b"fold"}, noise)["actions"]
        d = p.infer({**flat, "prompt": "fold", "noise": noise.astype(np.float64)})["actions"]
        e = p.infer({**flat, "prompt": "fold", "camera_name": "high", "episode": None}, noise[None])["actions"]
    for x in (b, c, d, e):
        assert np.array_equal(a, x)


def test_strided_and_big_endian_inputs(ckpts):
    rng = np.random.RandomState(6)
    obs = observation("libero", rng)
    noise = rng.randn(H, A).astype(np.float32)
    with policy(ckpts, "pi0", "pi0_libero") as p:
        a = p.infer({**obs, "prompt": "x"}, noise)["actions"]
        wide = np.zeros((96, 256, 3), np.uint8)
        wide[:, ::2] = obs["observation/image"]
        b = p.infer({**obs, "observation/image": wide[:, ::2], "observation/state": obs["observation/state"].astype(">f8"),
                     "prompt": "x"}, noise)["actions"]
    assert np.array_equal(a, b)


def test_seed_reproducible(ckpts):
    rng = np.random.RandomState(8)
    obs = {**observation("libero", rng), "prompt": "x"}
    with policy(ckpts, "pi0", "pi0_libero") as p:
        a, b = p.infer(obs, seed=123)["actions"], p.infer(obs, seed=123)["actions"]
        c = p.infer(obs, seed=124)["actions"]
        d, e = p.infer(obs)["actions"], p.infer(obs)["actions"]   # the policy's own stream: fresh noise each call
    assert np.array_equal(a, b) and not np.array_equal(a, c) and not np.array_equal(d, e)


def test_infer_batch_equals_single(ckpts):
    rng = np.random.RandomState(9)
    obs = [{**observation("droid", rng), "prompt": p} for p in ("open the drawer", "x", "pick up the fork now")]
    noise = rng.randn(3, H, A).astype(np.float32)
    with policy(ckpts, "pi0", "pi0_droid", max_batch=3) as p:
        batch = p.infer_batch(obs, noise)
        single = [p.infer(o, noise[b])["actions"] for b, o in enumerate(obs)]
        two = p.infer_batch(obs[1:], noise[1:])
    assert len(batch) == 3 and len(two) == 2
    for b in range(3):
        assert np.array_equal(batch[b]["actions"], single[b]), b
    assert np.array_equal(two[0]["actions"], single[1])


def test_metadata_and_info(ckpts):
    with policy(ckpts, "pi0", "pi0_aloha") as p:
        assert p.metadata == {"reset_pose": [0, -1.5, 1.5, 0, 0, 0]}   # openpi's AlohaInputs reset pose
        assert p.info["robot"] == "aloha" and p.info["action_dim"] == 14 and p.backend == "cpu"
        assert p.info["action_horizon"] == H and p.info["delta_actions"] is True
    with policy(ckpts, "pi05", "pi05_libero") as p:
        assert p.metadata == {} and p.info["pi05"] and p.info["config"] == "pi05_libero"


def test_tokenizer_matches_policy(ckpts, tmp_path):
    """pi0.Tokenizer.prompt gives the tokens the policy feeds the model."""
    rng = np.random.RandomState(10)
    with policy(ckpts, "pi0", "pi0_libero") as p:
        p.save_inputs({**observation("libero", rng), "prompt": "  pick_up the\ncup "}, tmp_path / "in.safetensors",
                      seed=1)
        L = p.info["max_token_len"]
    t = read_st(tmp_path / "in.safetensors")
    tokens, mask = pi0.Tokenizer(TOKENIZER).prompt("  pick_up the\ncup ", L, "pi0")
    assert np.array_equal(tokens, t["tokens"][0]) and np.array_equal(mask, t["token_mask"][0].astype(bool))
    tok = pi0.Tokenizer(TOKENIZER)
    tokens, mask = tok.prompt("pick up", L, "pi0")   # BOS + SentencePiece("pick up\n"), as openpi
    assert tokens[1:mask.sum()].tolist() == tok.encode("pick up\n") and mask.sum() > 2


def test_rtc_equals_cli(ckpts, tmp_path):
    """Real-time chunking: the policy keeps its last chunk; `executed` guides towards its remaining rows, as
    `pi0 run --rtc-prev` does with those rows; prev_chunk gives the same."""
    rng = np.random.RandomState(11)
    o1, o2 = observation("libero", rng), observation("libero", rng)
    n1, n2 = rng.randn(H, A).astype(np.float32), rng.randn(H, A).astype(np.float32)
    rtc = {"executed": 2, "inference_delay": 1, "execution_horizon": 3, "schedule": "EXP", "max_guidance_weight": 5.0}
    with policy(ckpts, "pi0", "pi0_libero") as p:
        assert p.last_chunk() is None
        first = p.infer({**o1, "prompt": "x"}, n1, rtc=rtc)   # no chunk yet: unguided
        chunk = p.last_chunk()
        got = p.infer({**o2, "prompt": "x"}, n2, rtc=rtc)["actions"]
        again = p.infer({**o2, "prompt": "x"}, n2, rtc={**{k: v for k, v in rtc.items() if k != "executed"},
                                                          "prev_chunk": chunk[2:]})["actions"]
        plain = p.infer({**o2, "prompt": "x"}, n2)["actions"]
    assert np.array_equal(first["actions"], cli_actions(tmp_path, ckpts["pi0"], "pi0_libero", o1, "x", n1))
    cf = tmp_path / "chunk.safetensors"
    cli_actions(tmp_path, ckpts["pi0"], "pi0_libero", o1, "x", n1, ("--save-chunk", str(cf)))
    assert np.array_equal(read_st(cf)["chunk"], chunk)
    write_st(tmp_path / "prev.safetensors", {"rtc_prev": chunk[2:]})
    want = cli_actions(tmp_path, ckpts["pi0"], "pi0_libero", o2, "x", n2,
                       ("--rtc-prev", str(tmp_path / "prev.safetensors"), "--rtc-delay", "1", "--rtc-horizon", "3",
                        "--rtc-schedule", "exp", "--rtc-max-weight", "5"))
    assert np.array_equal(got, want) and np.array_equal(again, want) and not np.array_equal(plain, want)


def test_rtc_exact_mixed_batch(ckpts):
    """A batch mixing the two forms gives each sample its own form's arithmetic: every element equals the same
    observation run alone, bit for bit (the CPU backend); the forms differ."""
    rng = np.random.RandomState(13)
    obs = [{**observation("libero", rng), "prompt": "x"} for _ in range(3)]
    noise = rng.randn(3, H, A).astype(np.float32)
    prev = rng.randn(4, A).astype(np.float32)
    base = {"inference_delay": 2, "execution_horizon": 4, "schedule": "LINEAR", "prev_chunk": prev}
    rtcs = [{**base, "mode": "exact"}, {**base, "mode": "lerobot"}, None]
    with policy(ckpts, "pi0", "pi0_libero", max_batch=3) as p:
        batch = p.infer_batch(obs, noise, rtc=rtcs)
        alone = [p.infer(o, n, rtc=r)["actions"] for o, n, r in zip(obs, noise, rtcs)]
        other = p.infer(obs[0], noise[0], rtc={**base, "mode": "lerobot"})["actions"]
        with pytest.raises(pi0.InputError, match="rtc.mode"):
            p.infer(obs[0], noise[0], rtc={**base, "mode": "vjp"})
    for b in range(3):
        assert np.array_equal(batch[b]["actions"], alone[b]), b
    assert not np.allclose(alone[0], other, rtol=0, atol=1e-3)


# ---- errors ----

def test_errors_name_the_key(ckpts):
    rng = np.random.RandomState(12)
    obs = {**observation("libero", rng), "prompt": "x"}
    with policy(ckpts, "pi0", "pi0_libero", max_batch=2) as p:
        with pytest.raises(pi0.InputError, match="observation/wrist_image"):
            p.infer({k: v for k, v in obs.items() if k != "observation/wrist_image"})
        with pytest.raises(pi0.InputError, match="observation/image.*complex64"):
            p.infer({**obs, "observation/image": obs["observation/image"].astype(np.complex64)})
        with pytest.raises(pi0.InputError, match="observation/image.*5 dimensions"):
            p.infer({**obs, "observation/image": obs["observation/image"][None, None]})
        with pytest.raises(pi0.InputError, match="observation/state"):
            p.infer({**obs, "observation/state": np.ones(9)})
        with pytest.raises(pi0.InputError, match="observation/state"):
            p.infer({**obs, "observation/state": np.array([np.nan] * 8)})
        with pytest.raises(pi0.InputError, match="Prompt is required"):
            p.infer({k: v for k, v in obs.items() if k != "prompt"})
        with pytest.raises(pi0.InputError, match=r"noise: expected shape \[5, 32\]"):
            p.infer(obs, np.zeros((4, 32), np.float32))
        with pytest.raises(pi0.InputError, match="noise: value 0 is not finite"):
            p.infer(obs, np.full((H, A), np.nan, np.float32))
        with pytest.raises(pi0.InputError, match="noise given twice"):
            p.infer({**obs, "noise": np.zeros((H, A))}, np.zeros((H, A)))
        with pytest.raises(pi0.InputError, match="expected a dict"):
            p.infer([obs])
        with pytest.raises(pi0.InputError, match="prompt: invalid UTF-8"):
            p.infer({**obs, "prompt": b"\xff\xfe"})
        with pytest.raises(pi0.InputError, match="rtc: unknown key 'delay'"):
            p.infer(obs, rtc={"delay": 1})
        with pytest.raises(pi0.InputError, match="1..2"):
            p.infer_batch([obs] * 3)
        with pytest.raises(pi0.InputError, match="observation 1.*observation/wrist_image"):
            p.infer_batch([obs, {k: v for k, v in obs.items() if k != "observation/wrist_image"}])
        with pytest.raises(pi0.InputError, match=r"noise: expected shape \[2, 5, 32\]"):
            p.infer_batch([obs, obs], np.zeros((H, A), np.float32))
        assert p.infer(obs, seed=1)["actions"].shape == (H, 7)   # still usable after every refusal
    with pytest.raises(pi0.Error, match="closed"):
        p.infer(obs)


def test_load_errors(ckpts, tmp_path):
    with pytest.raises(pi0.Error, match=str(tmp_path / "nowhere")):
        pi0.Policy(tmp_path / "nowhere", config="pi0_libero", tokenizer=TOKENIZER, backend="cpu")
    with pytest.raises(pi0.InputError, match="tokenizer"):
        pi0.Policy(ckpts["pi0"], config="pi0_libero", backend="cpu")
    with pytest.raises(pi0.Error, match="pi0_nonexistent"):
        pi0.Policy(ckpts["pi0"], config="pi0_nonexistent", tokenizer=TOKENIZER, backend="cpu")
    with pytest.raises(pi0.InputError, match="backend"):
        pi0.Policy(ckpts["pi0"], config="pi0_libero", tokenizer=TOKENIZER, backend="tpu")
    ok, why = pi0.backend_available("cpu")
    assert ok and why == ""


# ---- threads, the GIL, memory ----

def test_threads_equal_serial(ckpts):
    rng = np.random.RandomState(13)
    obs = [{**observation("libero", rng), "prompt": f"task {i}"} for i in range(8)]
    noise = rng.randn(8, H, A).astype(np.float32)
    with policy(ckpts, "pi05", "pi05_libero") as p:
        serial = [p.infer(o, noise[i])["actions"] for i, o in enumerate(obs)]
        got = [None] * 8

        def work(i):
            for _ in range(3):
                got[i] = p.infer(obs[i], noise[i])["actions"]
        ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    for i in range(8):
        assert np.array_equal(got[i], serial[i]), i


def test_gil_released(ckpts):
    """Another Python thread runs while the engine works: the main thread counts while an infer is in flight."""
    rng = np.random.RandomState(14)
    obs = {**observation("libero", rng), "prompt": "x"}
    with policy(ckpts, "pi0", "pi0_libero", steps=200) as p:   # long enough to observe (~0.2 s or more)
        done = threading.Event()
        t = threading.Thread(target=lambda: (p.infer(obs, seed=1), done.set()))
        count = 0
        t0 = time.perf_counter()
        t.start()
        while not done.is_set():
            count += 1
        t.join()
        elapsed = time.perf_counter() - t0
    # with the GIL held for the whole call, the loop could only run between the thread's Python steps
    assert elapsed > 0.02 and count > 10000, (count, elapsed)


def rss_kb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def test_no_leak_over_1000_calls(ckpts):
    rng = np.random.RandomState(15)
    obs = {**observation("droid", rng), "prompt": "pick up the fork"}
    noise = rng.randn(H, A).astype(np.float32)
    with policy(ckpts, "pi0", "pi0_droid", steps=1, threads=1) as p:
        for _ in range(100):
            p.infer(obs, noise)
        before = rss_kb()
        for _ in range(1000):
            p.infer(obs, noise, rtc={"executed": 1})
        grown = rss_kb() - before
    # a prepared observation alone is ~60 KB here: one lost per call would be ~60 MB
    assert grown < 2048, f"RSS grew by {grown} KB over 1000 calls"


def test_close_while_threads_run(ckpts):
    """close() waits for the calls in flight; the threads' later calls raise pi0.Error, nothing crashes."""
    rng = np.random.RandomState(16)
    obs = {**observation("libero", rng), "prompt": "x"}
    p = policy(ckpts, "pi0", "pi0_libero", steps=2)
    done, errors, started = [0] * 4, [], threading.Barrier(5)

    def work(i):
        started.wait()
        while True:
            try:
                p.infer(obs, seed=i + 1)
                done[i] += 1
            except pi0.Error as e:
                errors.append(str(e))
                return
    ts = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in ts:
        t.start()
    started.wait()
    time.sleep(0.3)
    p.close()
    for t in ts:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in ts)
    assert errors == ["the policy is closed"] * 4 and sum(done) > 0


def test_review_cases(ckpts):
    """Unused keys of any kind are ignored, as openpi does; prompt None is no prompt; odd argument types raise
    pi0.InputError; a key the policy needs but got in an unreadable form is named with the reason; after a batch the
    kept RTC chunk is gone (the next `executed` request runs unguided)."""
    rng = np.random.RandomState(17)
    obs = {**observation("libero", rng), "prompt": "x"}
    noise = rng.randn(H, A).astype(np.float32)
    with policy(ckpts, "pi0", "pi0_libero", max_batch=2, default_prompt="open the drawer") as p:
        base = p.infer(obs, noise)["actions"]
        odd = {"camera_names": ["high", "low"], "depth": np.zeros((4, 4), np.int16), "blob": object(),
               "ragged": [[1, 2], [3]], "five_d": np.zeros((1, 1, 1, 1, 1), np.float32), "c": 1j}
        assert np.array_equal(p.infer({**obs, **odd}, noise)["actions"], base)
        dflt = p.infer({**obs, "prompt": "open the drawer"}, noise)["actions"]
        assert np.array_equal(p.infer({**obs, "prompt": None}, noise)["actions"], dflt)
        with pytest.raises(pi0.InputError, match=r"'observation/state' was given as dtype int16"):
            p.infer({**obs, "observation/state": np.zeros(8, np.int16)}, noise)
        for kw in ({"seed": 1.5}, {"seed": "12"}, {"seed": -1}, {"seed": 2 ** 64},
                   {"rtc": {"inference_delay": None}}, {"rtc": {"inference_delay": 2 ** 32}},
                   {"rtc": {"executed": -3}}, {"rtc": {"max_guidance_weight": "a"}}, {"rtc": {"schedule": 3}},
                   {"rtc": {"prev_chunk": [["a"] * A]}}):
            with pytest.raises(pi0.InputError):
                p.infer(obs, noise, **kw)
        for bad in ({"\ud800": np.zeros(3)}, {"prompt": "\ud800"}):
            with pytest.raises(pi0.InputError, match="UTF-8"):
                p.infer({**obs, **bad}, noise)
        with pytest.raises(pi0.InputError):
            p.infer(obs, "abc")
        with pytest.raises(pi0.InputError):
            p.infer_batch([obs, obs], seeds=5)
        with pytest.raises(pi0.InputError):
            p.infer_batch([obs, obs], rtc=[[1], None])
        with pytest.raises(pi0.InputError):
            p.warmup("a")
        with pytest.raises(pi0.InputError, match="prompt"):
            p.warmup(1, 5)
        with pytest.raises(pi0.InputError, match="NUL"):
            p.warmup(1, "go\0x")
        assert p.warmup(1, "pick up the bowl") > 0 and p.warmup(2, None) > 0
        p.infer(obs, noise)
        p.infer_batch([obs, obs], np.stack([noise, noise]))
        assert p.last_chunk() is None
        assert np.array_equal(p.infer(obs, noise, rtc={"executed": 1})["actions"], base)   # unguided
    ok, why = pi0.backend_available("tpu")
    assert not ok and "backend" in why


def test_model_after_close_and_misaligned(tmp_path):
    from test_model import FIX   # noqa: F401  (the fixtures folder)
    import os
    t = read_st(os.path.join(FIX, "tiny-pi0", "b1.in.safetensors"))
    with pi0.Model(os.path.join(FIX, "tiny-pi0"), backend="cpu") as m:
        want = m.infer(t["images"], t["state"], t["tokens"], t["token_mask"], t["image_masks"], t["noise"])
        buf = np.zeros(t["images"].nbytes + 4, np.uint8)   # a misaligned float32 view: converted, same result
        mis = np.frombuffer(buf.data, dtype=np.float32, count=t["images"].size, offset=1).reshape(t["images"].shape)
        mis[...] = t["images"]
        assert not mis.flags.aligned
        got = m.infer(mis, t["state"], t["tokens"], t["token_mask"], t["image_masks"], t["noise"])
        assert np.array_equal(got, want)
        for kw in ({"seed": -1}, {"seed": None}, {"tokens": t["tokens"].astype(np.int64) + 2 ** 32}):
            args = {"images": t["images"], "state": t["state"], "tokens": t["tokens"], **kw}
            with pytest.raises(pi0.InputError):
                m.infer(**args)
    with pytest.raises(pi0.Error, match="closed"):
        m.timing()
    with pytest.raises(pi0.InputError):
        pi0.Model.prefix_weights(-1, 0, 1, 1)
    with pytest.raises(pi0.InputError):
        pi0.Tokenizer(TOKENIZER).encode(b"bytes")
