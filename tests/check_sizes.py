#!/usr/bin/env python3
"""Source files over 600 lines and functions over 80 lines (src/, tools/, web/*.cc; tests beside the
code excepted), held to tests/size_allowlist.txt, a list that only shrinks.

Each allow-list line is `file` or `file:function`, with the length it had when listed as a ceiling:
an item may not grow past its ceiling, a new one may not appear, and a listed one that shrank under
the limit must be deleted (`--prune` rewrites the list with the lengths of today, never raising one).
Functions are found by a brace matcher over the code with comments and literals blanked: a `{` after a
parameter list, outside any other function, opens one; lambdas and control blocks inside it count to it."""
import argparse
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALLOW = os.path.join(ROOT, "tests", "size_allowlist.txt")
MAX_FILE, MAX_FUNCTION = 600, 80
TOPS = ("src", "tools/cli", "tools/python", "web")
CONTROL = re.compile(r"\b(if|for|while|switch|catch|do|else|return|=)\s*$")
NAME = re.compile(r"([A-Za-z_~][\w:<>,~ ]*?(?:operator\s*\S+?)?)\s*\($")


def blank(text):
    """The code with comments, string and char literals (raw strings too) replaced by spaces, newlines kept."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c == "R" and text.startswith('R"', i) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            k = text.find("(", i + 2)
            delim = ")" + text[i + 2:k] + '"'
            j = text.find(delim, k)
            j = n if j < 0 else j + len(delim)
        elif c in "\"'" and not (c == "'" and i > 0 and text[i - 1].isalnum()):  # 1'000 digit separators
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j += 1
        else:
            out.append(c)
            i += 1
            continue
        out.append("".join(ch if ch == "\n" else " " for ch in text[i:j]))
        i = j
    return "".join(out)


def function_name(head):
    """The name before a definition's parameter list, or None (a class, namespace, initializer, control)."""
    head = re.sub(r"\s+", " ", head).strip()
    if not head or re.match(r"^(namespace|class|struct|union|enum|extern)\b", head) or CONTROL.search(head):
        return None
    depth, k = 0, len(head) - 1  # the parameter list: the last balanced (...) before trailing qualifiers
    head = re.sub(r"(\)\s*(const|noexcept|override|final|mutable|->\s*[\w:<>,\s*&]+|\s)*)$", ")", head)
    head = re.sub(r"\)\s*:.*$", ")", head)  # a constructor's member initializers
    if not head.endswith(")"):
        return None
    k = len(head) - 1
    while k >= 0:
        depth += head[k] == ")"
        depth -= head[k] == "("
        if depth == 0:
            break
        k -= 1
    m = NAME.search(head[:k + 1])
    if not m or head[:k].rstrip().endswith("]"):  # a lambda
        return None
    return m.group(1).split()[-1] if m.group(1).split() else None


def functions(text):
    """(name, first line, line count) of every function defined at namespace or class scope."""
    code, found, stack, last = blank(text), [], [], 0
    for i, c in enumerate(code):
        if c in ";}":
            if c == "}" and stack:
                kind, name, start = stack.pop()
                if kind == "fn":
                    first, end = code.count("\n", 0, start) + 1, code.count("\n", 0, i) + 1
                    found.append((name, first, end - first + 1))
            last = i + 1
        elif c == "{":
            inside = any(kind == "fn" for kind, _, _ in stack)
            name = None if inside else function_name(code[last:i])
            stack.append(("fn" if name else "block", name, i))
            last = i + 1
    return found


def measure():
    sizes = {}
    for top in TOPS:
        for folder, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [d for d in dirs if d not in ("node_modules", "tests")]
            for name in sorted(files):
                if not name.endswith((".cc", ".h")) or name.endswith("_test.cc"):
                    continue
                path = os.path.join(folder, name)
                rel = os.path.relpath(path, ROOT)
                with open(path, encoding="utf-8") as f:
                    text = f.read()
                lines = text.count("\n")
                if lines > MAX_FILE:
                    sizes[rel] = lines
                for fn, _, n in functions(text):
                    if n > MAX_FUNCTION:
                        key = f"{rel}:{fn}"
                        sizes[key] = max(n, sizes.get(key, 0))
    return sizes


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prune", action="store_true", help="rewrite the list: drop what is fixed, lower the ceilings")
    ap.add_argument("--list", action="store_true", help="print every item over the limits, longest first")
    args = ap.parse_args()
    allowed = {}
    with open(ALLOW, encoding="utf-8") as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                item, ceiling = line.rsplit(None, 1)
                allowed[item] = int(ceiling)
    sizes = measure()
    if args.list:
        for item, n in sorted(sizes.items(), key=lambda kv: -kv[1]):
            print(f"{n:6d}  {item}")
    problems = []
    for item, n in sorted(sizes.items()):
        what = "lines" if ":" not in item else "lines in one function"
        limit = MAX_FILE if ":" not in item else MAX_FUNCTION
        if item not in allowed:
            problems.append(f"{item}: {n} {what} (limit {limit}); split it")
        elif n > allowed[item]:
            problems.append(f"{item}: {n} {what}, over its listed ceiling {allowed[item]}; split it, do not raise it")
    fixed = sorted(set(allowed) - set(sizes))
    lowered = sorted(i for i in allowed if i in sizes and sizes[i] < allowed[i])
    if args.prune:
        with open(ALLOW, "w", encoding="utf-8") as f:
            f.write(f"# Files over {MAX_FILE} lines and functions over {MAX_FUNCTION} (tests/check_sizes.py), each with"
                    " its ceiling.\n# This list only shrinks: --prune drops what is fixed and lowers ceilings.\n")
            for item in sorted(allowed):
                if item in sizes:
                    f.write(f"{item} {min(sizes[item], allowed[item])}\n")
        print(f"check_sizes: {len(fixed)} fixed item(s) dropped, {len(lowered)} ceiling(s) lowered")
        fixed = []
    for p in problems:
        print("check_sizes: " + p)
    for item in fixed:
        print(f"check_sizes: '{item}' is under the limit now: delete its line from tests/size_allowlist.txt (--prune)")
    print(f"check_sizes: {len(sizes)} item(s) over the limits, {len(allowed)} listed, {len(problems)} problem(s)")
    return 1 if problems or fixed else 0


if __name__ == "__main__":
    sys.exit(main())
