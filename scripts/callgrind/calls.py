"""Calls into the functions whose name contains NAME (not followed by more of a name), from a callgrind output file (the `calls=`
lines of every call site, inlined callers included, summed): how many samples a run filled.

    python3 scripts/callgrind/calls.py FILE NAME
"""
import re
import sys

path, name = sys.argv[1], sys.argv[2]
pattern = re.compile(re.escape(name) + r"(?!\w)")
names = {}
total = 0
target = False
with open(path, errors="replace") as f:
    for line in f:
        if line.startswith("cfn="):
            m = re.match(r"cfn=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
            if m:
                if m.group(2) is not None:
                    names[m.group(1)] = m.group(2)
                target = bool(pattern.search(names.get(m.group(1), "")))
            else:
                target = bool(pattern.search(line))
        elif line.startswith("fn="):
            m = re.match(r"fn=\((\d+)\)(?: (.*))?", line.rstrip("\n"))
            if m and m.group(2) is not None:
                names[m.group(1)] = m.group(2)
        elif line.startswith("calls="):
            if target:
                total += int(line.split()[0][6:])
            target = False
print(total)
