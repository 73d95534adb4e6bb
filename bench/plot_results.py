#!/usr/bin/env python3
"""Plots for docs/benchmarks.md from the JSON lines of bench/concurrency_sweep.sh, as SVG
written by hand (no plotting library needed, so anyone can regenerate them):
  <prefix>_throughput.svg   output tok/s against concurrency (log-log), peers as points
  <prefix>_ttft.svg         TTFT p50 / p90 / p99 against concurrency
  <prefix>_tpot.svg         TPOT p50 / p90 / p99 (the decode step's time) against batch size
Usage: bench/plot_results.py SWEEP.jsonl OUT_PREFIX "TITLE" [PEERS.json]
PEERS.json: [{"name": ..., "points": [[concurrency, output_tok_s], ...], "source": ...}]"""
import json, math, sys

W, H, L, R, T, B = 640, 400, 70, 170, 40, 50
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b"]


def ticks(lo, hi, mults=(1, 2, 5)):
    out, e = [], math.floor(math.log10(lo))
    while 10 ** e <= hi * 1.0001:
        for m in mults:
            v = m * 10 ** e
            if lo / 1.0001 <= v <= hi * 1.0001:
                out.append(v)
        e += 1
    # A narrow range (less than a decade) gets every integer multiple.
    return out if len(out) >= 4 or mults != (1, 2, 5) else ticks(lo, hi, tuple(range(1, 10)))


def fmt(v):
    return f"{v:,.0f}" if v >= 10 else (f"{v:.1f}" if v >= 1 else f"{v:.2g}")


def svg(title, xlabel, ylabel, series, path):
    xs = [x for s in series for x, _ in s["points"]]
    ys = [y for s in series for _, y in s["points"] if y > 0]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys) / 1.3, max(ys) * 1.3
    lx = lambda x: L + (math.log2(x) - math.log2(x0)) / max(1e-9, math.log2(x1) - math.log2(x0)) * (W - L - R)
    ly = lambda y: H - B - (math.log10(y) - math.log10(y0)) / (math.log10(y1) - math.log10(y0)) * (H - T - B)
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
         f'<rect width="{W}" height="{H}" fill="white"/>',
         f'<text x="{W / 2 - R / 2 + L / 2}" y="22" text-anchor="middle" font-size="14">{title}</text>',
         f'<line x1="{L}" y1="{H - B}" x2="{W - R}" y2="{H - B}" stroke="black"/>',
         f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H - B}" stroke="black"/>',
         f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">{xlabel}</text>',
         f'<text x="16" y="{(T + H - B) / 2}" text-anchor="middle" transform="rotate(-90 16 {(T + H - B) / 2})">{ylabel}</text>']
    c = x0
    while c <= x1:
        o.append(f'<line x1="{lx(c):.1f}" y1="{H - B}" x2="{lx(c):.1f}" y2="{H - B + 4}" stroke="black"/>'
                 f'<text x="{lx(c):.1f}" y="{H - B + 17}" text-anchor="middle">{c}</text>')
        c *= 2
    for v in ticks(y0, y1):
        o.append(f'<line x1="{L}" y1="{ly(v):.1f}" x2="{W - R}" y2="{ly(v):.1f}" stroke="#ddd"/>'
                 f'<text x="{L - 6}" y="{ly(v) + 4:.1f}" text-anchor="end">{fmt(v)}</text>')
    for i, s in enumerate(series):
        col = COLORS[i % len(COLORS)]
        pts = sorted(s["points"])
        if s.get("line", True) and len(pts) > 1:
            dash = "" if s.get("measured_line", True) else ' stroke-dasharray="5,4"'
            o.append(f'<polyline fill="none" stroke="{col}" stroke-width="2"{dash} points="' +
                     " ".join(f"{lx(x):.1f},{ly(y):.1f}" for x, y in pts) + '"/>')
        for x, y in pts:
            o.append(f'<circle cx="{lx(x):.1f}" cy="{ly(y):.1f}" r="3.5" fill="{col}"/>')
        yl = T + 14 + 18 * i
        o.append(f'<rect x="{W - R + 12}" y="{yl - 9}" width="12" height="12" fill="{col}"/>'
                 f'<text x="{W - R + 30}" y="{yl + 1}">{s["name"]}</text>')
    o.append("</svg>")
    open(path, "w").write("\n".join(o) + "\n")
    print("wrote", path)


def main():
    rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    prefix, title = sys.argv[2], sys.argv[3]
    peers = json.load(open(sys.argv[4])) if len(sys.argv) > 4 else []
    rows.sort(key=lambda r: r["concurrency"])
    conc = [r["concurrency"] for r in rows]
    thr = [{"name": "strata", "points": [(r["concurrency"], r["output_tokens_per_s"]) for r in rows]}]
    for p in peers:
        # Peers were measured at a few points only: dashed lines between them.
        thr.append({"name": p["name"], "points": [tuple(x) for x in p["points"]], "measured_line": False})
    svg(f"{title}: output throughput", "concurrent sequences (128 in / 128 out)", "output tokens/s", thr,
        prefix + "_throughput.svg")
    for key, what, xl in (("ttft_ms", "time to first token", "concurrent sequences"),
                          ("tpot_ms", "time per output token", "decode batch size (concurrent sequences)")):
        series = [{"name": p, "points": [(c, r[key][p]) for c, r in zip(conc, rows) if r[key][p] > 0]}
                  for p in ("p50", "p90", "p99")]
        svg(f"{title}: {what}", xl, f"{key.split('_')[0].upper()} ms", series,
            prefix + ("_ttft.svg" if key == "ttft_ms" else "_tpot.svg"))


if __name__ == "__main__":
    main()
