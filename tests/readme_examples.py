#!/usr/bin/python3
"""Runs every command that README.md and docs/*.md show, and checks the output lines they show.

In those files a command is a line of a fenced code block that starts with `$ actmem ` (a trailing
`\\` continues it on the next line). Each one is run from the repository root and must exit 0, or the
code a trailing `# exits N` comment names. When the block holds one command and a ```text block
follows it directly, that block is the output excerpt: every line of it but `...` must appear in
what the command prints (stderr then stdout), in that order. A `--from examples/...` command must
also echo the settings it read ("actmem: read from FILE (FORMAT):" and at least one
"--flag value  <- source" line), and every `--from` format must have one example.

A ```python block that imports actmem is run as a script with the Python module on the path (the
build's `python/` folder beside the binary, or --python DIR); a ```text block right after it is
its excerpt. Without the module (a build without pybind11) those blocks are reported as skipped.

A line of a shell block that starts with `actmem ` but has no `$ ` is an error: everything shown
must be run. Shell blocks without `$` lines (installing packages, the build scripts, pip) are not
run here; CI runs the scripts.

Every relative link ([text](path)) must name a file of the repository (docs/options.md and
docs/testing.md come from their own changes: a link to them is only noted while they are missing).

docs/options.md (generated, with its own staleness test) and docs/testing.md are not read here.

  tests/readme_examples.py --actmem build/actmem     (run from anywhere; commands run in the repo root)
"""
import argparse
import glob
import os
import re
import shlex
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORMATS = {"megatron", "deepspeed", "torchtitan", "axolotl", "llama-factory", "hf-trainer", "vllm"}
NOT_READ = {"docs/options.md", "docs/testing.md"}
FENCE = re.compile(r"^```([A-Za-z0-9_+-]*)[ \t]*\n(.*?)^```[ \t]*$", flags=re.S | re.M)


def documents():
    """The files whose commands are run, relative to the repository root."""
    docs = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))
    return ["README.md"] + [d for d in docs if d not in NOT_READ]


def blocks(text):
    """(language, body, start, end) of each fenced block."""
    return [(m.group(1), m.group(2), m.start(), m.end()) for m in FENCE.finditer(text)]


def commands(body):
    """The `$ actmem ...` commands of a block (continuations joined) and the unrun `actmem` lines."""
    found, unrun, current = [], [], None
    for line in body.splitlines():
        if current is not None:
            current += " " + line.strip()
        elif line.startswith("$ actmem "):
            current = line[2:]
        elif line.lstrip().startswith("actmem "):
            unrun.append(line.strip())
            continue
        else:
            continue
        if current.endswith("\\"):
            current = current[:-1].rstrip()
        else:
            found.append(current)
            current = None
    if current is not None:
        found.append(current)
    return found, unrun


def examples(path):
    """(kind, command or script, excerpt lines, line number) of each example in the file."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = f.read()
    found, problems = [], []
    all_blocks = blocks(text)
    for i, (lang, body, start, end) in enumerate(all_blocks):
        line_no = text.count("\n", 0, start) + 1
        following = all_blocks[i + 1] if i + 1 < len(all_blocks) else None
        excerpt = []
        if following and following[0] == "text" and not text[end:following[2]].strip():
            excerpt = following[1].splitlines()
        if lang == "python" and re.search(r"^import actmem", body, flags=re.M):
            found.append(("python", body, excerpt, line_no))
            continue
        if lang == "text":
            continue
        cmds, unrun = commands(body)
        for line in unrun:
            problems.append(f"{path}:{line_no}: not run (write it as `$ {line}`): {line}")
        for command in cmds:
            found.append(("cli", command, excerpt if len(cmds) == 1 else [], line_no))
    return found, problems


def links(path):
    """Problems with the file's relative links: a target outside the repository or missing."""
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        text = re.sub(FENCE, "", f.read())
    problems, notes = [], []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        resolved = os.path.normpath(os.path.join(ROOT, os.path.dirname(path), target.split("#")[0]))
        rel = os.path.relpath(resolved, ROOT)
        if rel.startswith(".."):
            problems.append(f"{path}: link outside the repository: {target}")
        elif not os.path.exists(resolved):
            (notes if rel in NOT_READ else problems).append(f"{path}: link to a missing file: {target}")
    return problems, notes


def in_order(printed, excerpt):
    """The first excerpt line missing from printed (in order), or None."""
    at = 0
    for want in excerpt:
        if want.strip() in ("", "..."):
            continue
        while at < len(printed) and want.strip() not in printed[at]:
            at += 1
        if at == len(printed):
            return want.strip()
        at += 1
    return None


def check_cli(actmem, command, excerpt):
    expected_rc = 0
    m = re.search(r"\s+#\s*exits\s+(\d+)\s*$", command)
    if m:
        expected_rc = int(m.group(1))
        command = command[:m.start()]
    args = shlex.split(command)
    run = subprocess.run([actmem] + args[1:], cwd=ROOT, capture_output=True, text=True, timeout=300)
    printed = (run.stderr + run.stdout).splitlines()
    problems, formats = [], set()
    if run.returncode != expected_rc:
        problems.append(f"exit code {run.returncode}, not {expected_rc}: {run.stderr.strip()[:500]}")
    if "--from" in args and any(a.startswith("examples/") for a in args):
        read = [re.match(r"actmem: read from \S+ \(([a-z-]+)\):", line) for line in printed]
        formats = {m.group(1) for m in read if m}
        if not formats:
            problems.append("no 'actmem: read from FILE (FORMAT):' line")
        if not any(re.match(r"  --[a-z-]+ .*  <- ", line) for line in printed):
            problems.append("no setting echoed with its source ('  --flag value  <- source')")
    missing = in_order(printed, excerpt)
    if missing is not None:
        problems.append(f"the shown line is not in the output (in order): {missing!r}")
    return formats, problems


def check_python(python_dir, script, excerpt):
    env = dict(os.environ, PYTHONPATH=python_dir + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    problems = []
    if run.returncode != 0:
        problems.append(f"exit code {run.returncode}: {run.stderr.strip()[-800:]}")
    missing = in_order(run.stdout.splitlines(), excerpt)
    if missing is not None:
        problems.append(f"the shown line is not in the output (in order): {missing!r}")
    return problems


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--actmem", default=os.path.join(ROOT, "build", "actmem"))
    parser.add_argument("--python", help="folder holding the actmem Python package (default: "
                        "python/ beside the binary)")
    parser.add_argument("files", nargs="*", help="only these files (relative to the repository root)")
    a = parser.parse_args()
    actmem = os.path.abspath(a.actmem)
    python_dir = os.path.abspath(a.python or os.path.join(os.path.dirname(actmem), "python"))
    have_python = os.path.isfile(os.path.join(python_dir, "actmem", "__init__.py"))
    failed = ran = skipped = 0
    seen = set()
    for path in a.files or documents():
        found, problems = examples(path)
        link_problems, notes = links(path)
        problems += link_problems
        for n in notes:
            print(f"note {n} (written by its own change)")
        for p in problems:
            print(f"FAIL {p}")
        failed += len(problems)
        for kind, what, excerpt, line_no in found:
            where = f"{path}:{line_no}"
            if kind == "python":
                if not have_python:
                    print(f"skip {where}: python example (no actmem module in {python_dir})")
                    skipped += 1
                    continue
                problems = check_python(python_dir, what, excerpt)
                label = "python example"
            else:
                formats, problems = check_cli(actmem, what, excerpt)
                seen |= formats
                label = what + (f"  ({', '.join(sorted(formats))})" if formats else "")
            ran += 1
            print(f"{'FAIL' if problems else 'ok  '} {where}: {label}")
            for p in problems:
                print(f"       {p}")
            failed += bool(problems)
    missing = FORMATS - seen
    if missing and not a.files:
        print(f"FAIL no example for the --from formats: {', '.join(sorted(missing))}")
        failed += 1
    print(f"{ran} examples run, {skipped} skipped, {failed} failed")
    return 1 if failed or not ran else 0


if __name__ == "__main__":
    sys.exit(main())
