#!/usr/bin/env bash
# Runs as the probed user (under setpriv): tries to open each node for read,
# write and read-write, and runs v4l2-ctl --info on video nodes, printing TSV
# "user node mode outcome". Outcome: ok, denied (EACCES/EPERM: the kernel's
# permission check said no), or driver:MSG (permission granted, then the
# driver refused, e.g. EINVAL for a write-only open of a capture PCM).
# One process per user keeps this fast under TCG.
set -uo pipefail
user=$(id -un)
for node in "$@"; do
  for mode in read write readwrite; do
    case $mode in
      read) err=$( { exec 3<"$node"; } 2>&1 ) ;;
      write) err=$( { exec 3>>"$node"; } 2>&1 ) ;;
      readwrite) err=$( { exec 3<>"$node"; } 2>&1 ) ;;
    esac
    rc=$?
    if ((rc == 0)); then
      out=ok
    elif [[ $err == *"Permission denied"* || $err == *"Operation not permitted"* ]]; then
      out=denied
    elif [[ $err == *"Invalid argument"* || $err == *"Device or resource busy"* ]]; then
      out="driver:${err##*: }"
    else
      out="error:${err//$'\n'/ }"
    fi
    printf '%s\t%s\t%s\t%s\n' "$user" "$node" "$mode" "$out"
  done
  if [[ $node == /dev/video* ]]; then
    if err=$(v4l2-ctl -d "$node" --info 2>&1); then
      out=ok
    elif [[ $err == *"Permission denied"* ]]; then
      out=denied
    else
      out="error:$(printf '%s' "$err" | tail -n1)"
    fi
    printf '%s\t%s\t%s\t%s\n' "$user" "$node" v4l2-info "$out"
  fi
done
