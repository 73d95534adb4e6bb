#!/usr/bin/env python3
"""Per (kernel, grid) summary of an Nsight Compute raw CSV (`ncu --csv --page raw --metrics ...`,
scripts/gpu/ncu_decode_step.sh): launches, median duration, DRAM % of peak and GB/s read, L2,
SM and tensor-pipe % of peak; groups of at least MIN launches (default 30, i.e. once per layer
of a step or more), by total time. Usage: summarize_ncu_kernels.py FILE.csv [MIN]"""
import collections
import csv
import statistics
import sys


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return float("nan")


def main():
    path = sys.argv[1]
    least = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    with open(path, newline="") as f:
        rows = [r for r in csv.reader(f)]
    header_at = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if header_at is None:
        print("no kernel rows; first lines:", rows[:3])
        return
    header = rows[header_at]
    units = rows[header_at + 1]
    col = {name: i for i, name in enumerate(header)}

    def metric(r, name):
        return number(r[col[name]]) if name in col else float("nan")

    groups = collections.defaultdict(list)
    for r in rows[header_at + 2:]:
        if len(r) != len(header):
            continue
        name = r[col["Kernel Name"]]
        short = name.split("(")[0][-70:]
        grid = r[col["Grid Size"]] if "Grid Size" in col else ""
        block = r[col["Block Size"]] if "Block Size" in col else ""
        groups[(short, grid, block)].append(r)
    dur = "gpu__time_duration.sum"
    dur_unit = units[col[dur]] if dur in col else ""
    # ncu writes the units as "nsecond" or "ns" depending on its version.
    scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(dur_unit, 1.0)
    out = []
    for (name, grid, block), rs in groups.items():
        if len(rs) < least:
            continue
        t = [metric(r, dur) * scale for r in rs]
        med = statistics.median(t)
        read = statistics.median(metric(r, "dram__bytes_read.sum") for r in rs)
        read_unit = units[col["dram__bytes_read.sum"]] if "dram__bytes_read.sum" in col else ""
        read_bytes = read * {"byte": 1, "Kbyte": 1e3, "KB": 1e3, "Mbyte": 1e6, "MB": 1e6, "Gbyte": 1e9, "GB": 1e9}.get(read_unit, 1)
        out.append((sum(t), name, grid, block, len(rs), med,
                    statistics.median(metric(r, "dram__throughput.avg.pct_of_peak_sustained_elapsed") for r in rs),
                    read_bytes / (med * 1e-6) / 1e9 if med > 0 else 0.0, read_bytes / 1e6,
                    statistics.median(metric(r, "lts__throughput.avg.pct_of_peak_sustained_elapsed") for r in rs),
                    statistics.median(metric(r, "sm__throughput.avg.pct_of_peak_sustained_elapsed") for r in rs),
                    statistics.median(
                        metric(r, "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed") for r in rs)))
    print("%-70s %-14s %-9s %5s %8s %6s %7s %7s %6s %6s %6s" %
          ("kernel", "grid", "block", "n", "med us", "dram%", "GB/s", "MB rd", "L2%", "SM%", "TC%"))
    for total, name, grid, block, n, med, dram, gbs, mb, l2, sm, tc in sorted(out, reverse=True):
        print("%-70s %-14s %-9s %5d %8.1f %6.1f %7.0f %7.1f %6.1f %6.1f %6.1f" %
              (name, grid, block, n, med, dram, gbs, mb, l2, sm, tc))


if __name__ == "__main__":
    main()
