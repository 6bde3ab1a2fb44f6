#!/usr/bin/python3
"""docs/options.md is what `actmem options --markdown` prints: the options reference generated from
the option table (src/policies/option_table.cc). Exit 1, with a diff, when the committed file is stale.

  /usr/bin/python3 tests/check_options_doc.py --actmem build/actmem            check
  /usr/bin/python3 tests/check_options_doc.py --actmem build/actmem --write    regenerate docs/options.md
"""
import argparse
import difflib
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOC = os.path.join(ROOT, "docs", "options.md")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--actmem", required=True)
    parser.add_argument("--write", action="store_true", help="write docs/options.md instead of checking it")
    args = parser.parse_args()
    proc = subprocess.run([args.actmem, "options", "--markdown"], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        print(f"FAIL actmem options --markdown: exit {proc.returncode}\n{proc.stderr.strip()}")
        return 1
    if args.write:
        with open(DOC, "w", encoding="utf-8") as f:
            f.write(proc.stdout)
        print(f"wrote {os.path.relpath(DOC, ROOT)}")
        return 0
    committed = open(DOC, encoding="utf-8").read() if os.path.exists(DOC) else ""
    if committed == proc.stdout:
        print(f"{os.path.relpath(DOC, ROOT)} is up to date")
        return 0
    sys.stdout.writelines(difflib.unified_diff(committed.splitlines(True), proc.stdout.splitlines(True),
                                               "docs/options.md (committed)", "actmem options --markdown"))
    print("\nFAIL docs/options.md is stale; regenerate it with "
          "/usr/bin/python3 tests/check_options_doc.py --actmem build/actmem --write")
    return 1


if __name__ == "__main__":
    sys.exit(main())
