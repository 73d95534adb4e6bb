#!/usr/bin/env python3
"""The SASS instructions where a kernel's warps stall most, from Nsight Compute's source page
(`ncu -i REPORT --page source --csv --print-source sass`): per instruction, the warp-state
samples and the stall reasons that dominate them. Usage: summarize_ncu_source.py FILE.csv [N]"""
import csv
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    header_at = next((i for i, r in enumerate(rows) if any("Source" == c or "Address" in c for c in r)), None)
    if header_at is None:
        print("no header found; first lines:")
        for r in rows[:5]:
            print(r)
        return
    header = rows[header_at]
    body = [r for r in rows[header_at + 1:] if len(r) == len(header)]
    print("columns:", "; ".join(header))
    sample_cols = [i for i, c in enumerate(header) if "Sampling" in c and "All" in c]
    if not sample_cols:
        sample_cols = [i for i, c in enumerate(header) if "Sampling" in c]
    if not sample_cols:
        print("no sampling column")
        return
    key = sample_cols[0]
    total = sum(number(r[key]) for r in body)
    src = next((i for i, c in enumerate(header) if c == "Source"), 1)
    addr = next((i for i, c in enumerate(header) if "Address" in c), 0)
    stall_cols = [i for i, c in enumerate(header) if c.startswith("stall_") or "Stall" in c]
    print("instructions: %d, samples (%s): %.0f" % (len(body), header[key], total))
    for r in sorted(body, key=lambda r: -number(r[key]))[:top]:
        reasons = sorted(((number(r[i]), header[i]) for i in stall_cols), reverse=True)[:3]
        print("%6.2f%%  %-8s %-60s %s" % (100.0 * number(r[key]) / max(total, 1.0), r[addr], r[src][:60],
                                         ", ".join("%s %.0f" % (n, v) for v, n in reasons if v > 0)))


if __name__ == "__main__":
    main()
