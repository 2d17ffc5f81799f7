#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Which file of src/ calls or includes which, read with ordinary tools: `nm` on the object
files of a build (a call is an undefined symbol of one object that another object defines)
and the `#include "..."` lines of the sources. It prints

  - every edge between folders of src/, with the calls or includes behind it;
  - every edge that points up the layer order (LAYERS below: a folder may use the ones listed
    after it, never one before it);
  - every circle of files (strongly connected component of the call graph) that spans more
    than one file, whether it spans folders, and the calls that make it: circles inside one
    folder too (file-level call cycles), each either listed in ACCEPTED below with the reason
    it is kept, or reported as NEW.

usage: tools/layers.py [--build DIR] [--check]
  --build DIR  the build directory whose objects to read (default: build)
  --check      exit 1 when an edge points up, a circle spans folders, or a circle inside a
               folder is not in ACCEPTED (the acceptance of the `layers:` issue); without it,
               only report.

Static inline functions in headers leave no symbol in an object; the include lines cover them.
A call through a function pointer is no symbol either: the named hooks that let a lower file
reach a higher one at run time (struct sr_engine_hooks, rsockets' struct rs_ops, the CM's
struct cm_ibcm_hooks) are listed in docs/architecture.md, "Layers".
"""

import argparse
import collections
import os
import re
import subprocess
import sys

# Top first. A folder may call or include the folders after it, never one before it: the CM
# face over the verbs face (librdmacm is a client of libibverbs), the engine that drives the
# transport, the transport's roles, the socket (net), the objects (core), the packet formats.
LAYERS = ["cm", "verbs", "engine", "transport", "net", "core", "wire"]

# Circles of calls inside one folder that are kept on purpose, with the reason
# (docs/architecture.md, "Layers"). Any other circle fails --check.
ACCEPTED = {
    ("src/core/mr.c", "src/core/mw.c"):
        "MRs and MWs share one key table: a MW looks up the MR it binds to (sr_mr_find), "
        "deregistering an MR invalidates the MWs bound to it (sr_mw_invalidate_locked)",
    ("src/core/rq.c", "src/core/xrc.c"):
        "an XRC SRQ is an SRQ: xrc.c creates it with sr_srq_create, and destroying an SRQ "
        "unlinks it from its XRC domain (sr_xrc_srq_unlink)",
    ("src/transport/comp.c", "src/transport/req.c"):
        "the requester and the completer drive each other: an ACK grows the window and "
        "sends what waits (sr_req_progress, sr_cwnd_*), a requester error completes the "
        "oldest WQE (sr_comp_error_oldest, sr_comp_local)",
}


def folder_of(path):
    parts = path.split(os.sep)
    if "src" in parts:
        i = parts.index("src")
        if i + 1 < len(parts) - 1:
            return parts[i + 1]
    return None


def objects(build):
    """{source path relative to the repo: object path} for the objects of src/ in BUILD."""
    out = {}
    for root, _dirs, files in os.walk(os.path.join(build, "CMakeFiles")):
        for f in files:
            if not f.endswith(".c.o"):
                continue
            full = os.path.join(root, f)
            rel = full.split(".dir" + os.sep, 1)
            if len(rel) != 2 or not rel[1].startswith("src" + os.sep):
                continue
            src = rel[1][: -len(".o")]
            if not os.path.exists(src):
                continue  # a stale object in a reused build tree (its source moved or went)
            # A source compiled into two targets: either object tells the same calls.
            out.setdefault(src, full)
    return out


def symbols(obj):
    """(defined, undefined) global symbol names of one object."""
    res = subprocess.run(["nm", "-g", obj], capture_output=True, text=True, check=True)
    defined, undefined = set(), set()
    for line in res.stdout.splitlines():
        f = line.split()
        if len(f) == 2 and f[0] == "U":
            undefined.add(f[1])
        elif len(f) == 3 and f[1] not in "Uuvw":
            defined.add(f[2])
    return defined, undefined


def includes(src):
    """Project headers that SRC includes, as paths relative to the repo (best effort)."""
    found = []
    base = os.path.dirname(src)
    try:
        text = open(src, encoding="utf-8", errors="replace").read()
    except OSError:
        return found
    for m in re.finditer(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
        name = m.group(1)
        for cand in (os.path.join(base, name), os.path.join("src", name)):
            cand = os.path.normpath(cand)
            if os.path.exists(cand):
                found.append(cand)
                break
    return found


def sccs(graph):
    """Tarjan's strongly connected components of {node: set(nodes)}."""
    index, low, stack, on, comps, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return comps


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default="build")
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

    objs = objects(args.build)
    if not objs:
        sys.exit("layers: no objects of src/ under %s/CMakeFiles (build first)" % args.build)
    defs, uses = {}, {}
    for src, obj in objs.items():
        d, u = symbols(obj)
        uses[src] = u
        for s in d:
            defs.setdefault(s, src)
    calls = collections.defaultdict(lambda: collections.defaultdict(set))
    for src, u in uses.items():
        for s in u:
            dst = defs.get(s)
            if dst and dst != src:
                calls[src][dst].add(s)
    incs = collections.defaultdict(set)
    for src in objs:
        for h in includes(src):
            incs[src].add(h)
            for h2 in includes(h):  # one level through headers is enough to see a folder
                incs[src].add(h2)

    rank = {name: i for i, name in enumerate(LAYERS)}
    folder_edges = collections.defaultdict(list)
    for src, dsts in calls.items():
        for dst, syms in dsts.items():
            a, b = folder_of(src), folder_of(dst)
            if a != b:
                folder_edges[(a, b)].append("%s -> %s (%s)" % (src, dst, ", ".join(sorted(syms)[:4])))
    for src, hs in incs.items():
        for h in hs:
            a, b = folder_of(src), folder_of(h)
            if a != b and b is not None:
                folder_edges[(a, b)].append("%s includes %s" % (src, h))

    bad = 0
    print("== edges between folders (calls and includes)")
    for (a, b), why in sorted(folder_edges.items()):
        up = a in rank and b in rank and rank[b] < rank[a]
        mark = "UP " if up else "   "
        bad += up
        print("%s%s -> %s: %d" % (mark, a, b, len(why)))
        if up:
            for w in sorted(why):
                print("      " + w)

    graph = {s: set(d) for s, d in calls.items()}
    print("\n== circles of calls between files (inside a folder too)")
    cross = new = 0
    for comp in sccs(graph):
        if len(comp) < 2:
            continue
        folders = sorted({folder_of(c) for c in comp})
        spans = len(folders) > 1
        why = ACCEPTED.get(tuple(comp))
        cross += spans
        new += not spans and why is None
        mark = "CROSS " if spans else "inside, kept: " if why else "inside, NEW "
        print("%s%d files in %s: %s" % (mark, len(comp), ", ".join(folders), " ".join(comp)))
        if why and not spans:
            print("      (" + why + ")")
        for a in comp:
            for b in comp:
                if b in calls.get(a, ()):
                    print("      %s -> %s (%s)" % (a, b, ", ".join(sorted(calls[a][b])[:4])))
    print("\n%d edge(s) pointing up, %d circle(s) spanning folders, %d circle(s) inside a "
          "folder not accepted" % (bad, cross, new))
    if new:
        print("A NEW circle: break it (move the shared piece down, or call up through a named "
              "hook as docs/architecture.md says), or, when the two roles are genuinely mutual, "
              "add it to ACCEPTED in tools/layers.py and to docs/architecture.md with the reason.")
    if args.check and (bad or cross or new):
        sys.exit(1)


if __name__ == "__main__":
    main()
