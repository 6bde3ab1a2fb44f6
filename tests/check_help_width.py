#!/usr/bin/python3
"""Every `actmem ... --help` screen fits in 100 columns (CLI11 does not wrap option descriptions).

  /usr/bin/python3 tests/check_help_width.py --actmem build/actmem

Walks `actmem --help`, then every subcommand listed under "Subcommands:" (and theirs, recursively),
and prints each line longer than WIDTH with its subcommand. Exit 1 if there is one, or if a
`--help` fails, or if no subcommand was found (the walk would test nothing).
"""
import argparse
import subprocess
import sys

WIDTH = 100


def subcommands(help_text):
    """The names listed under CLI11's "Subcommands:" heading: rows indented by two spaces, up to
    the first line that is not indented (a deeper indent is a description's continuation line)."""
    names, inside = [], False
    for line in help_text.splitlines():
        if line.strip() == "Subcommands:":
            inside = True
        elif inside and line.startswith("  ") and not line.startswith("   "):
            names.append(line.split()[0])
        elif inside and line.strip() and not line.startswith("  "):
            inside = False
    return names


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--actmem", required=True)
    args = parser.parse_args()

    too_long, checked, failed = [], [], False
    todo = [[]]
    while todo:
        path = todo.pop(0)
        proc = subprocess.run([args.actmem, *path, "--help"], capture_output=True, text=True, timeout=60)
        label = " ".join(["actmem", *path, "--help"])
        if proc.returncode != 0:
            print(f"FAIL {label}: exit {proc.returncode}\n{proc.stderr.strip()}")
            failed = True
            continue
        checked.append(label)
        for number, line in enumerate(proc.stdout.splitlines(), 1):
            if len(line) > WIDTH:
                too_long.append((label, number, line))
        todo.extend(path + [name] for name in subcommands(proc.stdout))

    for label, number, line in too_long:
        print(f"{label} line {number}: {len(line)} columns > {WIDTH}:\n  {line}")
    print(f"checked {len(checked)} help screens: {', '.join(checked)}")
    if len(checked) < 2:
        print("FAIL: no subcommand found under 'Subcommands:' in `actmem --help`")
        failed = True
    ok = not too_long and not failed
    print(f"{len(checked) - len({t[0] for t in too_long})} passed, {len({t[0] for t in too_long}) + int(failed)} failed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
