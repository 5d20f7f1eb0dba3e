#!/bin/bash
# The CLI is an adapter (issue 26): it reaches the ledger, enforcement and the daemon only
# through the engine (DevAccessEngine) or devaccessd (DevAccess). SwiftPM lets a target
# import its dependencies' dependencies, so Package.swift alone does not keep it so.
# DevAccessHardware (monitor's location watcher) and DevAccessProtocol join the list once
# the last files that use them have moved.
set -euo pipefail
cd "$(dirname "$0")/.."
forbidden='DevAccess(Ledger|Enforcement|Broker|ACL|PAM|Journal|Launch)'
found=$(grep -rnE "^(@[A-Za-z_]+(\([A-Za-z]+\))? )*import $forbidden\b" Sources/DevAccessCLI --include='*.swift' || true)
if [[ -n $found ]]; then
    echo "check-cli-imports: the CLI imports an engine or daemon module; go through DevAccessEngine or DevAccess:" >&2
    echo "$found" | sed 's/^/  /' >&2
    exit 1
fi
echo "check-cli-imports: the CLI imports no ledger, enforcement or daemon module"
