# One line per run of scripts/gpu/async_ab.sh (--line JSON), or a table of medians per case
# and mode from its async_ab.jsonl (a path).
import json
import statistics
import sys


def figure(rec):
    r = rec["result"]
    if r is None:
        return None, "no result"
    if "output_tokens_per_s" in r:
        calls = r.get("model_call_per_step", {})
        return r["output_tokens_per_s"], "out tok/s %.0f  TPOT p50 %.2f ms  overlapped %d/%d  host/step %.3f ms  %s" % (
            r["output_tokens_per_s"], r["tpot_ms"]["p50"], r.get("overlapped_steps", -1), r["steps"],
            r["host_ms_per_step"], json.dumps(calls))
    return r["decode_tokens_per_s"], "decode tok/s %.1f" % r["decode_tokens_per_s"]


if sys.argv[1] == "--line":
    rec = json.loads(sys.argv[2])
    print("%-12s %-5s round %d: %s" % (rec["case"], rec["mode"], rec["round"], figure(rec)[1]))
else:
    runs = {}
    for line in open(sys.argv[1]):
        rec = json.loads(line)
        v, _ = figure(rec)
        if v is not None:
            runs.setdefault((rec["case"], rec["mode"]), []).append(v)
    for (case, mode), vals in sorted(runs.items()):
        print("%-12s %-5s median %.1f  runs %s" % (case, mode, statistics.median(vals), " ".join("%.1f" % v for v in vals)))
