# deps-prefix.sh - sourced by gpu-test.sh and gpu-bench.sh: the build's
# view of dependencies unpacked outside /usr (DEPS_PREFIX, e.g. /opt/deps
# where .device-deps/env.sh unpacks Debian's packages on the lent GPU
# machine). Their pkg-config files name /usr, so they are re-rooted under
# the prefix, and zlib's headers come from there but the runtime library
# from the system. Sets CMAKE_EXTRA (an array of cmake options; empty
# without DEPS_PREFIX).
CMAKE_EXTRA=()
if [ -n "${DEPS_PREFIX:-}" ]; then
    export PKG_CONFIG_SYSROOT_DIR=$DEPS_PREFIX
    export PKG_CONFIG_LIBDIR=$DEPS_PREFIX/usr/lib/x86_64-linux-gnu/pkgconfig:$DEPS_PREFIX/usr/share/pkgconfig
    CMAKE_EXTRA+=(-DZLIB_INCLUDE_DIR="$DEPS_PREFIX/usr/include"
        -DZLIB_LIBRARY=/lib/x86_64-linux-gnu/libz.so.1)
fi
