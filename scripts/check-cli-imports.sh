#!/bin/bash
# The CLI is an adapter (issue 26): it reaches the ledger, enforcement, the hardware and the
# daemon only through the engine (DevAccessEngine) or devaccessd (DevAccess), and the
# operation values through the contract (DevAccessInterface), never the wire protocol
# (DevAccessProtocol). SwiftPM lets a target import its dependencies' dependencies, so
# Package.swift alone does not keep it so.
set -euo pipefail
cd "$(dirname "$0")/.."
forbidden='DevAccess(Ledger|Enforcement|Broker|ACL|PAM|Journal|Launch|Hardware|Protocol)'
found=$(grep -rnE "^(@[A-Za-z_]+(\([A-Za-z]+\))? )*import $forbidden\b" Sources/DevAccessCLI --include='*.swift' || true)
if [[ -n $found ]]; then
    echo "check-cli-imports: the CLI imports an engine, hardware, wire or daemon module; go through" \
         "DevAccessEngine, DevAccess or DevAccessInterface:" >&2
    echo "$found" | sed 's/^/  /' >&2
    exit 1
fi
echo "check-cli-imports: the CLI imports no ledger, enforcement, hardware, wire-protocol or daemon module"
