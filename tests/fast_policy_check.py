"""π0-FAST served by the policy: `pi0 run --fast-tokenizer` against openpi's pipeline restated here, on tiny π0-FAST
checkpoints whose greedy decoding writes chosen tokens (tests/fast_policy_fixture.py), so that the actions are real
ones and not openpi's zero fallback.

Set-up (seeded): a FAST tokenizer trained as the processor's `fit` trains it (tokenizers, fast_ref.fit_fast); the
tokenizer of tests/make_tokenizer.py with PaliGemma's <loc> / <seg> tail, so that every FAST id lands on a piece; a
chunk of distinct quantised DCT coefficients for DROID (10 x 8) and for LIBERO (10 x 7), whose FAST tokens the
checkpoints are built to write ("Action: ", the tokens, "|", the end token), or to write with a part missing or wrong
(no "Action: ", a <seg> id, a token short, no "|").

Per case, the reference is openpi's code restated (fast_ref.py and below: DroidInputs / LiberoInputs for
ModelType.PI0_FAST, Normalize with quantiles, FASTTokenizer.tokenize, extract_actions with sentencepiece and
transformers, Unnormalize, AbsoluteActions, the output slice), run on the tokens the model is built to write:
  - the model inputs `pi0 run --dump-inputs` writes equal openpi's, bit for bit (camera order and masks, pixels,
    prompt tokens and masks, token_ar_mask all 0);
  - `pi0 infer` on those inputs writes exactly the chosen tokens (the construction holds in the engine);
  - the actions equal the reference's to 1e-10 relative (the inverse DCT: the engine sums it, scipy uses an FFT);
    where the tokens decode, the reference's normalised chunk is the chosen one (the test is not one of zeros);
    where openpi falls back to zeros, the engine does too, warns once on stderr and says so in its output.
Then `--robot` without a config, a tokenizer.json path for the FAST directory, `pi0 info`, `pi0 convert --config`,
and bad input: each exits 1 with a message naming the file, field, what was expected and what was found.
Runs in the venv of fast_venv.py. Prints `fast_policy: N passed, M failed`. Usage: fast_policy_check.py BUILD"""
import os
import sys

BUILD = sys.argv[1] if len(sys.argv) > 1 else "build"
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import fast_venv  # noqa: E402

fast_venv.enter("fast_policy", BUILD)

import json  # noqa: E402
import shutil  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402

import numpy as np  # noqa: E402
import sentencepiece as spm  # noqa: E402
from scipy.fft import idct  # noqa: E402
from transformers.utils import logging as hf_logging  # noqa: E402

import fast_policy_fixture as F  # noqa: E402
from fast_ref import chunks, fit_fast, openpi_extract, openpi_prompt  # noqa: E402

hf_logging.set_verbosity_error()
SEED = 20250301
PI0 = os.path.abspath(os.path.join(BUILD, "pi0"))
TOL = 1e-10
passed = failed = 0
print("fast_policy_check: seed %d" % SEED)


def check(ok, what, detail=""):
    global passed, failed
    passed, failed = passed + bool(ok), failed + (not ok)
    print("%s %s%s" % ("PASS" if ok else "FAIL", what, (": " + detail) if detail else ""), flush=True)
    return ok


def pi0(*args):
    p = subprocess.run([PI0, *args], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "OMP_WAIT_POLICY": "PASSIVE"})
    return p.returncode, p.stdout, p.stderr


read_st = F.read_safetensors   # the fixture's reader


# ---- openpi's pipeline around the model, restated (src/openpi/policies/*_policy.py, transforms.py, policy.py)

def openpi_inputs(robot, obs):
    """(state, [images in the model's camera order], masks) of DroidInputs / LiberoInputs for ModelType.PI0_FAST."""
    if robot == "droid":
        state = np.concatenate([obs["observation/joint_position"], np.atleast_1d(obs["observation/gripper_position"])])
        base, wrist = obs["observation/exterior_image_1_left"], obs["observation/wrist_image_left"]
        return state, [base, np.zeros_like(base), wrist], [True, True, True]
    base, wrist = obs["observation/image"], obs["observation/wrist_image"]
    return obs["observation/state"], [base, wrist, np.zeros_like(base)], [True, True, True]


def openpi_policy(robot, obs, prompt, stats, L, model_tokens, H, A, D, delta, sp, tok, scale, min_token):
    """(model inputs as `--dump-inputs` names them, normalised chunk, outcome, actions [H, D])."""
    state, images, masks = openpi_inputs(robot, obs)
    s = stats["norm_stats"]["state"]
    q01, q99 = np.asarray(s["q01"])[:len(state)], np.asarray(s["q99"])[:len(state)]
    nstate = (state - q01) / (q99 - q01 + 1e-6) * 2.0 - 1.0                       # Normalize (quantiles)
    tokens, mask, ar, _ = openpi_prompt(sp, prompt, nstate, L)                     # TokenizeFASTInputs
    inputs = {"images": np.stack([im.astype(np.float32) / 255.0 * 2.0 - 1.0 for im in images])[None],
              "image_masks": np.array([masks], np.uint8), "tokens": np.array([tokens], np.int32),
              "token_mask": np.array([mask], np.uint8), "token_ar_mask": np.array([ar], np.int32)}
    row = np.zeros(256, np.int64)                                                   # sample_actions' output_tokens
    row[:len(model_tokens)] = model_tokens
    chunk, outcome = openpi_extract(sp, tok, row, H, A, scale, min_token)          # ExtractFASTActions
    a = stats["norm_stats"]["actions"]
    aq01, aq99 = np.asarray(a["q01"]), np.asarray(a["q99"])
    n = len(aq01)                                                                   # Unnormalize (quantiles)
    acts = np.concatenate([(chunk[:, :n] + 1.0) / 2.0 * (aq99 - aq01 + 1e-6) + aq01, chunk[:, n:]], axis=-1)
    ustate = (nstate + 1.0) / 2.0 * (q99 - q01 + 1e-6) + q01
    if delta:   # AbsoluteActions(make_bool_mask(6, -1)) for LIBERO, (7, -1) for DROID
        m = np.array([True] * (6 if robot == "libero" else 7) + [False])
        acts[..., :len(m)] += np.expand_dims(np.where(m, ustate[..., :len(m)], 0), axis=-2)
    return inputs, chunk, outcome, acts[..., :D]


def main():
    rng = np.random.default_rng(SEED)
    tmp = tempfile.mkdtemp(prefix="fast_policy.")
    try:
        run(tmp, rng)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run(tmp, rng):
    # ---- tokenizers
    fast_dir = os.path.join(tmp, "fast")
    tok, lo, hi, _ = fit_fast(fast_dir, chunks(rng, 600, 10, 8, 1.0), 10, 400)
    n_fast = len(tok.get_vocab())
    base, tok_path = os.path.join(tmp, "base.model"), os.path.join(tmp, "tok.model")
    subprocess.run([sys.executable, os.path.join(HERE, "make_tokenizer.py"), base], check=True)
    V = F.paligemma_like(base, tok_path, n_fast)
    sp = spm.SentencePieceProcessor(model_file=tok_path)
    # the coefficients the BPE can write (a byte no training chunk held has no token: its encoder drops it) in one
    # byte (code points from 128 on take two, whose lead byte would repeat)
    pool = [c for c in range(lo, min(hi, lo + 127) + 1) if tok.decode(tok(chr(c - lo))["input_ids"]) == chr(c - lo)]
    check(sp.get_piece_size() == V and len(pool) >= 80, "tokenizers: PaliGemma-like %d pieces (%d <loc>), FAST "
          "vocabulary %d, %d coefficients of %d..%d writable" % (V, n_fast, n_fast, len(pool), lo, hi))

    def fast_ids(coef):
        text = "".join(chr(int(c) - lo) for c in coef.flatten())
        ids = tok(text)["input_ids"]
        assert tok.decode(ids) == text and max(ids) < n_fast
        return ids

    coef = {"droid": F.distinct_coefficients(rng, 10, 8, pool), "libero": F.distinct_coefficients(rng, 10, 7, pool)}
    ids = {r: fast_ids(c) for r, c in coef.items()}
    # ---- checkpoints: (robot, A, L, asset) and what the model writes
    spec = {"droid": (8, 250, "droid"), "libero": (7, 180, "physical-intelligence/libero")}
    cks, chains = {}, {}
    variants = {"": {}, "-noaction": {"action": False}, "-nobar": {"bar": False}}
    for r, (A, L, asset) in spec.items():
        for sfx, kw in variants.items():
            name = r + sfx
            cks[name] = os.path.join(tmp, name)
            chains[name] = F.chain(sp.encode, V, ids[r], **kw)
            F.policy_dir(cks[name], V, chains[name], 10, A, L, asset, 8, A, SEED + len(name))
    seg = ids["droid"][:3] + [-5] + ids["droid"][3:]           # a <seg> id: the processor's decode fails
    cks["droid-badid"] = os.path.join(tmp, "droid-badid")
    chains["droid-badid"] = F.chain(sp.encode, V, seg)
    F.policy_dir(cks["droid-badid"], V, chains["droid-badid"], 10, 8, 250, "droid", 8, 8, SEED + 1)
    cks["droid-short"] = os.path.join(tmp, "droid-short")     # a token short: not 80 coefficients
    chains["droid-short"] = F.chain(sp.encode, V, ids["droid"][:-1])
    F.policy_dir(cks["droid-short"], V, chains["droid-short"], 10, 8, 250, "droid", 8, 8, SEED + 2)
    stats = {n: json.load(open(os.path.join(d, "assets", spec[n.split("-")[0]][2], "norm_stats.json")))
             for n, d in cks.items()}

    # ---- observations
    def obs_of(robot):
        img = lambda: rng.integers(0, 256, (56, 56, 3), dtype=np.uint8)   # noqa: E731  (the model's image size)
        if robot == "droid":
            return {"observation/exterior_image_1_left": img(), "observation/wrist_image_left": img(),
                    "observation/joint_position": rng.uniform(-1.5, 1.5, 7), "observation/gripper_position": np.array(0.4)}
        return {"observation/image": img(), "observation/wrist_image": img(), "observation/state": rng.uniform(-1.5, 1.5, 8)}

    obs = {r: obs_of(r) for r in spec}
    obs_path = {}
    for r, o in obs.items():
        obs_path[r] = os.path.join(tmp, r + ".obs.safetensors")
        F.write_safetensors(obs_path[r], o)
    prompt = "  Pick_up the RED cup, then\nPLACE it \u00c9 "
    common = ["--tokenizer", tok_path, "--fast-tokenizer", fast_dir, "--prompt", prompt]

    def case(label, name, robot, args, D, delta, want_outcome):
        A, L = spec[robot][0], spec[robot][1]
        dump = os.path.join(tmp, label.replace(" ", "_") + ".in.safetensors")
        rc, out, err = pi0("run", "--checkpoint", cks[name], *args, "--obs", obs_path[robot], *common, "--json",
                           "--dump-inputs", dump)
        if not check(rc == 0, label + ": pi0 run", err.strip()[-300:]):
            return None
        inputs, chunk, outcome, want = openpi_policy(robot, obs[robot], prompt, stats[name], L, chains[name], 10, A, D,
                                                     delta, sp, tok, 10, lo)
        got_in = read_st(dump)
        diff = [k for k in inputs if k not in got_in or got_in[k].dtype != inputs[k].dtype or
                got_in[k].shape != inputs[k].shape or got_in[k].tobytes() != inputs[k].tobytes()]
        check(not diff and "state" not in got_in and "noise" not in got_in,
              label + ": model inputs = openpi's, bit for bit (cameras, masks, prompt, token_ar_mask)",
              "differ: %s%s" % (diff, "; a state tensor" if "state" in got_in else ""))
        out_t = os.path.join(tmp, label.replace(" ", "_") + ".out.safetensors")
        rc2, _, err2 = pi0("infer", "--checkpoint", cks[name], "--inputs", dump, "--output", out_t)
        toks = read_st(out_t)["output_tokens"][0].tolist() if rc2 == 0 else []
        check(toks == chains[name] + [0] * (256 - len(chains[name])), label + ": the model writes the chosen %d tokens"
              % len(chains[name]), err2.strip()[-200:] or str(toks[:12]))
        got = np.array(json.loads(out)["actions"], dtype=np.float64)
        err_max = float(np.max(np.abs(got - want))) if got.shape == want.shape else float("inf")
        check(got.shape == want.shape and err_max <= TOL * max(1.0, float(np.max(np.abs(want)))),
              label + ": actions [10, %d] = openpi's (%s)" % (D, outcome), "max |diff| %.3g" % err_max)
        check(outcome == want_outcome, label + ": openpi's outcome is %s" % want_outcome, outcome)
        warned = err.count("warning: π0-FAST")
        if want_outcome == "decoded":
            exact = idct(coef[robot] / 10, axis=0, norm="ortho")
            check(float(np.max(np.abs(chunk - exact))) < 1e-12 and float(np.max(np.abs(got))) > 0.1 and warned == 0,
                  label + ": the tokens decode to the chosen chunk, no warning", "warnings %d" % warned)
        else:
            check(np.all(chunk == 0) and warned == 1, label + ": openpi's zero chunk, warned once", err.strip()[-200:])
        return got

    a_droid = case("pi0_fast_droid", "droid", "droid", ["--config", "pi0_fast_droid"], 8, False, "decoded")
    case("pi0_fast_libero (delta actions)", "libero", "libero", ["--config", "pi0_fast_libero"], 7, True, "decoded")
    case("pi0_fast_libero --delta-actions off", "libero", "libero", ["--config", "pi0_fast_libero", "--delta-actions",
         "off"], 7, False, "decoded")
    case("no '|' (the text runs to the end)", "droid-nobar", "droid", ["--config", "pi0_fast_droid"], 8, False, "decoded")
    case("no 'Action: '", "droid-noaction", "droid", ["--config", "pi0_fast_droid"], 8, False, "no_action")
    case("LIBERO no 'Action: '", "libero-noaction", "libero", ["--config", "pi0_fast_libero"], 7, True, "no_action")
    case("a <seg> id", "droid-badid", "droid", ["--config", "pi0_fast_droid"], 8, False, "bad_id")
    case("a token short", "droid-short", "droid", ["--config", "pi0_fast_droid"], 8, False, "bad_size")
    case("--robot droid (config.json's shape)", "droid", "droid", ["--robot", "droid"], 8, False, "decoded")
    case("--robot libero (delta by default)", "libero", "libero", ["--robot", "libero"], 7, True, "decoded")

    # the FAST directory given as its tokenizer.json; the text output says when the chunk is openpi's zeros
    base_args = ["--obs", obs_path["droid"], "--tokenizer", tok_path, "--prompt", prompt, "--config", "pi0_fast_droid"]
    rc, out, err = pi0("run", "--checkpoint", cks["droid"], *base_args, "--fast-tokenizer",
                       os.path.join(fast_dir, "tokenizer.json"), "--json")
    same = rc == 0 and a_droid is not None and np.array_equal(np.array(json.loads(out)["actions"]), a_droid)
    check(same, "--fast-tokenizer DIR/tokenizer.json: the same actions", err.strip()[-200:])
    rc, out, err = pi0("run", "--checkpoint", cks["droid-noaction"], *base_args, "--fast-tokenizer", fast_dir)
    check(rc == 0 and "no actions decoded" in out, "text output names openpi's zero chunk", out.splitlines()[0] if out else err)
    rc, out, err = pi0("run", "--checkpoint", cks["droid"], *base_args, "--fast-tokenizer", fast_dir)
    check(rc == 0 and "no actions decoded" not in out, "text output of decoded tokens", out.splitlines()[0] if out else err)
    rc, out, err = pi0("info", "--checkpoint", cks["droid"])
    check(rc == 0 and "model: pi0_fast" in out and "--fast-tokenizer" in out, "pi0 info: pi0_fast, --fast-tokenizer", out)
    conv = os.path.join(tmp, "converted")
    rc, _, err = pi0("convert", "--checkpoint", cks["droid"], "--out", conv, "--config", "pi0_fast_libero")
    cfg = json.load(open(os.path.join(conv, "config.json"))) if rc == 0 else {}
    check(rc == 0 and (cfg.get("model_type"), cfg.get("action_dim"), cfg.get("action_horizon"), cfg.get("max_token_len"))
          == ("pi0_fast", 7, 10, 180), "convert --config pi0_fast_libero writes its action dim, horizon, prompt length",
          err.strip()[-200:] or str(cfg))
    errors(tmp, cks, stats, spec, obs_path, tok_path, base, fast_dir, prompt)


def errors(tmp, cks, stats, spec, obs_path, tok_path, base, fast_dir, prompt):
    """Bad input: exit 1 and a message with every needle."""
    def copy_ck(name, state_n=None, action_n=None, quantiles=True):
        d = os.path.join(tmp, name)
        shutil.copytree(cks["droid"], d)
        st = json.loads(json.dumps(stats["droid"]))
        for key, n in (("state", state_n), ("actions", action_n)):
            if n:
                for k in st["norm_stats"][key]:
                    st["norm_stats"][key][k] = (st["norm_stats"][key][k] * 8)[:n]
            if not quantiles:
                del st["norm_stats"][key]["q01"], st["norm_stats"][key]["q99"]
        F.write_norm_stats(d, "droid", st)
        return d

    pi0_ck = os.path.join(tmp, "pi0")
    os.makedirs(pi0_ck)
    for f in ("config.json", "model.safetensors"):
        shutil.copy(os.path.join(HERE, "fixtures", "tiny-pi0", f), pi0_ck)
    F.write_norm_stats(pi0_ck, "droid", stats["droid"])
    bad_json = os.path.join(tmp, "fast-bad")
    shutil.copytree(fast_dir, bad_json)
    text = open(os.path.join(fast_dir, "tokenizer.json")).read()
    open(os.path.join(bad_json, "tokenizer.json"), "w").write(text[:len(text) // 2])
    no_cfg = os.path.join(tmp, "fast-nocfg")
    shutil.copytree(fast_dir, no_cfg)
    os.remove(os.path.join(no_cfg, "processor_config.json"))
    rtc = os.path.join(tmp, "rtc.safetensors")
    F.write_safetensors(rtc, {"rtc_prev": np.zeros((2, 8), np.float32)})
    noise = os.path.join(tmp, "noise.safetensors")
    F.write_safetensors(noise, {"noise": np.zeros((10, 8), np.float32)})
    droid = ["--obs", obs_path["droid"], "--prompt", prompt]
    ft = ["--fast-tokenizer", fast_dir]
    V = len(F.pieces(tok_path))
    cases = [
        ("no --fast-tokenizer", [cks["droid"], "--config", "pi0_fast_droid", "--tokenizer", tok_path],
         ["holds a π0-FAST model", "needs the FAST action tokenizer", "--fast-tokenizer", "tokenizer.json"]),
        ("a FAST tokenizer that is not there", [cks["droid"], "--config", "pi0_fast_droid", "--tokenizer", tok_path,
         "--fast-tokenizer", "/nonexistent/fast"], ["/nonexistent/fast", "No such file or directory"]),
        ("a FAST tokenizer file other than tokenizer.json", [cks["droid"], "--config", "pi0_fast_droid", "--tokenizer",
         tok_path, "--fast-tokenizer", os.path.join(fast_dir, "processor_config.json")],
         ["processor_config.json", "expected the processor's directory or its tokenizer.json"]),
        ("a truncated tokenizer.json", [cks["droid"], "--config", "pi0_fast_droid", "--tokenizer", tok_path,
         "--fast-tokenizer", bad_json], [os.path.join(bad_json, "tokenizer.json"), "invalid JSON at line"]),
        ("no processor_config.json", [cks["droid"], "--config", "pi0_fast_droid", "--tokenizer", tok_path,
         "--fast-tokenizer", no_cfg], [no_cfg, "neither processor_config.json nor preprocessor_config.json"]),
        ("a FAST tokenizer for a π0 checkpoint", [pi0_ck, "--robot", "droid", "--tokenizer", base, *ft],
         [pi0_ck, "holds a π0 model", "a FAST tokenizer is for π0-FAST checkpoints"]),
        ("--action-dim for a π0 checkpoint", [pi0_ck, "--robot", "droid", "--tokenizer", base, "--action-dim", "8"],
         ["holds a π0 model", "an action dim is for π0-FAST checkpoints"]),
        ("a π0-FAST config on a π0 checkpoint", [pi0_ck, "--config", "pi0_fast_droid", "--tokenizer", base, *ft],
         ["config pi0_fast_droid is for a π0-FAST checkpoint", pi0_ck, "holds a π0 model"]),
        ("a π0 config on a π0-FAST checkpoint", [cks["droid"], "--config", "pi0_droid", "--tokenizer", tok_path, *ft],
         ["config pi0_droid is for a π0 checkpoint", cks["droid"], "holds a π0-FAST model"]),
        ("a π0.5 config on a π0-FAST checkpoint", [cks["droid"], "--config", "pi05_droid", "--tokenizer", tok_path, *ft],
         ["config pi05_droid is for a π0.5 checkpoint", "holds a π0-FAST model"]),
        ("a chunk narrower than the robot's actions", [cks["droid"], "--config", "pi0_fast_droid", "--action-dim", "4",
         "--tokenizer", tok_path, *ft], ["droid robot", "at least 8 action dims", "decode to 4 action dims"]),
        ("action stats longer than the chunk", [copy_ck("st-a9", action_n=9), "--config", "pi0_fast_droid", "--tokenizer",
         tok_path, *ft], ["st-a9/assets/droid/norm_stats.json", "norm_stats.actions has 9 values", "8 action dims"]),
        ("state stats longer than the state", [copy_ck("st-s32", state_n=32), "--config", "pi0_fast_droid", "--tokenizer",
         tok_path, *ft], ["st-s32/assets/droid/norm_stats.json", "norm_stats.state has 32 values", "droid state 8"]),
        ("stats without quantiles", [copy_ck("st-noq", quantiles=False), "--config", "pi0_fast_droid", "--tokenizer",
         tok_path, *ft], ["st-noq/assets/droid/norm_stats.json", "π0-FAST uses quantile normalisation", "no q01/q99"]),
        ("a tokenizer of another vocabulary", [cks["droid"], "--config", "pi0_fast_droid", "--tokenizer", base, *ft],
         [base, "pieces, the π0-FAST model's vocabulary %d" % V]),
        ("--steps", [cks["droid"], "--config", "pi0_fast_droid", "--tokenizer", tok_path, *ft, "--steps", "5"],
         ["num_steps 5", "π0-FAST", "no flow-matching steps"]),
        ("--noise", [cks["droid"], "--config", "pi0_fast_droid", "--tokenizer", tok_path, *ft, "--noise", noise],
         ["observation noise", "takes no noise"]),
        ("real-time chunking", [cks["droid"], "--config", "pi0_fast_droid", "--tokenizer", tok_path, *ft, "--rtc-prev",
         rtc], ["real-time chunking", "π0-FAST policy decodes tokens"]),
    ]
    for label, args, needles in cases:
        rc, out, err = pi0("run", "--checkpoint", *args, *droid)
        msg = err.strip().splitlines()[-1] if err.strip() else ""
        missing = [n for n in needles if n not in err]
        check(rc == 1 and not missing, "error: " + label, "exit %d, %s%s" % (rc, msg[:240], "; lacks %s" % missing if missing else ""))
    rc, _, err = pi0("convert", "--checkpoint", cks["droid"], "--out", os.path.join(tmp, "conv-bad"), "--config", "pi0_droid")
    check(rc == 1 and "config pi0_droid is for a π0 checkpoint" in err and "holds a π0-FAST model" in err,
          "error: convert --config pi0_droid of a π0-FAST checkpoint", err.strip()[-200:])


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # noqa: BLE001 - a crash of the check is a failure, with its reason
        import traceback
        traceback.print_exc()
        check(False, "fast_policy_check ran to the end", repr(e))
    print("fast_policy: %d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)
