#!/usr/bin/env python3
"""The library's include layers: data flows one way, so a module includes only modules below it.

  actmem values < util < runtime < model < tensors < policies < engine < report < config < serve < planner < api

The public value headers (include/actmem/expected.h, values.h: standard library only) are below
everything; the public header include/actmem/actmem.h is implemented by src/api, the top layer.

Every `#include "<module>/..."` in src/ (tests beside the code excepted) must name a module of a lower
layer or its own. Includes that break the order today are listed in tests/layers_allowlist.txt
(`file -> header`): the list may only shrink. Exit 1 naming each new upward include, or each listed
one that is gone (delete its line: the list shrinks). `--prune` rewrites the list without them."""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LAYERS = ["util", "runtime", "model", "tensors", "policies", "engine", "report", "config", "serve", "planner", "api"]
RANK = {m: i for i, m in enumerate(LAYERS)}
PUBLIC_VALUES = {"actmem/expected.h", "actmem/values.h"}  # below util: any layer may include them
ALLOW = os.path.join(ROOT, "tests", "layers_allowlist.txt")
INCLUDE = re.compile(r'\s*#\s*include\s+"([^"/]+)/([^"]+)"')


def upward_includes():
    found = set()
    for folder, _, files in os.walk(os.path.join(ROOT, "src")):
        for name in sorted(files):
            if not name.endswith((".h", ".cc")) or name.endswith("_test.cc") or name.endswith("_test_util.h"):
                continue
            path = os.path.join(folder, name)
            rel = os.path.relpath(path, ROOT)
            module = os.path.relpath(folder, os.path.join(ROOT, "src")).split(os.sep)[0]
            if module not in RANK:
                sys.exit(f"check_layers: {rel}: module '{module}' has no layer; add it to LAYERS in {__file__}")
            with open(path, encoding="utf-8") as f:
                for line in f:
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    header = f"{m.group(1)}/{m.group(2)}"
                    layer = "api" if m.group(1) == "actmem" and header not in PUBLIC_VALUES else m.group(1)
                    if layer in RANK and RANK[layer] > RANK[module]:
                        found.add(f"{rel} -> {header}")
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prune", action="store_true", help="drop allow-list lines that no longer occur")
    args = ap.parse_args()
    with open(ALLOW, encoding="utf-8") as f:
        allowed = {l.strip() for l in f if l.strip() and not l.startswith("#")}
    found = upward_includes()
    new, gone = sorted(found - allowed), sorted(allowed - found)
    if args.prune:
        with open(ALLOW, "w", encoding="utf-8") as f:
            f.write("# Upward includes that break the layer order (tests/check_layers.py); this list only shrinks.\n")
            f.writelines(l + "\n" for l in sorted(found & allowed))
        print(f"check_layers: {len(gone)} line(s) pruned, {len(found & allowed)} left")
        return 0 if not new else 1
    for n in new:
        print(f"check_layers: {n}: includes a higher layer ({' < '.join(LAYERS)}); move the shared part down, "
              "or pass it in from above")
    for g in gone:
        print(f"check_layers: '{g}' is fixed: delete its line from tests/layers_allowlist.txt (or run --prune)")
    print(f"check_layers: {len(found)} upward include(s), {len(allowed)} allowed, {len(new)} new, {len(gone)} fixed")
    return 1 if new or gone else 0


if __name__ == "__main__":
    sys.exit(main())
