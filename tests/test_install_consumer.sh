#!/bin/sh
# The installed libtsdf, used as its headers say: install the build tree
# into a staging directory, then build tests/consumer/consumer.c against it
# through pkg-config and through find_package(tsdf), each with the shared
# and the static library, and run all four programs.
#
#   test_install_consumer.sh CMAKE BUILD_DIR SOURCE_DIR CC VERSION
#
# Checked on the way:
#   - `cmake --install --prefix P` writes only under P (install_manifest.txt;
#     DESTDIR staging keeps the system untouched even when it does not);
#   - the installed headers are exactly the public ones (no engine or codec
#     header), each compiles on its own, and every function they declare
#     carries TSDF_API;
#   - libtsdf.so exports exactly the TSDF_API functions of those headers;
#   - pkg-config and tsdfConfigVersion.cmake give the project's VERSION, and
#     pkg-config no include path but libtsdf's;
#   - the shared programs need libtsdf.so.N, the static ones do not;
#   - the installed tsdfd, with no [metrics] web_dir, serves the live
#     view's page it was installed with (found beside itself, so also
#     under a prefix other than the configured one) and says so at start.
set -u

CMAKE=${1:?cmake}
BUILD=${2:?build dir}
SRC=${3:?source dir}
CC=${4:?C compiler}
VERSION=${5:?project version}

fail() {
    echo "FAIL: $*"
    exit 1
}

TMP=$(mktemp -d "${TMPDIR:-/tmp}/tsdf-consumer.XXXXXX") || fail "mktemp"
trap 'rm -rf "$TMP"' EXIT
PREFIX=/opt/tsdf-consumer-test
ROOT=$TMP/stage$PREFIX

# The install tree, staged under DESTDIR. Every file written must lie under
# the prefix: both in the manifest (paths without DESTDIR) and on disk.
DESTDIR=$TMP/stage "$CMAKE" --install "$BUILD" --prefix "$PREFIX" >"$TMP/install.log" 2>&1 ||
    { cat "$TMP/install.log"; fail "cmake --install"; }
[ -s "$BUILD/install_manifest.txt" ] || fail "no install_manifest.txt"
outside=$( (cat "$BUILD/install_manifest.txt"; echo) | grep -v -e "^$PREFIX/" -e '^$')
[ -z "$outside" ] || fail "installed outside the prefix $PREFIX: $outside"
outside=$(find "$TMP/stage" -type f | grep -v "^$ROOT/")
[ -z "$outside" ] || fail "installed outside the prefix $PREFIX: $outside"

LIBDIR=$(dirname "$(find "$ROOT" -name 'libtsdf.so' | head -n 1)")
[ -d "$LIBDIR" ] || fail "no libtsdf.so installed"
INC=$ROOT/include/tsdf

# The public headers, and nothing of the engine or the codec.
headers=$(cd "$INC" && ls | sort | tr '\n' ' ')
expected="tsdf_api.h tsdf_client.h tsdf_error.h tsdf_pose.h tsdf_proto_types.h tsdf_types.h "
[ "$headers" = "$expected" ] || fail "installed headers: '$headers', expected '$expected'"
for h in "$INC"/*.h; do
    printf '#include <%s>\nint tsdf_consumer_unit;\n' "$(basename "$h")" |
        "$CC" -std=c11 -Wall -Wextra -Werror -pedantic -fsyntax-only -I"$INC" -x c - ||
        fail "$(basename "$h") does not compile on its own"
done
# Function declarations start in column 0 in these headers.
unmarked=$(grep -hE '^[a-z].*\btsdf_[a-z0-9_]+\(' "$INC"/*.h | grep -v '^TSDF_API ')
[ -z "$unmarked" ] || fail "declared without TSDF_API: $unmarked"
grep -hoE '^TSDF_API [^(]*\btsdf_[a-z0-9_]+\(' "$INC"/*.h |
    sed -E 's/.*\b(tsdf_[a-z0-9_]+)\($/\1/' | sort >"$TMP/declared"
nm -D --defined-only "$LIBDIR/libtsdf.so" | awk '{print $3}' | sort >"$TMP/exported"
diff "$TMP/declared" "$TMP/exported" >"$TMP/api.diff" ||
    { cat "$TMP/api.diff"; fail "libtsdf.so exports (>) differ from the headers' TSDF_API (<)"; }
echo "api: $(wc -l <"$TMP/exported") exported symbols, all declared"

needs_libtsdf() {
    readelf -d "$1" | grep -q 'NEEDED.*\[libtsdf\.so'
}
run() {
    LD_LIBRARY_PATH=$LIBDIR "$1" >"$TMP/run.log" 2>&1 || { cat "$TMP/run.log"; fail "$1 failed"; }
    grep -q 'consumer: ok' "$TMP/run.log" || fail "$1: no 'ok'"
}

# pkg-config, shared and static.
export PKG_CONFIG_PATH="$LIBDIR/pkgconfig"
v=$(pkg-config --modversion libtsdf) || fail "pkg-config finds no libtsdf"
[ "$v" = "$VERSION" ] || fail "libtsdf.pc says version $v, the project $VERSION"
# The public headers include no dependency's header: the only include
# path a consumer gets is libtsdf's own.
cflags=$(pkg-config --cflags libtsdf)
set -- $cflags
[ $# -eq 1 ] && [ "$(cd "${1#-I}" && pwd -P)" = "$(cd "$INC" && pwd -P)" ] ||
    fail "pkg-config --cflags libtsdf is '$cflags', not just -I$INC"
CFLAGS="-std=c11 -Wall -Wextra -Werror"
# shellcheck disable=SC2046
"$CC" $CFLAGS "$SRC/tests/consumer/consumer.c" $(pkg-config --cflags libtsdf) \
    -o "$TMP/pc_shared" $(pkg-config --libs libtsdf) || fail "pkg-config shared build"
needs_libtsdf "$TMP/pc_shared" || fail "pc_shared does not use libtsdf.so"
run "$TMP/pc_shared"
# -l:libtsdf.a picks the archive even beside the .so; --static adds
# Requires.private and Libs.private, which the archive needs.
# shellcheck disable=SC2046
"$CC" $CFLAGS "$SRC/tests/consumer/consumer.c" $(pkg-config --cflags libtsdf) \
    -o "$TMP/pc_static" $(pkg-config --static --libs libtsdf | sed 's/-ltsdf\b/-l:libtsdf.a/') ||
    fail "pkg-config static build"
needs_libtsdf "$TMP/pc_static" && fail "pc_static still needs libtsdf.so"
run "$TMP/pc_static"
echo "pkg-config: shared and static ok"

# find_package(tsdf), with the exact version of this build.
"$CMAKE" -S "$SRC/tests/consumer" -B "$TMP/cmake" -DCMAKE_PREFIX_PATH="$ROOT" \
    -DCMAKE_C_COMPILER="$CC" -DTSDF_EXPECTED_VERSION="$VERSION" \
    -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF >"$TMP/cmake.log" 2>&1 ||
    { cat "$TMP/cmake.log"; fail "find_package(tsdf) configure"; }
grep -q "^tsdf_DIR:PATH=$ROOT/" "$TMP/cmake/CMakeCache.txt" ||
    fail "find_package(tsdf) found another tsdf: $(grep '^tsdf_DIR' "$TMP/cmake/CMakeCache.txt")"
"$CMAKE" --build "$TMP/cmake" >"$TMP/build.log" 2>&1 ||
    { cat "$TMP/build.log"; fail "find_package(tsdf) build"; }
needs_libtsdf "$TMP/cmake/consumer_shared" || fail "consumer_shared does not use libtsdf.so"
needs_libtsdf "$TMP/cmake/consumer_static" && fail "consumer_static still needs libtsdf.so"
run "$TMP/cmake/consumer_shared"
run "$TMP/cmake/consumer_static"
echo "find_package: shared and static ok"

# The installed daemon finds the page installed beside it.
command -v curl >/dev/null 2>&1 || { echo "live view: skipped (no curl)"; exit 0; }
served=0
for attempt in 1 2 3 4 5; do
    port=$((20000 + $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 30000))
    LD_LIBRARY_PATH=$LIBDIR "$ROOT/bin/tsdfd" --backend cpu --state-dir "$TMP/state" \
        --listen "ipc://$TMP/req.sock" --frames-listen "ipc://$TMP/frames.sock" \
        --metrics "127.0.0.1:$port" --set server.ring_socket= \
        --set snapshot.save_on_stop=false --set snapshot.load_on_start=false \
        >"$TMP/tsdfd.log" 2>&1 &
    pid=$!
    for _ in $(seq 1 600); do
        curl -fsS -o /dev/null "http://127.0.0.1:$port/metrics" 2>/dev/null && { served=1; break; }
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    [ $served = 1 ] && break
    kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
done
[ $served = 1 ] || { cat "$TMP/tsdfd.log"; fail "the installed tsdfd did not start"; }
code=$(curl -sS -o "$TMP/index.html" -w '%{http_code}' "http://127.0.0.1:$port/")
kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null
[ "$code" = 200 ] && cmp -s "$TMP/index.html" "$ROOT/share/tsdfd/web/index.html" ||
    { cat "$TMP/tsdfd.log"; fail "the installed tsdfd answers / with $code, not its page"; }
web_real=$(cd "$ROOT/share/tsdfd/web" && pwd -P)
grep -q "page from $web_real" "$TMP/tsdfd.log" ||
    { cat "$TMP/tsdfd.log"; fail "the installed tsdfd does not say it serves $web_real"; }
echo "live view: the installed daemon serves its page from $web_real"
exit 0
