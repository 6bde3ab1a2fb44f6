#!/usr/bin/env python3
"""Front ends (tools/, bench/, fuzz/, web/) use the library only through its public header.

Every `#include "..."` in them must be actmem/actmem.h or a header of the front end's own folder;
library headers (src/...) are the engine's business. Exit 1 naming each offending line."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
bad = []
checked = 0
for top in ("tools", "bench", "fuzz", "web"):
    for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
        dirs[:] = [d for d in dirs if d != "node_modules"]
        for name in files:
            if not name.endswith((".cc", ".h", ".cpp")):
                continue
            path = os.path.join(folder, name)
            checked += 1
            for n, line in enumerate(open(path, encoding="utf-8"), 1):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if not m:
                    continue
                inc = m.group(1)
                if inc == "actmem/actmem.h" or os.path.exists(os.path.join(folder, inc)):
                    continue
                bad.append(f"{os.path.relpath(path, ROOT)}:{n}: {line.strip()}")
for b in bad:
    print(b)
print(f"{checked - len({b.split(':')[0] for b in bad})} passed, {len({b.split(':')[0] for b in bad})} failed")
sys.exit(1 if bad else 0)
