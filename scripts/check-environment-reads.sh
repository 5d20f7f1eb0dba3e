#!/bin/bash
# The environment is read once, by each executable's main, and passed down as a value
# (ProcessEnvironment; issue 9, docs/environment.md): no library code reads a variable of
# its own. Allowed besides the two mains: the client library's default socket (a third-party
# program's entry point), and the benchmarks (programs of their own, run by hand). The
# environment as entries (`currentEntries`) is for `devaccess run`'s program only: passed
# on through LaunchEnvironment, not configuration read.
set -euo pipefail
cd "$(dirname "$0")/.."
allowed='^Sources/(devaccess/main\.swift|devaccessd/main\.swift|DevAccess/ConfiguredSocket\.swift|devaccess-bench/)'
found=$(grep -rnE '(secure_)?getenv\(|ProcessInfo\.processInfo\.environment|ProcessEnvironment\.current\(' \
    Sources --include='*.swift' | grep -vE "$allowed" | grep -vE '^[^:]+:[0-9]+:\s*///?' || true)
entries=$(grep -rnE 'ProcessEnvironment\.currentEntries\(' Sources --include='*.swift' \
    | grep -vE '^Sources/DevAccessCLI/RunCommand\.swift:' || true)
found=$(printf '%s\n%s\n' "$found" "$entries" | sed '/^$/d')
if [[ -n $found ]]; then
    echo "check-environment-reads: these lines read the environment; take it from the value main passes down" >&2
    echo "(ParsedArguments.environment, DaemonOptions, RequestSettings):" >&2
    echo "$found" | sed 's/^/  /' >&2
    exit 1
fi
echo "check-environment-reads: only the mains read the environment"
