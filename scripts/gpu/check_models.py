#!/usr/bin/env python3
"""End-to-end checks of the CUDA backend through the strata CLI, against references we did
not write (../shared):
  - stories260K, activations f32: greedy ids must equal expected/greedy.json (llama2.c run.c),
    both with decode graphs (the default) and with --enforce-eager
  - hf-tiny models, activations f32: last-position logits within 1e-3 of the HF float64
    reference (max abs error), and in bf16 cosine similarity >= 0.999.
Usage: check_models.py STRATA_BINARY SHARED_DIR   (exit 1 on any failure)"""
import json, math, os, subprocess, sys

strata, shared = sys.argv[1], sys.argv[2]
failures = []


def run(args, act):
    env = dict(os.environ, STRATA_CUDA_ACTIVATIONS=act)
    p = subprocess.run([strata, "run", "--device", "cuda", "--json", *args], env=env,
                       capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        raise RuntimeError(f"strata run {' '.join(args)} failed ({p.returncode}): {p.stderr.strip()[-800:]}")
    return json.loads(p.stdout)


def check(name, ok, detail):
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)
    if not ok:
        failures.append(name)


# stories260K greedy
sdir = os.path.join(shared, "models", "stories260K")
cases = json.load(open(os.path.join(sdir, "expected", "greedy.json")))
for act, extra in (("f32", []), ("f32", ["--enforce-eager"]), ("bf16", [])):
    for c in cases:
        name = f"stories260K {act}{' eager' if extra else ''} '{c['prompt']}'"
        try:
            ids = ",".join(str(i) for i in c["prompt_ids"])
            n = len(c["generated_ids"])
            out = run(["-m", os.path.join(sdir, "stories260K.bin"), "--tokenizer", os.path.join(sdir, "tok512.bin"),
                       "--prompt-ids", ids, "-n", str(n), "--temp", "0", "--ignore-eos", *extra], act)
            got, want = out["generated_ids"], c["generated_ids"]
            same = 0
            while same < min(len(got), len(want)) and got[same] == want[same]:
                same += 1
            # llama2.c stops when it produces BOS; strata ran past it (--ignore-eos).
            ok = same == len(want)
            if act == "f32":
                check(name, ok, f"{same}/{len(want)} greedy ids equal llama2.c's")
            else:
                print(f"INFO {name}: {same}/{len(want)} leading greedy ids equal llama2.c's (bf16, informational)")
        except Exception as e:  # noqa: BLE001
            check(name, False, str(e))

# hf-tiny logits
hdir = os.path.join(shared, "models", "hf-tiny")
for model in sorted(os.listdir(hdir)):
    ref = json.load(open(os.path.join(hdir, model, "reference.json")))
    for ci, c in enumerate(ref["cases"]):
        want = c["last_logits"]
        for act in ("f32", "bf16"):
            name = f"hf-tiny/{model} case {ci} {act}"
            try:
                out = run(["-m", os.path.join(hdir, model), "--prompt-ids", ",".join(str(i) for i in c["prompt"]),
                           "-n", "1", "--temp", "0", "--logits"], act)
                got = out["logits"]
                if len(got) != len(want):
                    check(name, False, f"{len(got)} logits, reference has {len(want)}")
                    continue
                err = max(abs(a - b) for a, b in zip(got, want))
                dot = sum(a * b for a, b in zip(got, want))
                cos = dot / (math.sqrt(sum(a * a for a in got)) * math.sqrt(sum(b * b for b in want)) + 1e-30)
                if act == "f32":
                    check(name, err <= 1e-3, f"max |logit - HF float64| = {err:.3g} (bound 1e-3), cosine {cos:.6f}")
                else:
                    check(name, cos >= 0.999, f"cosine {cos:.6f} (bound 0.999), max abs err {err:.3g}")
            except Exception as e:  # noqa: BLE001
                check(name, False, str(e))

print(f"model checks: {len(failures)} failed" + (": " + ", ".join(failures) if failures else ""))
sys.exit(1 if failures else 0)
