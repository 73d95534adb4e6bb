# Summarizes ab_base.jsonl (scripts/gpu/ab_base.sh): one line per run, serving runs with
# their host-time parts.
import json,sys
for l in open(sys.argv[1]):
    try: j=json.loads(l)
    except Exception: continue
    r=j.get("result") or {}
    if "output_tokens_per_s" in r and r.get("mode")=="serving":
        mc=r.get("model_call_per_step",{})
        print("%-5s args%d r%d serving tok/s %.0f TPOT p50 %.2f host %.3f fwd %.2f mc %s" % (j["build"], j["args"], j["round"], r["output_tokens_per_s"], r["tpot_ms"]["p50"], r["host_ms_per_step"], r["forward_ms_per_step"], json.dumps(mc)))
    else:
        keys=[k for k in r if "tok" in k]
        print(j["build"], "args%d"%j["args"], "r%d"%j["round"], {k:r[k] for k in keys})
