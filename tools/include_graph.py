#!/usr/bin/env python3
"""List the #include edges between ash_replicant's own modules and find cycles.

A module is a name stem under src/: apply.c and apply.h are module "apply".
Module A depends on module B when A.c or A.h includes "B.h".  Every edge
must point down the layers of docs/architecture.md; a cycle means two
modules each need the other, and is reported as an error.

    python3 tools/include_graph.py            cycles and upward edges (exit 1 if any)
    python3 tools/include_graph.py --edges    every edge, "a -> b", one per line
    python3 tools/include_graph.py --dot      the graph for graphviz
"""
import os
import re
import sys

SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)\.h"', re.M)

# The layers of docs/architecture.md, lowest first.  An edge may point to
# the same layer or a lower one, never up.
LAYERS = [
    ("base", ["errors", "sqlstate_names", "ash_replicant", "shmem", "spi_util", "qualname",
              "origin", "catalog_row", "hex", "owner_scope"]),
    ("transport", ["libpq_conn", "walproto"]),
    ("decoders", ["change", "decode_pgoutput", "decode_wal2json", "decode_pglogical", "decoder",
                  "copy_row"]),
    ("keys", ["keyring", "crypto"]),
    ("catalog", ["config", "mapping_validate", "coverage", "source_catalog", "source_slot",
                 "contract", "checkpoint", "syncrep", "publication_record", "column_record",
                 "census", "route_rules"]),
    ("apply", ["relmap", "apply_bulk", "apply_strategy", "apply", "apply_scd1",
               "apply_scd2", "apply_append", "messages", "provenance", "incremental",
               "source_columns"]),
    ("supervision", ["snapshot", "snapshot_copier", "snapshot_incr", "pipeline",
                     "pipeline_pglogical", "launcher"]),
    ("api", ["api_sink", "api_mapping", "api_crypto", "api_recovery",
             "api_status", "api_doctor", "api_verify"]),
    ("entry", ["_PG_init"]),
]

# ash_replicant.h declares the GUC variables every layer reads (base);
# ash_replicant.c defines them in _PG_init, which registers everything
# (the top).  Counting them as one module would draw a false cycle.
# snapshot_int.h is the snapshot module's internal header (what snapshot.c
# shares with snapshot_copier.c and snapshot_incr.c): part of "snapshot",
# so including it is an edge to snapshot.
FILE_MODULE = {"ash_replicant.c": "_PG_init", "snapshot_int.h": "snapshot"}

# Cycles known and scheduled, reported but not counted as problems.  Keep
# this empty: every entry says why it is still here and when it goes.
KNOWN_CYCLES = {}


def modules():
    mods = {}
    for name in sorted(os.listdir(SRC)):
        stem, ext = os.path.splitext(name)
        stem = FILE_MODULE.get(name, stem)
        if ext in (".c", ".h"):
            mods.setdefault(stem, []).append(os.path.join(SRC, name))
    return mods


def edges(mods):
    out = set()
    for stem, files in mods.items():
        for path in files:
            with open(path, encoding="utf-8") as f:
                for dep in INCLUDE.findall(f.read()):
                    dep = FILE_MODULE.get(dep + ".h", dep)
                    if dep in mods and dep != stem:
                        out.add((stem, dep))
    return sorted(out)


def cycles(nodes, es):
    """Strongly connected components of more than one module (Tarjan)."""
    succ = {n: [b for a, b in es if a == n] for n in nodes}
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in succ[v]:
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
            if len(comp) > 1:
                comps.append(sorted(comp))

    for n in nodes:
        if n not in index:
            visit(n)
    return comps


def main():
    mods = modules()
    es = edges(mods)
    if "--edges" in sys.argv:
        for a, b in es:
            print(f"{a} -> {b}")
        return 0
    if "--dot" in sys.argv:
        print("digraph ash_replicant {")
        for a, b in es:
            print(f'  "{a}" -> "{b}";')
        print("}")
        return 0

    bad = 0
    layer = {m: i for i, (_, ms) in enumerate(LAYERS) for m in ms}
    for m in sorted(mods):
        if m not in layer:
            print(f"module {m} has no layer: add it to LAYERS in {sys.argv[0]}"
                  " and to docs/architecture.md")
            bad += 1
    for comp in cycles(sorted(mods), es):
        known = KNOWN_CYCLES.get(tuple(comp))
        if known:
            print("known include cycle: " + " <-> ".join(comp) + " (" + known + ")")
            continue
        print("include cycle: " + " <-> ".join(comp))
        bad += 1
    for a, b in es:
        if a in layer and b in layer and layer[b] > layer[a]:
            print(f"upward include: {a} ({LAYERS[layer[a]][0]}) -> "
                  f"{b} ({LAYERS[layer[b]][0]})")
            bad += 1
    print(f"{len(mods)} modules, {len(es)} include edges, {bad} problems")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
