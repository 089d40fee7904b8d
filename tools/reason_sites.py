#!/usr/bin/env python3
"""Where each reason code of src/errors.c is raised or reported.

For every code in errors.c's reason_table, lists the functions of src/*.c
whose code (comments stripped) names it as a string literal; a literal in
a macro counts for the functions that use the macro.  Prints the markdown
table of docs/architecture.md ("Where each reason code is raised").

    python3 tools/reason_sites.py            print the table
    python3 tools/reason_sites.py --check    exit 1 unless docs/architecture.md
                                             holds exactly this table
"""
import os
import re
import sys

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
SRC = os.path.join(ROOT, "src")
DOC = os.path.join(ROOT, "docs", "architecture.md")
BEGIN = "<!-- reason-sites:begin (tools/reason_sites.py) -->"
END = "<!-- reason-sites:end -->"


def strip_comments(text):
    """Blank out comments, keeping line numbers and string literals."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text[i] in "\"'":
            j = i + 1
            while j < n and text[j] != text[i]:
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def codes():
    text = strip_comments(open(os.path.join(SRC, "errors.c")).read())
    table = text[text.index("reason_table[]"):]
    table = table[:table.index("};")]
    return re.findall(r'\{"([a-z_]+)",', table)


def functions(lines):
    """(first line, last line, name) of each function definition."""
    spans = []
    for i, line in enumerate(lines):
        if line != "{":
            continue
        j = i - 1
        while j > 0 and not re.match(r"^\w+\(", lines[j]) and lines[j].strip():
            j -= 1
        m = re.match(r"^(\w+)\(", lines[j])
        if not m:
            continue
        k = i + 1
        while k < len(lines) and lines[k] != "}":
            k += 1
        spans.append((i, k, m.group(1)))
    return spans


def macros(lines):
    """line -> name of the #define that line belongs to."""
    owner = {}
    name = None
    for i, line in enumerate(lines):
        m = re.match(r"^#\s*define\s+(\w+)", line)
        if m:
            name = m.group(1)
        if name:
            owner[i] = name
            if not line.rstrip().endswith("\\"):
                name = None
    return owner


def sites():
    found = {c: set() for c in codes()}
    for fname in sorted(os.listdir(SRC)):
        if not fname.endswith(".c") or fname == "errors.c":
            continue
        lines = strip_comments(open(os.path.join(SRC, fname)).read()).split("\n")
        spans = functions(lines)
        owner = macros(lines)

        def where(i):
            for a, b, name in spans:
                if a <= i <= b:
                    return name
            return None

        for code in found:
            lit = '"%s"' % code
            for i, line in enumerate(lines):
                if lit not in line:
                    continue
                if i in owner:
                    use = re.compile(r"\b%s\(" % owner[i])
                    for j, other in enumerate(lines):
                        if use.search(other) and j not in owner and where(j):
                            found[code].add((fname, where(j)))
                elif where(i):
                    found[code].add((fname, where(i)))
                else:
                    found[code].add((fname, "(table)"))
    return found


def table():
    rows = ["| reason code | raised or reported in (file: function) |",
            "|---|---|"]
    for code, where in sites().items():
        by_file = {}
        for f, fn in sorted(where):
            by_file.setdefault(f, []).append(fn)
        cell = "; ".join("`%s`: %s" % (f, ", ".join(fns))
                         for f, fns in sorted(by_file.items()))
        rows.append("| `%s` | %s |" % (code, cell or "— (listed in errors.c, raised nowhere)"))
    return "\n".join(rows)


def main():
    t = table()
    if "--check" in sys.argv:
        doc = open(DOC).read()
        if BEGIN not in doc or END not in doc:
            print("docs/architecture.md has no reason-sites block")
            return 1
        held = doc[doc.index(BEGIN) + len(BEGIN):doc.index(END)].strip()
        if held != t:
            print("docs/architecture.md's reason table is stale: "
                  "regenerate it with tools/reason_sites.py")
            return 1
        print("docs/architecture.md's reason table is current")
        return 0
    print(t)
    return 0


if __name__ == "__main__":
    sys.exit(main())
