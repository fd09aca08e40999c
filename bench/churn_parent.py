#!/usr/bin/env python3
"""The recorder's peak when a large process spawns it (a test harness, a supervisor): holds
PARENT_MB resident, posix_spawns `FLTRACE record -o DIR -- CHURN CYCLES` (vfork + exec, as
Rust's Command does) and prints the summary's recorder peak beside the child's ru_maxrss.
usage: bench/churn_parent.py FLTRACE CHURN CYCLES [PARENT_MB]   (CHURN: gcc workloads/churn.c)"""
import os
import sys
import tempfile

fltrace, churn, cycles = sys.argv[1:4]
held = bytearray(int(sys.argv[4] if len(sys.argv) > 4 else 300) << 20)
for i in range(0, len(held), 4096):
    held[i] = 1
with tempfile.TemporaryDirectory() as out:
    pid = os.posix_spawn(fltrace, [fltrace, "record", "-o", out, "--", churn, cycles], os.environ)
    _, _, usage = os.wait4(pid, 0)
print(f"child ru_maxrss {usage.ru_maxrss // 1024} MB")
