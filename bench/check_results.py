#!/usr/bin/env python3
"""bench/results/ holds exactly the files bench/README.md cites.

A citation is a path "results/<name>" in README.md, where <name> may use
shell globs and {a,b} alternatives.  Exit 1 when a file is not cited or a
citation matches no file.
"""
import fnmatch
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CITE = re.compile(r"results/((?:[^\s)`'\";,{<]|\{[^}]*\})+)")


def expand(pattern):
    m = re.search(r"\{([^}]*)\}", pattern)
    if not m:
        return [pattern]
    return [p for alt in m.group(1).split(",")
            for p in expand(pattern[:m.start()] + alt + pattern[m.end():])]


def main():
    readme = open(os.path.join(HERE, "README.md"), encoding="utf-8").read()
    files = set(os.listdir(os.path.join(HERE, "results")))
    cited, missing = set(), []
    for raw in CITE.findall(readme):
        for pattern in expand(raw.rstrip(".:")):
            hits = fnmatch.filter(files, pattern)
            if not hits:
                missing.append(pattern)
            cited.update(hits)
    for name in sorted(files - cited):
        print("not cited by bench/README.md: results/" + name)
    for name in missing:
        print("cited but absent: results/" + name)
    print(f"{len(files)} files, {len(cited)} cited, {len(files - cited)} not cited, "
          f"{len(missing)} citations without a file")
    return 1 if missing or files - cited else 0


if __name__ == "__main__":
    sys.exit(main())
