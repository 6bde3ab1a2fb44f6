#!/usr/bin/python3
"""Runs every `$ actmem ... --from examples/...` command that README.md shows, so the README cannot rot.

For each such command (a fenced block whose line starts with `$ actmem`), the fenced block right after
it is the output excerpt the README shows: every line of it but `...` must appear in what the command
prints (stderr then stdout), in that order. Each command must exit 0 and echo the settings it read
("actmem: read from FILE (FORMAT):" and at least one "--flag value  <- source" line). Every `--from`
format must have one example.

  tests/readme_examples.py --actmem build/actmem     (run from anywhere; commands run in the repo root)
"""
import argparse
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORMATS = {"megatron", "deepspeed", "torchtitan", "axolotl", "llama-factory", "hf-trainer"}


def examples(readme):
    """(command line, excerpt lines) for each `$ actmem` block followed by an output block."""
    blocks = re.findall(r"```[a-z]*\n(.*?)```", readme, flags=re.S)
    out = []
    for i, block in enumerate(blocks):
        lines = block.splitlines()
        if len(lines) == 1 and lines[0].startswith("$ actmem ") and "--from examples/" in lines[0]:
            excerpt = blocks[i + 1].splitlines() if i + 1 < len(blocks) else []
            out.append((lines[0][2:], excerpt))
    return out


def check(actmem, command, excerpt):
    args = shlex.split(command)
    run = subprocess.run([actmem] + args[1:], cwd=ROOT, capture_output=True, text=True)
    printed = (run.stderr + run.stdout).splitlines()
    problems = []
    if run.returncode != 0:
        problems.append(f"exit code {run.returncode}: {run.stderr.strip()[:500]}")
    read = [re.match(r"actmem: read from \S+ \(([a-z-]+)\):", line) for line in printed]
    formats = {m.group(1) for m in read if m}
    if not formats:
        problems.append("no 'actmem: read from FILE (FORMAT):' line")
    if not any(re.match(r"  --[a-z-]+ .*  <- ", line) for line in printed):
        problems.append("no setting echoed with its source ('  --flag value  <- source')")
    at = 0
    for want in excerpt:
        if want.strip() in ("", "..."):
            continue
        while at < len(printed) and want.strip() not in printed[at]:
            at += 1
        if at == len(printed):
            problems.append(f"the README's line is not in the output (in order): {want.strip()!r}")
            break
        at += 1
    return formats, problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--actmem", default=os.path.join(ROOT, "build", "actmem"))
    parser.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    a = parser.parse_args()
    actmem = os.path.abspath(a.actmem)
    with open(a.readme, encoding="utf-8") as f:
        found = examples(f.read())
    failed = 0
    seen = set()
    for command, excerpt in found:
        formats, problems = check(actmem, command, excerpt)
        seen |= formats
        print(f"{'FAIL' if problems else 'ok  '} {command}  ({', '.join(sorted(formats))})")
        for p in problems:
            print(f"       {p}")
        failed += bool(problems)
    missing = FORMATS - seen
    if missing:
        print(f"FAIL no README example for the --from formats: {', '.join(sorted(missing))}")
        failed += 1
    print(f"{len(found)} README examples, {failed} failed")
    return 1 if failed or not found else 0


if __name__ == "__main__":
    sys.exit(main())
