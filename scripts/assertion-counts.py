#!/usr/bin/env python3
"""Assertions per test file, to show that a refactor keeps every test's checks (issue 26).

Counts `#expect`, `#require`, `Issue.record` and `XCTAssert*` in Tests/**/*.swift, and the
VM checker's `expect`/`equal` calls (Tests/UseCase/VM/lib/check.py; each runs once per step or node, so
the VM's run-time count is larger), at a git revision or in the work tree.
Files are named by their base name, so a test file that moves to another tier is still
compared with itself.

  scripts/assertion-counts.py                 the work tree
  scripts/assertion-counts.py REV             a revision
  scripts/assertion-counts.py REV1 REV2       the files whose count changed, and the totals
"""
import re
import subprocess
import sys
from pathlib import Path

SWIFT = re.compile(r'#expect\b|#require\b|\bIssue\.record\b|\bXCTAssert\w*\(')
PYTHON = re.compile(r'\.(expect|equal)\(')


def files(rev):
    if rev is None:
        paths = [str(p) for p in Path('Tests').rglob('*') if p.is_file()]
        return {p: Path(p).read_text(errors='replace') for p in paths}
    names = subprocess.run(['git', 'ls-tree', '-r', '--name-only', rev, 'Tests'], check=True,
                           capture_output=True, text=True).stdout.split()
    return {n: subprocess.run(['git', 'show', f'{rev}:{n}'], check=True, capture_output=True,
                              text=True, errors='replace').stdout for n in names}


def counts(rev):
    result = {}
    for path, text in files(rev).items():
        if path.endswith('.swift'):
            pattern = SWIFT
        elif path.endswith('VM/lib/check.py'):
            pattern = PYTHON
        else:
            continue
        found = len(pattern.findall(text))
        if found:
            key = Path(path).name
            result[key] = result.get(key, 0) + found
    return result


def main(argv):
    if len(argv) == 3:
        before, after = counts(argv[1]), counts(argv[2])
        for name in sorted(set(before) | set(after)):
            if before.get(name, 0) != after.get(name, 0):
                print(f'{before.get(name, 0):6} -> {after.get(name, 0):6}  {name}')
        print(f'{sum(before.values()):6} -> {sum(after.values()):6}  total ({len(before)} -> {len(after)} files)')
        return 0
    found = counts(argv[1] if len(argv) == 2 else None)
    for name in sorted(found):
        print(f'{found[name]:6}  {name}')
    print(f'{sum(found.values()):6}  total ({len(found)} files)')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
