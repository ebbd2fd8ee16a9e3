#!/bin/bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Builds libvstellar, the rdma-core provider for the vStellar device, inside
# a copy of the exact rdma-core source tree the guests run (the provider ABI,
# IBVERBS_PRIVATE_<N>, is private to one rdma-core version).
#
#   build.sh OUT_DIR [RDMA_CORE_SRC]
#
# Run it inside the sid root (vst-inroot 'bash .../build.sh /tmp/pv-out').
# RDMA_CORE_SRC defaults to the pristine tree unpacked there and is never
# written to. The copy lives in $VSTELLAR_PROVIDER_BUILD (default
# /srv/vstellar-provider/<hash of the source path>); it is configured once
# and reused while the rdma-core tree is unchanged, so later builds only
# recompile the provider.
# OUT_DIR receives lib<name>-rdmav<N>.so and <name>.driver.
set -euo pipefail

die() { echo "build.sh: error: $*" >&2; exit 1; }
say() { echo "build.sh: $*"; }

[ $# -ge 1 ] && [ $# -le 2 ] || die "usage: build.sh OUT_DIR [RDMA_CORE_SRC]"
OUT=$1
SRC=${2:-/srv/rdma-core/src}
# One build tree per source tree, so that callers with different copies
# of rdma-core do not undo each other's configure.
WORK=${VSTELLAR_PROVIDER_BUILD:-/srv/vstellar-provider/$(echo "$SRC" | sha256sum | cut -c1-12)}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
INCLUDE=$(cd "$HERE/../include" && pwd)

[ -f "$SRC/CMakeLists.txt" ] && [ -d "$SRC/providers" ] || die "$SRC is not an rdma-core source tree"
[ -f "$HERE/providers/vstellar/CMakeLists.txt" ] || die "provider sources missing in $HERE/providers/vstellar"
for h in vstellar-abi.h vstellar-dev.h; do
	[ -f "$INCLUDE/$h" ] || die "$INCLUDE/$h missing"
done
for t in cmake ninja python3 pkg-config gcc; do
	command -v "$t" >/dev/null || die "$t not found (run inside the sid root)"
done
case $OUT in /*) ;; *) OUT=$PWD/$OUT ;; esac
case $WORK in /*) ;; *) die "VSTELLAR_PROVIDER_BUILD must be absolute" ;; esac
mkdir -p "$(dirname "$WORK")"
# One build at a time per tree.
exec 9>"$WORK.lock"
flock 9

# Configured like Debian's own build (debian/rules: Release, plus the
# distribution's hardening flags), without what the provider does not need.
CMAKE_OPTS=(-GNinja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr
	-DNO_PYVERBS=1 -DNO_MAN_PAGES=1 -DENABLE_RESOLVE_NEIGH=0 -DENABLE_STATIC=0)
CFLAGS=$(dpkg-buildflags --get CFLAGS 2>/dev/null || true)
LDFLAGS=$(dpkg-buildflags --get LDFLAGS 2>/dev/null || true)
export CFLAGS LDFLAGS

# Identity of the rdma-core tree (path, every file's name, size and mtime)
# and of the configuration. A change gets a fresh copy and configure.
stamp=$( { echo "$SRC ${CMAKE_OPTS[*]} $CFLAGS $LDFLAGS"; cd "$SRC" && find . -type f -printf '%P %s %T@\n' | LC_ALL=C sort; } | sha256sum | cut -d' ' -f1)
TREE=$WORK/rdma-core
BUILD=$WORK/build

if [ "$(cat "$WORK/stamp" 2>/dev/null || true)" != "$stamp" ]; then
	say "copying $SRC to $TREE (new or changed rdma-core tree)"
	rm -rf "$WORK"
	mkdir -p "$WORK"
	cp -a "$SRC" "$TREE"

	# Register the provider and its kernel ABI header.
	sed -i 's|^add_subdirectory(providers/vmw_pvrdma)$|&\nadd_subdirectory(providers/vstellar)|' "$TREE/CMakeLists.txt"
	grep -qx 'add_subdirectory(providers/vstellar)' "$TREE/CMakeLists.txt" ||
		die "could not register providers/vstellar in CMakeLists.txt"
	# Both lists name rdma/vmw_pvrdma-abi.h once: publish_internal_headers
	# (symlinks into build/include/rdma) and rdma_kernel_provider_abi
	# (the kernel-abi/ struct wrappers); the device header only needs the
	# former.
	sed -i -e '/^publish_internal_headers(rdma$/,/^  )$/s|^  rdma/vmw_pvrdma-abi.h$|&\n  rdma/vstellar-abi.h\n  rdma/vstellar-dev.h|' \
	       -e '/^rdma_kernel_provider_abi($/,/^  )$/s|^  rdma/vmw_pvrdma-abi.h$|&\n  rdma/vstellar-abi.h|' \
	       "$TREE/kernel-headers/CMakeLists.txt"
	[ "$(grep -c '^  rdma/vstellar-abi.h$' "$TREE/kernel-headers/CMakeLists.txt")" = 2 ] &&
		[ "$(grep -c '^  rdma/vstellar-dev.h$' "$TREE/kernel-headers/CMakeLists.txt")" = 1 ] ||
		die "could not register the vstellar headers in kernel-headers/CMakeLists.txt"
	mkdir -p "$TREE/providers/vstellar"
	fresh=1
else
	say "reusing $TREE (rdma-core tree unchanged)"
	fresh=0
fi

# Sync the provider and the headers; a file is copied only when its content
# changed so that ninja rebuilds only what depends on it.
sync_file() {
	if ! cmp -s "$1" "$2"; then
		cp "$1" "$2"
		say "updated ${2#"$TREE"/}"
	fi
}
sync_file "$INCLUDE/vstellar-abi.h" "$TREE/kernel-headers/rdma/vstellar-abi.h"
sync_file "$INCLUDE/vstellar-dev.h" "$TREE/kernel-headers/rdma/vstellar-dev.h"
for f in "$HERE"/providers/vstellar/*; do
	[ -f "$f" ] && sync_file "$f" "$TREE/providers/vstellar/$(basename "$f")"
done
for f in "$TREE"/providers/vstellar/*; do
	if [ ! -e "$HERE/providers/vstellar/$(basename "$f")" ]; then
		rm -f "$f"
		say "removed ${f#"$TREE"/}"
	fi
done

if [ "$fresh" = 1 ] || [ ! -f "$BUILD/build.ninja" ]; then
	say "configuring in $BUILD"
	rm -rf "$BUILD"
	mkdir -p "$BUILD"
	(cd "$BUILD" && cmake "${CMAKE_OPTS[@]}" "$TREE" >"$BUILD/configure.log" 2>&1) ||
		{ tail -n 40 "$BUILD/configure.log" >&2; die "cmake failed (log: $BUILD/configure.log)"; }
	echo "$stamp" >"$WORK/stamp"
fi

pabi=$(sed -n 's/^set(IBVERBS_PABI_VERSION "\([0-9]*\)")$/\1/p' "$TREE/CMakeLists.txt")
[ -n "$pabi" ] || die "no IBVERBS_PABI_VERSION in $TREE/CMakeLists.txt"
target=vstellar-rdmav$pabi
say "building $target"
log=$BUILD/build.log
ninja -C "$BUILD" -j2 "$target" 2>&1 | tee "$log" || die "ninja $target failed"
# Warnings from the provider's own files fail the build: they are the
# rdma-core flags' verdict on this code.
if grep -E 'providers/vstellar/.*(warning|error):' "$log" >&2; then
	# Drop the objects so that the next run shows the warnings again.
	rm -rf "$BUILD/providers/vstellar/CMakeFiles/$target.dir"
	die "the provider compiled with warnings"
fi

lib=$BUILD/lib/lib$target.so
[ -f "$lib" ] || die "$lib was not built"
mkdir -p "$OUT"
cp "$lib" "$OUT/lib$target.so"
echo "driver vstellar" >"$OUT/vstellar.driver"
say "installed $OUT/lib$target.so and $OUT/vstellar.driver"
say "install in a guest: lib*.so -> /usr/lib/x86_64-linux-gnu/libibverbs/, vstellar.driver -> /etc/libibverbs.d/"
