#!/usr/bin/env python3
"""The library's boundaries as seen from outside src/.

- The public headers (include/actmem/*.h) include the standard library and each other only: no JSON
  or formatting library, no header of src/. A program outside this repository needs include/ alone.
- The Python module (tools/python) and the public API's test (tests/api) include actmem/actmem.h and
  nothing else of the library: their CMake targets see include/ only, and this says so by name.
- The other front ends (tools/cli, bench, fuzz, web) use the library through api/library.h (and the
  public headers); no other header of src/ is theirs to include.

Exit 1 naming each offending line."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QUOTED = re.compile(r'\s*#\s*include\s+"([^"]+)"')
ANGLED = re.compile(r'\s*#\s*include\s+<([^>]+)>')
PUBLIC = {"actmem/actmem.h", "actmem/expected.h", "actmem/values.h"}
bad = []
checked = 0


def sources(top):
    for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
        dirs[:] = [d for d in dirs if d != "node_modules"]
        for name in sorted(files):
            if name.endswith((".cc", ".h", ".cpp")):
                yield folder, os.path.join(folder, name)


def check(path, allowed_quoted, angled_ok=lambda inc: True, why=""):
    global checked
    checked += 1
    folder = os.path.dirname(path)
    for n, line in enumerate(open(path, encoding="utf-8"), 1):
        q, a = QUOTED.match(line), ANGLED.match(line)
        if q and not (q.group(1) in allowed_quoted or os.path.exists(os.path.join(folder, q.group(1)))):
            bad.append(f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()} ({why})")
        if a and not angled_ok(a.group(1)):
            bad.append(f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()} ({why})")


# Standard library headers have no extension and no directory ("vector", "string_view").
std_only = lambda inc: "/" not in inc and "." not in inc
for _, path in sources("include"):
    check(path, PUBLIC, std_only, "a public header includes the standard library and include/actmem/ only")
for top in ("tools/python", "tests/api"):
    for _, path in sources(top):
        check(path, {"actmem/actmem.h"}, why="built on the public header alone")
for top in ("tools/cli", "bench", "fuzz", "web"):
    for _, path in sources(top):
        check(path, PUBLIC | {"api/library.h"}, why="front ends include api/library.h, not src/ headers")
files = {b.split(":")[0] for b in bad}
for b in bad:
    print(b)
print(f"{checked - len(files)} passed, {len(files)} failed")
sys.exit(1 if bad else 0)
