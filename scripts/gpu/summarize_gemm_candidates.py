# Summarizes a GEMM sweep (STRATA_OP_BENCH=gemm cuda_op_bench output): per shape and token
# count, each path's graph-replayed bandwidth fraction / us.
import json,sys,collections
rows=[json.loads(l) for l in open(sys.argv[1]) if l.startswith('{"op"')]
t=collections.defaultdict(dict)
for r in rows: t[(r["shape"],r["tokens"])][r["path"]]=(r["graph_bw_fraction"],r["graph_us"])
paths=sorted({r["path"] for r in rows})
print("shape tokens " + " ".join(paths))
for k,v in t.items():
    print(k[0],k[1]," ".join("%s=%.3f/%.1f"%(p,v[p][0],v[p][1]) for p in paths if p in v))
