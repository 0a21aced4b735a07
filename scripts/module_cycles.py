"""Module import cycles, as counted for the seams issue (#34) and the house issue (#51).

A Rust crate: an edge from module A to module B for every `crate::B...` or `super::...` path in
A's file (comments and `#[cfg(test)] mod tests` left out). A Python package: an edge from module
A to module B for every import of B in A, relative (`from . import B`, `from .B import x`) or by
the package's name, wherever it is written (an import inside a function closes a circle too;
stubs, `.pyi`, are left out). Then the strongly connected components of more than one module.

    python3 scripts/module_cycles.py crates/stokehold/src     # one crate
    python3 scripts/module_cycles.py python/stokehold         # the Python package
    python3 scripts/module_cycles.py                          # every crate and the package

Exits with 1 when there is a cycle.
"""
import ast
import glob
import os
import re
import sys
from collections import defaultdict


def rust_graph(src):
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
            full = (parent + '::' + mt.group(1)) if parent else mt.group(1)
            t = resolve(full)
            if t and t != m:
                edges[m].add(t)
        # use of a parent's items via `use super::{...}`
        for mt in re.finditer(r'use super::\{([^}]*)\}', text):
            parent = m.rsplit('::', 1)[0] if '::' in m else ''
            if parent and parent != m:
                edges[m].add(parent)
    return mods, edges


def python_graph(pkg):
    """Modules of the package at `pkg` (dotted below it, `__init__` as ''), and their imports."""
    name = os.path.basename(os.path.normpath(pkg))
    mods = {}
    for root, _, files in os.walk(pkg):
        for f in files:
            if f.endswith('.py'):
                p = os.path.join(root, f)
                parts = os.path.relpath(p, pkg)[:-3].split('/')
                if parts[-1] == '__init__':
                    parts = parts[:-1]
                mods['.'.join(parts)] = p

    edges = defaultdict(set)
    for m, p in mods.items():
        is_pkg = os.path.basename(p) == '__init__.py'
        here = m.split('.') if m else []
        package = here if is_pkg else here[:-1]
        for node in ast.walk(ast.parse(open(p).read(), p)):
            targets = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[:len(package) - (node.level - 1)]
                    mod = '.'.join(base + ([node.module] if node.module else []))
                elif node.module and (node.module == name or node.module.startswith(name + '.')):
                    mod = node.module[len(name) + 1:]
                else:
                    continue
                # `from . import a`: `a` is a module, or a name of the package's `__init__`;
                # `from .x import y`: module `x` (or its submodule `y`). A compiled module
                # (`_native`) has no file here: no edge.
                for a in node.names:
                    sub = f"{mod}.{a.name}".strip('.')
                    compiled = glob.glob(os.path.join(pkg, *sub.split('.')) + '.*')
                    targets.append(sub if sub in mods or compiled else mod)
            elif isinstance(node, ast.Import):
                targets = [a.name[len(name) + 1:] for a in node.names if a.name.startswith(name + '.')]
            for t in targets:
                if t in mods and t != m:
                    edges[m].add(t)
    return mods, edges


def cycles(mods, edges):
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
    return [sorted(c) for c in out if len(c) > 1]


def report(path):
    if glob.glob(os.path.join(path, '*.py')):
        mods, edges = python_graph(path)
    else:
        mods, edges = rust_graph(path)
    cyc = cycles(mods, edges)
    print(f"{path}: {len(mods)} modules; cycles: {[len(c) for c in cyc]}")
    for c in cyc:
        print("  ", c)
    return len(cyc)


if __name__ == '__main__':
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    paths = sys.argv[1:] or sorted(glob.glob(os.path.join(root, 'crates', '*', 'src'))) + [
        os.path.join(root, 'python', 'stokehold')]
    found = sum(report(p) for p in paths)
    sys.exit(1 if found else 0)
