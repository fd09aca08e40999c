#!/usr/bin/env python3
"""Lines of crates/fltrace/src outside #[cfg(test)] modules and clap derive structs/enums
(issue 25: the binary as glue). usage: bench/binary_lines.py crates/fltrace/src"""
import re, sys, glob, os
CLAP = re.compile(r'derive\([^)]*\b(Parser|Args|Subcommand|ValueEnum)\b')
def count(path):
    lines = open(path).read().split('\n')
    if lines and lines[-1] == '': lines.pop()
    skip = [False]*len(lines)
    i = 0
    while i < len(lines):
        l = lines[i].strip()
        if l.startswith('#[cfg(test)]') or (l.startswith('#[') and CLAP.search(l)):
            # back over doc comments/attributes directly above
            s = i
            while s > 0 and (lines[s-1].strip().startswith('///') or lines[s-1].strip().startswith('#[')):
                s -= 1
            # forward to item start, then brace match
            j = i; depth = 0; opened = False
            while j < len(lines):
                t = lines[j]
                depth += t.count('{') - t.count('}')
                if '{' in t: opened = True
                if opened and depth <= 0: break
                if not opened and t.rstrip().endswith(';'): break
                j += 1
            for k in range(s, min(j+1, len(lines))): skip[k] = True
            i = j + 1
        else:
            i += 1
    return sum(1 for k in range(len(lines)) if not skip[k]), len(lines)
tot = 0; per = {}
for p in sorted(glob.glob(sys.argv[1] + '/*.rs')):
    n, all_ = count(p); per[os.path.basename(p)] = (n, all_); tot += n
for k, (n, a) in per.items(): print(f'{n:6} {a:6} {k}')
ex = sum(per[k][0] for k in per if k in ('bpf_tools.rs', 'system.rs'))
print(f'{tot:6} total (non-test, outside clap declarations); {tot-ex} without bpf_tools.rs and system.rs')
