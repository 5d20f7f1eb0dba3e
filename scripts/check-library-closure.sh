#!/bin/bash
# An app that depends on the client library (the DevAccess product) links the Swift runtime
# and libc, nothing of the engine (issue 26): no libsqlite3, libcrypto, libudev, libasound,
# libpam, libacl or libsystemd. Read from the manifest (`swift package dump-package`): every
# target the product reaches, and of those, no C module but the header-only CLinux. The ldd
# of a built app is checked by ExampleProgramTests ("the library links no engine library").
set -euo pipefail
cd "$(dirname "$0")/.."
SWIFT=${SWIFT:-swift}
$SWIFT package dump-package | python3 -c '
import json, os, sys
manifest = json.load(sys.stdin)
targets = {target["name"]: target for target in manifest["targets"]}
allowed_c = {"CLinux"}

def names(target):
    for dependency in target["dependencies"]:
        for kind in ("byName", "target", "product"):
            if dependency.get(kind):
                yield dependency[kind][0]

def is_c(target):
    if target["type"] == "system":
        return True
    path = target.get("path") or os.path.join("Sources", target["name"])
    return any(name.endswith((".c", ".h")) for _, _, files in os.walk(path) for name in files)

product = next(p for p in manifest["products"] if p["name"] == "DevAccess")
closure, pending = set(), list(product["targets"])
while pending:
    name = pending.pop()
    if name in closure or name not in targets:
        continue
    closure.add(name)
    pending.extend(names(targets[name]))
c_modules = sorted(name for name in closure if is_c(targets[name]) and name not in allowed_c)
if c_modules:
    print("check-library-closure: the DevAccess library reaches C modules an app would link: "
          + ", ".join(c_modules) + "; keep them in the modules above DevAccessSystem (docs/architecture.md)",
          file=sys.stderr)
    sys.exit(1)
print("check-library-closure: DevAccess reaches " + ", ".join(sorted(closure)) + "; no C library but libc")
'
