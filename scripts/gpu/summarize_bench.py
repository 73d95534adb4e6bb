# Summarizes the bench phase's JSON files (scripts/gpu/run_gpu.sh bench): one line per
# figure of issue 3, with the serving runs' host-time parts.
import json
import sys
import os

out = sys.argv[1]
for name in ["bench_8b_decode", "bench_8b_decode_eager", "bench_8b_decode_nopdl", "bench_8b_prefill",
             "bench_8b_serving_32", "bench_8b_serving_128"]:
    path = os.path.join(out, name + ".json")
    if not os.path.exists(path):
        print(name, "missing")
        continue
    lines = [l for l in open(path) if l.strip().startswith("{")]
    if not lines:
        print(name, "no result")
        continue
    r = json.loads(lines[-1])
    if r.get("mode") == "serving":
        print("%-24s output tok/s %.0f  TPOT p50 %.2f ms  TTFT p50 %.1f ms  duration %.3f s  host/step %.3f ms  %s" %
              (name, r["output_tokens_per_s"], r["tpot_ms"]["p50"], r["ttft_ms"]["p50"], r["duration_s"],
               r["host_ms_per_step"], json.dumps(r.get("model_call_per_step", {}))))
    else:
        print("%-24s %s" % (name, {k: round(v, 1) for k, v in r.items() if isinstance(v, float) and "tok" in k}))
