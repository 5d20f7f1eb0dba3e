#!/bin/bash
# The executables and the library link no Foundation (and so no ICU): loading it was most
# of every command's start-up time (issue 17; docs/performance.md). FoundationEssentials,
# Glibc, Dispatch and Synchronization are enough. The benchmark may use Foundation.
set -euo pipefail
cd "$(dirname "$0")/.."
found=$(grep -rlE '^\s*(@[a-zA-Z_]+ )*import (Foundation|FoundationInternationalization|FoundationNetworking|FoundationXML)\s*$' \
    Sources --include='*.swift' | grep -vE '^Sources/devaccess-bench/' || true)
if [[ -n $found ]]; then
    echo "check-no-foundation: these files import Foundation; use FoundationEssentials, Glibc, Dispatch:" >&2
    echo "$found" | sed 's/^/  /' >&2
    exit 1
fi
echo "check-no-foundation: no product source imports Foundation"
