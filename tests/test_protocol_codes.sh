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
#   3. section 4.1 has a table (or line) for every request type;
#   4. every size the document states is the code's: the message limit,
#      the default max_message_mb and max_reply_mb, the raycast sizes that
#      fit 64 MiB, the names' and stats keys' lengths, the stats entries
#      and the sensors that always fit (the daemon answers at these sizes:
#      tests/test_daemon_limits.c, test_documented_sizes).
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

# 4. The sizes. define NAME: the value of a #define of plain integers,
# products allowed ("(64u * 1024u * 1024u)").
define() { # file NAME
    sed -n "s/^#define $2 (*\([0-9u *]*\))*\$/\1/p" "$SRC/$1" | tr -d 'u ' | head -n 1 |
        awk -F'*' '{ v = 1; for (i = 1; i <= NF; i++) v *= $i; print v }'
}
conf() { # key: its value in the shipped config/tsdfd.conf
    sed -n "s/^$1 = \([0-9]*\)\$/\1/p" "$SRC/config/tsdfd.conf" | head -n 1
}
says() { # text: PROTOCOL.md holds it
    grep -qF -- "$1" "$DOC" || fail "PROTOCOL.md does not say \"$1\""
}
max_msg=$(define proto/tsdf_proto_types.h TSDF_PROTO_MAX_MESSAGE_BYTES)
[ "$max_msg" = 67108864 ] || fail "TSDF_PROTO_MAX_MESSAGE_BYTES is $max_msg"
says "larger than **$((max_msg >> 20)) MiB** ($(echo "$max_msg" | sed ':a;s/\B[0-9]\{3\}\>/ &/;ta') bytes"
says "(\`server.max_message_mb\`, $(conf max_message_mb) MiB by default)"
says "\`server.max_reply_mb\` ($(conf max_reply_mb) MiB by default, the most)"
# A raycast reply: (4 + 12 with normals + 3 with rgb) bytes a pixel + 4096.
mpx() { awk -v b="$max_msg" -v p="$1" 'BEGIN { printf "%.1f", (b - 4096) / p / 1e6 }'; }
grep -q "that is about $(mpx 16) Mpx, $(mpx 19) Mpx with colour" "$DOC" ||
    fail "PROTOCOL.md 6.2 does not say about $(mpx 16) Mpx with normals, $(mpx 19) with colour"
says "1 to $(define proto/tsdf_proto_types.h TSDF_PROTO_MAX_NAME_LEN) bytes of"
says "(\`sensor\` as str): 1 to $(define proto/tsdf_proto_types.h TSDF_PROTO_MAX_SENSOR_NAME_LEN) printable ASCII bytes"
says "\`sensor\` longer than $(define proto/tsdf_proto_types.h TSDF_PROTO_MAX_SENSOR_NAME_LEN) bytes"
says "At most $(define proto/tsdf_proto_types.h TSDF_PROTO_MAX_STATS_EXTRA) entries, keys 1..$(define proto/tsdf_proto_types.h TSDF_PROTO_MAX_STATS_KEY_LEN) bytes"
says "at least $(define daemon/metrics.h METRICS_STATS_MIN_SENSORS) sensors always fit"

[ $fails -eq 0 ] || exit 1
echo "OK: $(echo "$codes" | wc -l) codes in section 4, $(echo "$named" | wc -w) named on the request path, the stated sizes the code's"
