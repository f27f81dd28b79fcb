#!/usr/bin/env bash
# test_systemd_unit.sh - checks systemd/tsdfd.service: `systemd-analyze
# verify` must accept it without a single warning, the hardening the
# operations guide promises must be there, and the sysusers entry must parse.
#
#   tests/test_systemd_unit.sh [path/to/tsdfd.service [build-dir]]
#
# With a configured build directory it also checks that `cmake --install`
# (prefix /usr) puts the daemon where ExecStart looks for it.
# Exit 0 pass, 1 fail, 77 skipped (no systemd-analyze).
set -u

here=$(cd "$(dirname "$0")" && pwd)
unit=${1:-$here/../systemd/tsdfd.service}
build=${2:-}
sysusers=$(cd "$(dirname "$unit")" && pwd)/tsdfd.sysusers

if ! command -v systemd-analyze >/dev/null 2>&1; then
    echo "SKIPPED: systemd-analyze not installed (Debian package systemd)"
    exit 77
fi
[ -f "$unit" ] || { echo "FAIL: no unit at $unit"; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# verify checks that ExecStart's binary exists; the daemon is not installed
# here, so the copy points at a stub that does.
printf '#!/bin/sh\nexit 0\n' > "$tmp/tsdfd"
chmod +x "$tmp/tsdfd"
sed "s#^ExecStart=/usr/bin/tsdfd #ExecStart=$tmp/tsdfd #" "$unit" > "$tmp/tsdfd.service"
grep -q "^ExecStart=$tmp/tsdfd " "$tmp/tsdfd.service" || fail "ExecStart is not /usr/bin/tsdfd ..."

out=$(cd "$tmp" && systemd-analyze verify "$tmp/tsdfd.service" 2>&1)
rc=$?
# Lines about other units (a container's own setup) are not ours to judge;
# every line naming our file is a warning about it.
ours=$(printf '%s\n' "$out" | grep -F "tsdfd.service" || true)
if [ $rc -ne 0 ] || [ -n "$ours" ]; then
    fail "systemd-analyze verify (rc $rc):"
    printf '%s\n' "$out"
else
    echo "ok: systemd-analyze verify accepts the unit without warnings"
fi

# The directives the operations guide documents, exactly.
require() {
    if grep -qxF -- "$1" "$unit"; then
        echo "ok: $1"
    else
        fail "missing line: $1"
    fi
}
require "Type=notify"
require "NotifyAccess=main"
require "ExecStart=/usr/bin/tsdfd --config /etc/tsdfd/tsdfd.conf"
require "User=tsdfd"
require "StateDirectory=tsdfd"
require "RuntimeDirectory=tsdfd"
require "ProtectSystem=strict"
require "ProtectHome=yes"
require "PrivateTmp=yes"
require "NoNewPrivileges=yes"
require "ProtectKernelTunables=yes"
require "ProtectKernelModules=yes"
require "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6"
require "PrivateDevices=no"
require "DevicePolicy=closed"
require "DeviceAllow=char-nvidia-frontend rw"
require "DeviceAllow=char-nvidia-uvm rw"
require "DeviceAllow=/dev/nvidiactl rw"
require "DeviceAllow=/dev/nvidia-uvm rw"
require "SupplementaryGroups=video"
grep -qE '^WatchdogSec=[1-9][0-9]*' "$unit" && echo "ok: WatchdogSec set" || fail "no WatchdogSec"
# The CUDA JIT needs W+X pages: this option must stay off (see the comment).
if grep -qE '^MemoryDenyWriteExecute=(yes|true|1|on)' "$unit"; then
    fail "MemoryDenyWriteExecute is on: the CUDA JIT cannot run"
else
    echo "ok: MemoryDenyWriteExecute off"
fi
# Every directive carries its reason: a comment line right above each
# group of settings (no two uncommented settings blocks longer than 3).
awk '/^[A-Za-z]+=/ { run++; if (run > 3) bad = 1; next } { run = 0 } END { exit bad }' "$unit" \
    && echo "ok: settings are commented" || fail "a run of more than 3 uncommented settings"

# The offline security score (systemd >= 250): stay well inside "OK".
if sec=$(systemd-analyze security --offline=yes "$tmp/tsdfd.service" 2>/dev/null); then
    score=$(printf '%s\n' "$sec" | sed -n 's/.*Overall exposure level for [^:]*: \([0-9.]*\).*/\1/p')
    if [ -n "$score" ] && awk -v s="$score" 'BEGIN { exit !(s <= 5.0) }'; then
        echo "ok: security exposure $score <= 5.0"
    else
        fail "security exposure '${score:-?}' above 5.0"
    fi
fi

# The install layout: ExecStart must name the file `cmake --install` writes
# with prefix /usr (the daemon's install rule in daemon/CMakeLists.txt).
if [ -n "$build" ] && [ -f "$build/daemon/cmake_install.cmake" ]; then
    rel=$(sed -n 's#.*file(INSTALL DESTINATION "${CMAKE_INSTALL_PREFIX}\([^"]*\)" TYPE EXECUTABLE FILES "[^"]*/tsdfd").*#\1#p' \
        "$build/daemon/cmake_install.cmake" | head -n 1)
    exec_bin=$(sed -n 's#^ExecStart=\([^ ]*\).*#\1#p' "$unit")
    if [ -z "$rel" ]; then
        echo "note: no install rule for tsdfd found in $build/daemon/cmake_install.cmake"
    elif [ "/usr$rel/tsdfd" = "$exec_bin" ]; then
        echo "ok: cmake --install (prefix /usr) puts tsdfd at $exec_bin"
    else
        fail "cmake --install (prefix /usr) puts tsdfd at /usr$rel/tsdfd, ExecStart runs $exec_bin"
    fi
fi

if [ -f "$sysusers" ] && command -v systemd-sysusers >/dev/null 2>&1; then
    if sysout=$(systemd-sysusers --dry-run "$sysusers" 2>&1) &&
        printf '%s\n' "$sysout" | grep -q "user 'tsdfd'\|tsdfd.*already exists\|Creating user 'tsdfd'"; then
        echo "ok: sysusers entry creates user tsdfd"
    elif printf '%s\n' "$sysout" | grep -qi "unknown option\|unrecognized option"; then
        echo "note: systemd-sysusers has no --dry-run; sysusers entry not checked"
    else
        fail "systemd-sysusers --dry-run: $sysout"
    fi
fi

if [ $fails -ne 0 ]; then
    echo "$fails check(s) failed"
    exit 1
fi
echo "PASS"
