#!/usr/bin/env bash
# report.sh VERSION STARTED REPORTS RUNDIR [COMMIT [TARGET]] prints docs/conformance.md from
# the JUnit reports ginkgo wrote under REPORTS (the parallel and the
# serial pass): Kubernetes version, sqlkube commit, machine, date, wall
# time, passed/failed/skipped counts, and each failure with the command
# that runs it again. COMMIT is the sqlkube commit the run built (run.sh
# reads it at the start; the checkout may move on while the suite runs);
# without it, the checkout's. TARGET says what the cluster was when it is
# not `sqlkube server` (TENANT=1: a tenant of a host).
set -euo pipefail
version=$1 started=$2 reports=$3
if [ -n "${5:-}" ]; then
  commit=$5 dirty=
else
  commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
  dirty=$(git status --porcelain 2>/dev/null | grep -q . && echo " (with uncommitted changes)" || true)
fi
wall=$(( $(date -u +%s) - started ))
python3 - "$reports" "$version" "$commit$dirty" "$wall" "${6:-}" <<'PY'
import glob, os, platform, sys, xml.etree.ElementTree as ET, datetime
reports, version, commit, wall, target = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
# Each pass reports every spec of the suite, the other pass's as skipped:
# a test counts once, as failed if it failed, passed if it passed, and
# skipped only if no pass ran it.
outcome = {}
rank = {"skipped": 0, "passed": 1, "failed": 2}
for path in sorted(glob.glob(os.path.join(reports, "**", "*.xml"), recursive=True)):
    for case in ET.parse(path).getroot().iter("testcase"):
        name = case.get("name", "")
        if "[Conformance]" not in name:
            continue  # the suite's setup and teardown entries
        if case.find("failure") is not None or case.find("error") is not None:
            got = "failed"
        elif case.find("skipped") is not None:
            got = "skipped"
        else:
            got = "passed"
        if rank[got] >= rank[outcome.get(name, "skipped")]:
            outcome[name] = got
passed = [n for n, o in outcome.items() if o == "passed"]
failed = [n for n, o in outcome.items() if o == "failed"]
skipped = [n for n, o in outcome.items() if o == "skipped"]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
mem = next((int(l.split()[1]) // (1024 * 1024) for l in open("/proc/meminfo") if l.startswith("MemTotal")), 0)
print("# Kubernetes conformance\n")
print("`make conformance` runs Kubernetes' own conformance suite (`e2e.test`, focus `\\[Conformance\\]`) against a")
print("two-node sqlkube cluster on one host, offline. This page is written by the last run (`conformance/report.sh`).\n")
print("| | |\n|---|---|")
print(f"| Kubernetes | {version} |")
print(f"| sqlkube commit | {commit} |")
if target:
    print(f"| cluster | {target} |")
print(f"| machine | {os.cpu_count()} × {cpu}, {mem} GiB, Linux {platform.release()} |")
print(f"| date | {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC |")
print(f"| wall time | {wall // 3600} h {wall % 3600 // 60} min |")
print(f"| passed | {len(passed)} |")
print(f"| failed | {len(failed)} |")
print(f"| skipped | {len(skipped)} |\n")
if failed:
    print("## Failures\n")
    for name in sorted(failed):
        focus = "".join("\\" + c if c in "[]().*+?{}|^$\\" else c for c in name)
        print(f"- {name}  \n  `sudo FOCUS='{focus}' make conformance`")
PY
