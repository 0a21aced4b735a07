"""Module import cycles of a Rust crate, as counted for the seams issue: an edge from module A to
module B for every `crate::B...` or `super::...` path in A's file (comments and `#[cfg(test)] mod
tests` left out), then the strongly connected components of more than one module.

    python3 scripts/module_cycles.py crates/stokehold/src
"""
import os, re, sys
from collections import defaultdict
src = sys.argv[1]
mods = {}
for root, _, files in os.walk(src):
    for f in files:
        if f.endswith('.rs'):
            p = os.path.join(root, f)
            rel = os.path.relpath(p, src)[:-3]
            parts = rel.split('/')
            if parts[-1] in ('mod', 'lib', 'main'):
                parts = parts[:-1]
            mods['::'.join(parts)] = p
def resolve(path):
    segs = path.split('::')
    for n in range(len(segs), 0, -1):
        m = '::'.join(segs[:n])
        if m in mods:
            return m
    return None
edges = defaultdict(set)
for m, p in mods.items():
    text = open(p).read()
    # drop test modules
    text = re.split(r'#\[cfg\(test\)\]\s*mod tests', text)[0]
    text = re.sub(r'//.*', '', text)
    for mt in re.finditer(r'crate::((?:\w+::)*\w+)', text):
        t = resolve(mt.group(1))
        if t and t != m and t != '':
            edges[m].add(t)
    for mt in re.finditer(r'\bsuper::((?:\w+::)*\w+)', text):
        parent = m.rsplit('::', 1)[0] if '::' in m else ''
        if os.path.basename(p) == 'mod.rs':
            parent = m.rsplit('::',1)[0] if '::' in m else ''
        full = (parent + '::' + mt.group(1)) if parent else mt.group(1)
        t = resolve(full)
        if t and t != m:
            edges[m].add(t)
    # use of a parent's items via `use super::{...}`
    for mt in re.finditer(r'use super::\{([^}]*)\}', text):
        parent = m.rsplit('::', 1)[0] if '::' in m else ''
        if parent and parent != m:
            edges[m].add(parent)
# Tarjan
index = {}; low = {}; st = []; on = set(); out = []; i = [0]
sys.setrecursionlimit(10000)
def sc(v):
    index[v] = low[v] = i[0]; i[0] += 1; st.append(v); on.add(v)
    for w in edges[v]:
        if w not in index:
            sc(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        comp = []
        while True:
            w = st.pop(); on.discard(w); comp.append(w)
            if w == v: break
        out.append(comp)
for v in list(mods):
    if v not in index: sc(v)
cyc = [sorted(c) for c in out if len(c) > 1]
print(f"{len(mods)} modules; cycles: {[len(c) for c in cyc]}")
for c in cyc: print("  ", c)
