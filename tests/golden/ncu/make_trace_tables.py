# Derives trace/kernels.csv and trace/ranges.csv for workload.py from the recorded ncu export
# raw_base_mangled.csv, in the column layout `lpo trace` writes (docs/trace.md): the lpo deep tests read them
# as the trace that chose the top kernels. Names are demangled with c++filt (the same GNU demangler as the
# tracer's __cxa_demangle), durations are ncu's gpu__time_duration, ranges come from ncu's NVTX column.
#   python3 tests/golden/ncu/make_trace_tables.py
import csv, os, re, statistics, subprocess

here = os.path.dirname(os.path.abspath(__file__))
rows = list(csv.reader(open(os.path.join(here, "raw_base_mangled.csv"))))
h = rows[0]
ki, ti = h.index("Kernel Name"), h.index("gpu__time_duration.sum")
ni = [i for i, c in enumerate(h) if c.startswith("thread Domain:Push/Pop_Range")][0]
per, rng = {}, {}
for r in rows[2:]:
    name = subprocess.run(["c++filt", r[ki]], capture_output=True, text=True).stdout.strip()
    d = float(r[ti].replace(",", ""))
    per.setdefault(name, []).append(d)
    m = re.findall(r'"[^:"]*:([^:"]*):', r[ni])
    if m:
        rng.setdefault(m[-1], {}).setdefault(name, []).append(d)


def category(n):
    low = n.lower()
    for cat, words in (("attention", ("softmax", "flash", "attention")), ("gemm", ("gemm", "nvjet", "matmul")),
                       ("reduction", ("reduce",)), ("elementwise", ("elementwise", "copy", "distribution"))):
        if any(w in low for w in words):
            return cat
    return "other"


total = sum(sum(v) for v in per.values())
os.makedirs(os.path.join(here, "trace"), exist_ok=True)
with open(os.path.join(here, "trace", "kernels.csv"), "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["time_pct", "total_ns", "instances", "avg_ns", "med_ns", "min_ns", "max_ns", "stddev_ns", "category",
                "kind", "bytes", "name"])
    for name, v in sorted(per.items(), key=lambda kv: -sum(kv[1])):
        w.writerow(["%.1f" % (100 * sum(v) / total), int(sum(v)), len(v), "%.1f" % (sum(v) / len(v)),
                    "%.1f" % statistics.median(v), int(min(v)), int(max(v)),
                    "%.1f" % (statistics.stdev(v) if len(v) > 1 else 0), category(name), "kernel", "", name])
    w.writerow(["0.0", 4000, 2, "2000.0", "2000.0", 1900, 2100, "141.4", "memcpy", "memcpy", 16, "[CUDA memcpy DtoH]"])
with open(os.path.join(here, "trace", "ranges.csv"), "w", newline="") as f:
    w = csv.writer(f, lineterminator="\n")
    w.writerow(["range", "kind", "depth", "instances", "wall_ms", "wall_avg_ms", "gpu_busy_ms", "gpu_span_ms",
                "idle_gaps_ms", "launch_latency_avg_ms", "launch_api_ms", "idle_share", "gpu_ops", "gpu_time_ms",
                "top_kernels"])
    for name, ks in rng.items():
        t = sum(sum(v) for v in ks.values())
        top = "; ".join("%.200s (%.1f%%)" % (k, 100 * sum(v) / t) for k, v in sorted(ks.items(), key=lambda kv: -sum(kv[1]))[:3])
        n = sum(len(v) for v in ks.values())
        w.writerow([name, "nvtx", 0, 4, "%.3f" % (t / 1e6 * 1.2), "%.3f" % (t / 4e6 * 1.2), "%.3f" % (t / 1e6),
                    "%.3f" % (t / 1e6), "0.000", "0.010", "0.020", "0.150", n, "%.3f" % (t / 1e6), top])
