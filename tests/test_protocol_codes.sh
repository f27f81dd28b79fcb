#!/bin/sh
# proto/PROTOCOL.md names every error code there is, and every code the
# request path of the daemon and the codec can answer with, by request:
#
#   1. every X(NAME, -N, ...) of common/tsdf_error.h is a row
#      "| -N | `NAME` |" of section 4's table;
#   2. every TSDF_E<NAME> that the decoder (proto/proto_read.c,
#      proto_request.c) or the daemon's request path (daemon/handlers.c,
#      persist.c, stats_reply.c, access.c, worker.c, queue.c, maps.c,
#      snapshot.c) names appears in section 4.1, the codes of each request,
#      unless it is one of the few listed below that never reach a reply;
#   3. section 4.1 has a table (or line) for every request type.
#
# A grep, not a proof: a code that reaches a reply through the engine
# without being named on the request path is only caught by point 1.
#
#   test_protocol_codes.sh SOURCE_DIR
set -u

SRC=${1:?source directory}
DOC=$SRC/proto/PROTOCOL.md
HDR=$SRC/common/tsdf_error.h
fails=0
fail() {
    echo "FAIL: $*"
    fails=$((fails + 1))
}

[ -r "$DOC" ] && [ -r "$HDR" ] || { echo "FAIL: $DOC or $HDR missing"; exit 1; }

# 1. The code table of section 4.
codes=$(sed -n 's/^ *X(\([A-Z0-9_]*\), *\(-[0-9]*\),.*/\1:\2/p' "$HDR")
[ "$(echo "$codes" | wc -l)" -ge 30 ] || fail "parsed too few codes from $HDR"
for c in $codes; do
    name=${c%%:*}
    value=${c##*:}
    grep -q "^| $value | \`$name\` |" "$DOC" || fail "section 4 lacks the row | $value | \`$name\` |"
done

# Section 4.1: from its heading to section 5.
by_request=$(sed -n '/^### 4\.1 /,/^## 5\./p' "$DOC")
[ -n "$by_request" ] || { fail "PROTOCOL.md has no section 4.1"; exit 1; }

# 2. Codes the request path names. Never in a reply: CLOSED (the queue's
# own end-of-queue signal to its worker) and NOT_BUILT (the CPU backend's
# "no timeline", which the stats reply turns into no timeline key).
internal="CLOSED NOT_BUILT"
files="proto/proto_read.c proto/proto_request.c daemon/handlers.c daemon/persist.c
    daemon/stats_reply.c daemon/access.c daemon/worker.c daemon/queue.c daemon/maps.c
    daemon/snapshot.c"
named=$(cd "$SRC" && grep -ho 'TSDF_E[A-Z0-9_]*' $files | sed 's/^TSDF_E//' | sort -u)
for name in $named; do
    case " $internal " in *" $name "*) continue ;; esac
    echo "$by_request" | grep -q "\`$name\`" ||
        fail "the request path names TSDF_E$name, which section 4.1 never lists"
done

# 3. Every request type has its table.
for t in integrate raycast mesh stats reset save load maps ping; do
    echo "$by_request" | grep -q "^\`$t\`" || fail "section 4.1 has no table for \`$t\`"
done

[ $fails -eq 0 ] || exit 1
echo "OK: $(echo "$codes" | wc -l) codes in section 4, $(echo "$named" | wc -w) named on the request path"
