# Records the Nsight Compute fixture of tests/golden/ncu (README.md there) on a GPU machine:
#   python3 tests/golden/ncu/record.py OUT_DIR
# Finds ncu, keeps its version and metric list, filters lpo deep's metric sets (conf/profiling/ncu/*.yaml)
# to the metrics this ncu knows, profiles workload.py under ncu (every kernel, --clock-control none,
# --export), and imports the raw page as CSV in the ways lpo deep may read it. Then experiments on kernel
# selection: the regex lpo deep builds from a demangled name (--kernel-name-base demangled), and
# --kernel-id with invocation numbers. Every step's command, exit status and time go to record.log.
import csv, glob, os, re, subprocess, sys, time

out = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))
root = os.path.abspath(os.path.join(here, "..", "..", ".."))
wl = os.path.join(here, "workload.py")
log = open(os.path.join(out, "record.log"), "w")


def say(*a):
    s = " ".join(str(x) for x in a)
    print(s)
    log.write(s + "\n")
    log.flush()


def run(cmd, outfile=None, timeout=240):
    t = time.time()
    with open(outfile, "w") if outfile else open(os.devnull, "w") as f:
        try:
            p = subprocess.run(cmd, stdout=f if outfile else subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, timeout=timeout)
            rc, err = p.returncode, p.stderr
        except subprocess.TimeoutExpired:
            rc, err = -9, "timeout"
        except OSError as e:
            rc, err = -1, str(e)
    say("$ %s -> rc=%d in %.1f s" % (" ".join(cmd)[:600], rc, time.time() - t))
    if err.strip():
        say("  stderr: " + err[-1500:].replace("\n", "\n  "))
    return rc, err


ncu = None
for c in [subprocess.run(["sh", "-c", "command -v ncu"], capture_output=True, text=True).stdout.strip(),
          "/usr/local/cuda/bin/ncu"] + sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu")):
    if c and os.access(c, os.X_OK):
        ncu = c
        break
if not ncu:
    say("ncu not found")
    sys.exit(3)
say("ncu:", ncu)
run([ncu, "--version"], os.path.join(out, "ncu_version.txt"))
run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm", "--format=csv"],
    os.path.join(out, "gpu.txt"))
run([ncu, "--query-metrics", "--csv"], os.path.join(out, "query_metrics.csv"))
run([ncu, "--list-sets"], os.path.join(out, "list_sets.txt"))

known = set()
for line in open(os.path.join(out, "query_metrics.csv"), errors="replace"):
    known.update(re.findall(r"[a-z0-9_]+__[a-z0-9_]+", line))
want = []
for y in sorted(glob.glob(os.path.join(root, "conf", "profiling", "ncu", "*.yaml"))):
    for line in open(y):
        m = re.match(r"\s*-\s*([A-Za-z0-9_.]+)", line)
        if m and m.group(1) not in want:
            want.append(m.group(1))
want += sorted(k + ".sum" for k in known if k.startswith("sm__ops_path_tensor") and k + ".sum" not in want)
# launch__, device__ and profiler__ metrics exist without being listed by --query-metrics
used = [w for w in want if not known or w.split(".")[0] in known or w.split("__")[0] in ("launch", "device", "profiler")]
say("metrics: %d wanted, %d known base names, dropped: %s" % (len(want), len(known),
    " ".join(w for w in want if w not in used)))

# the fixture: every kernel of the workload; a metric ncu refuses is dropped and the run retried
rep = os.path.join(out, "fixture")
for attempt in range(4):
    open(os.path.join(out, "metrics_used.txt"), "w").write(",".join(used) + "\n")
    rc, err = run([ncu, "--metrics", ",".join(used), "--clock-control", "none", "--target-processes", "all", "--nvtx",
                   "--export", rep, "--force-overwrite", "python3", wl], os.path.join(out, "fixture_run.log"))
    text = open(os.path.join(out, "fixture_run.log"), errors="replace").read() + err
    bad = [u for u in used if u in text and re.search(r"==ERROR==.*" + re.escape(u), text)]
    if rc == 0 and not bad:
        break
    if not bad:
        break
    say("dropping refused metrics:", bad)
    used = [u for u in used if u not in bad]

imp = [ncu, "--import", rep + ".ncu-rep", "--csv", "--page", "raw"]
run(imp + ["--print-units", "base"], os.path.join(out, "fixture_base.csv"))
run(imp, os.path.join(out, "fixture_auto.csv"))
run(imp + ["--print-units", "base", "--print-kernel-base", "mangled"], os.path.join(out, "fixture_mangled.csv"))
run(imp + ["--print-units", "base", "--print-kernel-base", "function"], os.path.join(out, "fixture_function.csv"))
run([ncu, "--import", rep + ".ncu-rep", "--csv", "--page", "details", "--print-units", "base"],
    os.path.join(out, "fixture_details.csv"))


def table(p):
    rows = list(csv.reader(open(p, errors="replace")))
    while rows and (not rows[0] or rows[0][0] != "ID"):
        rows.pop(0)
    if not rows:
        return [], -1
    ki = [i for i, h in enumerate(rows[0]) if "Kernel" in h and "Name" in h]
    return rows, ki[0] if ki else -1


def names(p):
    rows, ki = table(p)
    res = []
    for r in rows[2:]:
        if 0 <= ki < len(r) and r[ki] not in res:
            res.append(r[ki])
    return res


mangled = names(os.path.join(out, "fixture_mangled.csv"))
dem = {}
for m in mangled:
    d = subprocess.run(["c++filt", m], capture_output=True, text=True).stdout.strip() or m
    dem[m] = d
    say("kernel:", m, "\n   c++filt:", d)
say("demangled (ncu):", names(os.path.join(out, "fixture_base.csv")))
funcs = names(os.path.join(out, "fixture_function.csv"))
say("function names (ncu):", funcs)


def rx(name):  # as lpo deep builds it (src/deep): spaces dropped, specials escaped, " *" between characters
    s = "".join(ch for ch in name if ch != " ")
    return "^" + " *".join(("\\" + ch) if ch in "^$\\.*+?()[]{}|" else ch for ch in s) + "$"


def experiment(tag, args):
    f = os.path.join(out, "exp_%s.csv" % tag)
    run([ncu, "--metrics", "gpu__time_duration.sum,launch__grid_size", "--clock-control", "none", "--csv",
         "--page", "raw", "--print-units", "base", "--log-file", f] + args + ["python3", wl],
        os.path.join(out, "exp_%s.stdout" % tag))
    try:
        rows, ki = table(f)
        say("  %s: %d results: %s" % (tag, max(0, len(rows) - 2), [(r[0], r[ki][:50]) for r in rows[2:]]))
    except Exception as e:
        say("  %s: no CSV: %s" % (tag, e))


# selection as lpo deep does it (docs/deep.md): by function base name or by mangled name, with a skip
soft = [m for m in mangled if "softmax" in dem[m].lower()][:1]
if soft:
    experiment("mangled", ["--kernel-name-base", "mangled", "--kernel-name", "regex:^%s$" % re.escape(soft[0]),
                           "--launch-skip", "2", "--launch-count", "2"])
experiment("function", ["--kernel-name-base", "function", "--kernel-name", "regex:^(vectorized_elementwise_kernel)$",
                        "--launch-skip", "1", "--launch-count", "2"])
experiment("multi", ["--kernel-name-base", "function", "--kernel-name", "regex:^(cunn_SoftMaxForwardReg|Kernel2)$",
                     "--launch-skip", "2", "--launch-count", "4"])
say("done")
