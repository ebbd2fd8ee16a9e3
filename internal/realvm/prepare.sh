#!/usr/bin/env bash
# prepare.sh: prepares the real-VM harness (package realvm) on a Debian
# bookworm host. Run as root:
#
#   internal/realvm/prepare.sh [--dir DIR] [--force STEP]... [--mirror URL]
#
# DIR defaults to $VSTELLAR_REALVM_DIR, else /var/cache/vstellar/realvm. It
# gets:
#   sid/                 a Debian sid root (debootstrap minbase + qemu-system-x86):
#                        stock QEMU 11.1.3 and the libraries both QEMUs load
#   qemu-10.2.2-rdma/    QEMU 10.2.2 from Debian's source with qemu/0001-*.patch
#                        (names virtio id 42), run through the sid root's loader
#   kernel/              trixie's 6.12 vmlinuz (and vmlinux, its ELF payload for
#                        a faster PVH boot), the modules of KERNEL_MODULES
#                        (uio, virtio_net, ib_core, ib_uverbs, rdma_rxe...),
#                        modules.alias, modules.builtin(.modinfo), config
#   rdma/guest-root/     the guest's RDMA user space from sid (rdma-core,
#                        ibverbs-utils, perftest, iproute2's rdma) with the
#                        libraries they load and an ld.so.cache; the sid root
#                        gets what builds vstellar.ko and libvstellar: gcc-14,
#                        the guest kernel's headers (and sid's newest), and
#                        rdma-core's source at RDMA_SRC, and the kernel's
#                        checkpatch.pl at CHECKPATCH
#   manifest.json        what package realvm reads (Load, Require)
#   stamps/, logs/       one cache key and one log per step
#
# Each step is keyed by a sha256 of its inputs (its own text, package
# lists, versions, the patch, configure flags, the keys of the steps it
# builds on) and is redone only when the key changes or its outputs are
# gone; --force STEP redoes one anyway (host, sid, qemu, kernel, standin,
# rdma, manifest). A fresh machine takes about 10 min (most of it building QEMU),
# a prepared one a few seconds. The host's apt sources are never changed:
# trixie and sid are used only inside the sid root. Nothing stays mounted:
# work inside the root runs in its own mount and pid namespaces.
#
# Stock QEMU 11.1.3 has no name for virtio id 42 and aborts on it, so the
# device runs there under a stand-in id (the manifest's standin_virtio_id,
# chosen below) that no driver of the guest kernel claims.
set -euo pipefail

DIR=${VSTELLAR_REALVM_DIR:-/var/cache/vstellar/realvm}
MIRROR=${VSTELLAR_REALVM_MIRROR:-http://deb.debian.org/debian}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FORCE=()

usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}"; }

while (($#)); do
	case $1 in
	--dir) DIR=$2; shift 2 ;;
	--dir=*) DIR=${1#*=}; shift ;;
	--mirror) MIRROR=$2; shift 2 ;;
	--mirror=*) MIRROR=${1#*=}; shift ;;
	--force) FORCE+=("$2"); shift 2 ;;
	--force=*) FORCE+=("${1#*=}"); shift ;;
	-h | --help) usage; exit 0 ;;
	*) echo "prepare.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
[[ $(id -u) == 0 ]] || { echo "prepare.sh: must run as root" >&2; exit 1; }
for f in "${FORCE[@]}"; do
	[[ " host sid kernel qemu standin rdma manifest " == *" $f "* ]] || { echo "prepare.sh: no step $f" >&2; exit 2; }
done
[[ $DIR == /* ]] || DIR=$PWD/$DIR

SID=$DIR/sid
HOST_PACKAGES="debootstrap cpio zstd xz-utils"
SID_INCLUDE=qemu-system-x86
QEMU_DEB_VERSION=1:10.2.2+ds-1
QEMU_NAME=qemu-10.2.2-rdma
# QEMU 10.2.2's patches, applied in order: 0001 names virtio id 42; 0002
# lets the generic vhost-user device survive a back-end reconnect.
PATCHES=("$HERE"/qemu/*.patch)
BUILD_DEPS="build-essential ninja-build meson pkg-config libglib2.0-dev libpixman-1-dev python3-venv python3-pycotap flex bison libfdt-dev libslirp-dev device-tree-compiler"
CONFIGURE_FLAGS="--target-list=x86_64-softmmu --disable-docs --disable-werror --disable-sdl --disable-gtk --disable-vnc --disable-opengl --disable-virglrenderer --disable-spice --disable-xen --disable-capstone --disable-rust --enable-slirp --enable-fdt=system --disable-install-blobs --disable-download"
KERNEL_SUITE=trixie
KERNEL_META=linux-image-amd64
# In load order: each after the modules it depends on.
# crc32_generic: rxe asks the crypto API for "crc32" when a device is
# added, and a guest without modprobe cannot load it on demand.
KERNEL_MODULES="uio uio_pci_generic failover net_failover virtio_net ib_core ib_uverbs udp_tunnel ip6_udp_tunnel crc32_generic rdma_rxe"
# The guest's RDMA user space (sid) and what builds the driver and provider.
RDMA_PACKAGES="rdma-core ibverbs-utils ibverbs-providers libibverbs-dev librdmacm-dev perftest iproute2"
RDMA_BUILD_DEPS="build-essential gcc-14 cmake ninja-build pkgconf libnl-3-dev libnl-route-3-dev libudev-dev libsystemd-dev python3 linux-headers-amd64"
# What goes into the guest (with every library they load).
RDMA_GUEST_BINS="ibv_devices ibv_devinfo ibv_rc_pingpong ibv_srq_pingpong ib_write_bw ib_write_lat ib_send_bw ib_send_lat ib_read_bw ib_read_lat ib_atomic_bw ib_atomic_lat rdma ip sh cat ls dmesg sleep grep"
# UCX for ucx_perftest over rc_verbs: trixie's 1.18, since sid's 1.23 rc
# is built without the IB transports. Its packages are unpacked, not
# installed (they would pull in ROCm); what they load comes from sid.
UCX_SUITE=trixie
UCX_DEBS="libucx0 ucx-utils"
UCX_DEPS="libopenmpi40 libibmad5 libibumad3 libfuse3-4 libgomp1"
# What of UCX goes into the guest: the tools, the core libraries, and the
# transports a guest can use (no ROCm, no mlx5 direct verbs, no rdmacm).
UCX_GUEST_FILES="usr/bin/ucx_perftest usr/bin/ucx_info usr/lib/x86_64-linux-gnu/libucp.so.0 usr/lib/x86_64-linux-gnu/libuct.so.0 usr/lib/x86_64-linux-gnu/libucs.so.0 usr/lib/x86_64-linux-gnu/libucs_signal.so.0 usr/lib/x86_64-linux-gnu/libucm.so.0 usr/lib/x86_64-linux-gnu/ucx/libuct_ib.so.0 usr/lib/x86_64-linux-gnu/ucx/libuct_cma.so.0"
UCX_ROOT=/srv/ucx
RDMA_SRC=/srv/rdma-core
CHECKPATCH=/srv/checkpatch
# Stand-in ids to try, in order. Each must be named in stock QEMU's
# virtio_device_names[] (probed below) and claimed by no driver of the
# guest kernel: checked below against modules.alias and
# modules.builtin.modinfo, which lack the device tables of built-in drivers
# (in trixie's 6.12 virtio_console, ids 3 and 11, and virtiofs, 26), so
# realvm's TestBoot also checks in the guest that no driver takes the
# device. 21 (signal distribution) comes first: the virtio spec reserves
# it, yet neither Linux nor QEMU has a driver or a device model for it.
STANDIN_CANDIDATES="21 22 17 30 31"

mkdir -p "$DIR/stamps" "$DIR/logs"
exec 9>"$DIR/.lock"
flock 9

LOADER=$SID/lib64/ld-linux-x86-64.so.2
LIBPATH=$SID/usr/lib/x86_64-linux-gnu:$SID/lib/x86_64-linux-gnu

# sid_qemu BINARY ARGS...: runs a QEMU binary through the sid root's loader,
# with firmware from the root.
sid_qemu() {
	local bin=$1
	shift
	"$LOADER" --library-path "$LIBPATH" "$bin" -L "$SID/usr/share/qemu" -L "$SID/usr/share/seabios" "$@"
}

# in_root SCRIPT: runs bash SCRIPT chrooted into the sid root, in new mount
# and pid namespaces, so that proc, dev and sys are unmounted and every
# process it started is gone when it returns, even on failure.
in_root() {
	unshare --mount --propagation private --pid --fork --kill-child -- /bin/bash -euo pipefail -c '
		r=$1
		mount -t proc proc "$r/proc"
		mount --rbind /dev "$r/dev"
		mount -t sysfs sysfs "$r/sys"
		exec chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
			LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive /bin/bash -euo pipefail -c "$2"
	' in_root "$SID" "trap 'echo \"prepare.sh, in the sid root: \$BASH_COMMAND failed\"' ERR
$1"
}

# key TEXT...: sha256 of its arguments.
key() { printf '%s\n' "$@" | sha256sum | cut -c1-64; }

declare -A KEYS
TOTAL_START=$EPOCHREALTIME

# step NAME KEY OUTPUT...: runs step_NAME unless stamps/NAME holds KEY and
# every OUTPUT exists; prints one line with the time taken. The step's
# output goes to logs/NAME.log, whose tail is shown if it fails.
step() {
	local name=$1 k=$2
	shift 2
	KEYS[$name]=$k
	local stamp=$DIR/stamps/$name log=$DIR/logs/$name.log start=$EPOCHREALTIME ok=1 f forced=0
	for f in "${FORCE[@]}"; do [[ $f == "$name" ]] && forced=1; done
	for f in "$@"; do [[ -e $f ]] || ok=0; done
	if ((!forced && ok)) && [[ -f $stamp && $(<"$stamp") == "$k" ]]; then
		printf '%-9s cached  %6.1fs\n' "$name" "$(elapsed "$start")"
		return
	fi
	HAD_STAMP=$forced
	if [[ -f $stamp ]]; then HAD_STAMP=1; fi
	rm -f "$stamp"
	# A subshell outside any condition, so that errexit holds inside the
	# step (it is off in any function called from an if); the trap names
	# the command that failed, which errexit does not.
	local rc=0
	set +e
	(
		set -eE
		trap 'echo "prepare.sh: $BASH_COMMAND failed (line $LINENO)"' ERR
		"step_$name"
	) >"$log" 2>&1
	rc=$?
	set -e
	if ((rc)); then
		printf '%-9s FAILED  %6.1fs  (log: %s)\n' "$name" "$(elapsed "$start")" "$log" >&2
		tail -n 30 "$log" >&2
		exit 1
	fi
	echo "$k" >"$stamp"
	printf '%-9s done    %6.1fs  %s\n' "$name" "$(elapsed "$start")" "$(tail -n 1 "$log")"
}

elapsed() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# 1. Host packages. Only bookworm's own sources are used.
step_host() {
	local missing=()
	for p in $HOST_PACKAGES; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
	done
	if ((${#missing[@]})); then
		apt-get update -qq
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"
		echo "installed ${missing[*]}"
	else
		echo "all present"
	fi
}

# sid_complete ROOT: whether ROOT is a finished debootstrap with the
# included packages installed.
sid_complete() {
	local r=$1 p
	[[ -x $r/lib64/ld-linux-x86-64.so.2 && ! -e $r/debootstrap ]] || return 1
	for p in $SID_INCLUDE; do
		dpkg-query --admindir="$r/var/lib/dpkg" -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || return 1
	done
}

# 2. The sid root. A finished root already in place without a stamp (made
# by hand with the same debootstrap command) is adopted, not redone.
step_sid() {
	if ((!HAD_STAMP)) && sid_complete "$SID"; then
		echo "adopting $SID"
	else
		rm -rf "$SID" "$SID.new"
		debootstrap --variant=minbase --include="$SID_INCLUDE" sid "$SID.new" "$MIRROR"
		mv "$SID.new" "$SID"
	fi
	# The mirror may serve a Release file past its Valid-Until.
	printf '%s\n' 'Acquire::Check-Valid-Until "false";' 'APT::Sandbox::User "root";' \
		>"$SID/etc/apt/apt.conf.d/99vstellar"
	echo "sid root: $(sid_qemu "$SID/usr/bin/qemu-system-x86_64" --version | head -n 1)"
}

# probe_virtio_id BINARY ID: whether that QEMU creates a generic vhost-user
# device with virtio id ID: it gets past virtio_init (whose name lookup
# aborts on an unnamed id) to the back-end handshake, which fails since
# nobody connects to the server socket, or (with 0002-*.patch, which
# waits for the chardev's first connection) waits there until timeout.
probe_virtio_id() {
	local bin=$1 id=$2 d out rc=0
	d=$(mktemp -d)
	out=$(timeout 10 "$LOADER" --library-path "$LIBPATH" "$bin" -L "$SID/usr/share/qemu" -L "$SID/usr/share/seabios" \
		-accel tcg -machine q35 -nodefaults -no-user-config -display none -S \
		-chardev "socket,id=c0,path=$d/s,server=on,wait=off" \
		-device "vhost-user-test-device-pci,chardev=c0,virtio-id=$id" 2>&1) || rc=$?
	rm -rf "$d"
	[[ $out != *Assertion* ]] && { [[ $out == *"vhost_backend_init failed"* ]] || ((rc == 124)); }
}

# 3. QEMU 10.2.2 with virtio id 42 named, built inside the sid root.
step_qemu() {
	local b=/srv/qemu-build out=$DIR/$QEMU_NAME
	rm -rf "$SID$b" "$out" "$out.new"
	mkdir -p "$SID$b"
	mkdir -p "$SID$b/patches"
	cp "${PATCHES[@]}" "$SID$b/patches/"
	echo "deb-src $MIRROR sid main" >"$SID/etc/apt/sources.list.d/vstellar-src.list"
	in_root "
		apt-get update -qq
		apt-get install -y -q --no-install-recommends $BUILD_DEPS
		apt-get clean
		cd $b
		apt-get source -q qemu=$QEMU_DEB_VERSION
		cd qemu-*/
		# The +ds tarball has no edk2 blobs to unpack.
		sed -i 's/^\( *unpack_edk2_blobs = \)bzip2.found()/\1false/' meson.build
		if grep -q 'unpack_edk2_blobs = bzip2' meson.build; then exit 1; fi
		for p in ../patches/*.patch; do patch -p1 <\$p; done
		mkdir build && cd build
		../configure $CONFIGURE_FLAGS --with-pkgversion='Debian $QEMU_DEB_VERSION, vStellar virtio-rdma patch'
		ninja qemu-system-x86_64
	"
	mkdir -p "$out.new"
	cp "$SID$b"/qemu-*/build/qemu-system-x86_64 "$out.new/"
	rm -rf "$SID$b"
	mv "$out.new" "$out"
	# Every library it needs must come from the sid root.
	if "$LOADER" --library-path "$LIBPATH" --list "$out/qemu-system-x86_64" | grep 'not found'; then
		return 1
	fi
	probe_virtio_id "$out/qemu-system-x86_64" 42 || { echo "$QEMU_NAME still refuses virtio-id=42"; return 1; }
	echo "$(sid_qemu "$out/qemu-system-x86_64" --version | head -n 1); virtio-id=42 accepted"
}

# 4. The guest kernel: trixie's linux-image-amd64 resolved to its image
# package, downloaded inside the sid root, where trixie is pinned at 100 so
# that the root's own packages stay sid's.
step_kernel() {
	local w=/srv/kernel-fetch out=$DIR/kernel
	rm -rf "$SID$w" "$out.new"
	mkdir -p "$SID$w" "$out.new"
	echo "deb $MIRROR $KERNEL_SUITE main" >"$SID/etc/apt/sources.list.d/vstellar-$KERNEL_SUITE.list"
	printf 'Package: *\nPin: release n=%s\nPin-Priority: 100\n' "$KERNEL_SUITE" \
		>"$SID/etc/apt/preferences.d/vstellar-$KERNEL_SUITE"
	# modules.alias is made by depmod at install time, not shipped: run the
	# root's depmod on the package's modules, moved to where it looks.
	in_root "
		apt-get update -qq
		apt-get install -y -q --no-install-recommends kmod
		cd $w
		apt-get download -q $KERNEL_META/$KERNEL_SUITE
		dep=\$(dpkg-deb -f ${KERNEL_META}_*.deb Depends | tr ',' '\n' | grep -o 'linux-image-[^ ]*' | head -n 1)
		apt-get download -q \"\$dep/$KERNEL_SUITE\"
		rm ${KERNEL_META}_*.deb
		dpkg-deb -x linux-image-*.deb x
		dpkg-deb -f linux-image-*.deb Package Version >package
		mods=\$(ls -d x/lib/modules/* x/usr/lib/modules/* 2>/dev/null | head -n 1 || true)
		kver=\${mods##*/}
		test -f x/boot/vmlinuz-\$kver
		mkdir -p d/lib/modules d/usr/lib
		ln -s ../../lib/modules d/usr/lib/modules
		mv \$mods d/lib/modules/
		depmod -b $w/d \$kver
		echo \$kver >version
	"
	local kver m f mods
	kver=$(<"$SID$w/version")
	mods=$SID$w/d/lib/modules/$kver
	local x=$SID$w/x
	cp "$x/boot/vmlinuz-$kver" "$out.new/vmlinuz"
	extract_vmlinux "$out.new/vmlinuz" "$out.new/vmlinux"
	cp "$x/boot/config-$kver" "$out.new/config"
	cp "$mods/modules.alias" "$mods/modules.builtin" "$mods/modules.builtin.modinfo" "$out.new/"
	mkdir "$out.new/modules"
	for m in $KERNEL_MODULES; do
		f=$(find "$mods/kernel" -name "$m.ko*" | head -n 1)
		[[ -n $f ]] || { echo "module $m not in the package"; return 1; }
		case $f in
		*.ko.xz) xz -dc "$f" >"$out.new/modules/$m.ko" ;;
		*.ko.zst) zstd -qdc "$f" >"$out.new/modules/$m.ko" ;;
		*.ko.gz) gzip -dc "$f" >"$out.new/modules/$m.ko" ;;
		*) cp "$f" "$out.new/modules/$m.ko" ;;
		esac
	done
	cp "$SID$w/version" "$out.new/version"
	sed -n 's/^Package: //p' "$SID$w/package" >"$out.new/package"
	sed -n 's/^Version: //p' "$SID$w/package" >"$out.new/package-version"
	rm -rf "$SID$w" "$out"
	mv "$out.new" "$out"
	echo "$(<"$out/package") $(<"$out/package-version") ($kver)"
}

# extract_vmlinux BZIMAGE OUT: the uncompressed ELF kernel inside a
# bzImage, located by the setup header's payload_offset and payload_length
# (boot protocol 2.08+; the payload ends with 4 bytes of size, which the
# decompressors would take for garbage). QEMU boots it through its PVH
# entry point, which skips the decompressor: about a second less per boot
# under TCG.
extract_vmlinux() {
	local img=$1 out=$2 setup off len magic
	le32() { od -An -tu4 -j "$1" -N 4 "$img" | tr -d ' '; }
	setup=$(od -An -tu1 -j 497 -N 1 "$img" | tr -d ' ')
	off=$(( (setup + 1) * 512 + $(le32 584) ))
	len=$(($(le32 588) - 4))
	magic=$(od -An -tx1 -j "$off" -N 4 "$img" | tr -d ' ')
	case $magic in
	28b52ffd) dd if="$img" iflag=skip_bytes,count_bytes skip="$off" count="$len" bs=1M status=none | zstd -qdc >"$out" ;;
	fd377a58) dd if="$img" iflag=skip_bytes,count_bytes skip="$off" count="$len" bs=1M status=none | xz -qdc >"$out" ;;
	*) echo "unknown kernel compression (magic $magic)"; return 1 ;;
	esac
	[[ $(od -An -tx1 -N 4 "$out" | tr -d ' ') == 7f454c46 ]] || { echo "no ELF kernel in $img"; return 1; }
}

# claimed_by_kernel ID: whether a driver of the guest kernel (a module or
# built in) has a modalias matching virtio device ID.
claimed_by_kernel() {
	local hex
	hex=$(printf '%08X' "$1")
	{
		sed -n 's/^alias \(virtio:[^ ]*\) .*/\1/p' "$DIR/kernel/modules.alias"
		tr '\0' '\n' <"$DIR/kernel/modules.builtin.modinfo" | sed -n 's/^[^.]*\.alias=\(virtio:.*\)/\1/p'
	} | while read -r pat; do
		# shellcheck disable=SC2053 # pat is a glob on purpose
		[[ virtio:d${hex}v00000000 == $pat || virtio:d${hex}v00001AF4 == $pat ]] && echo "$pat"
	done | grep -q .
}

# 5. The stand-in virtio id for stock QEMU 11.1.3 (see STANDIN_CANDIDATES).
step_standin() {
	local id
	for id in $STANDIN_CANDIDATES; do
		if claimed_by_kernel "$id"; then
			echo "id $id: claimed by a driver of the guest kernel"
			continue
		fi
		if ! probe_virtio_id "$SID/usr/bin/qemu-system-x86_64" "$id"; then
			echo "id $id: not named by stock QEMU"
			continue
		fi
		echo "$id" >"$DIR/standin-virtio-id"
		echo "stand-in virtio id $id"
		return
	done
	echo "no usable stand-in id among $STANDIN_CANDIDATES"
	return 1
}

# stage_guest_root DIR: copies into DIR, inside the sid root, the programs
# of RDMA_GUEST_BINS, rxe's provider and UCX_GUEST_FILES (from the tree
# unpacked at UCX_ROOT, to their paths in the package) with every library
# they load (at the paths the loader resolved, symlinks followed) and an
# ld.so.cache for that tree.
stage_guest_root() {
	local g=$1 f
	rm -rf "$g"
	mkdir -p "$g/etc/libibverbs.d"
	for f in $RDMA_GUEST_BINS; do command -v "$f" >/dev/null || { echo "no $f in the root"; return 1; }; done
	for f in $UCX_GUEST_FILES; do [[ -e $UCX_ROOT/$f ]] || { echo "no $f in $UCX_ROOT"; return 1; }; done
	for f in $(for b in $RDMA_GUEST_BINS; do command -v "$b"; done) /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav*.so \
		$(for u in $UCX_GUEST_FILES; do echo "$UCX_ROOT/$u"; done); do
		echo "$f"
		LD_LIBRARY_PATH=$UCX_ROOT/usr/lib/x86_64-linux-gnu ldd "$f" |
			awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\/.*ld-linux/ { print $1 }'
	done | sort -u | while read -r f; do
		local to=${f#"$UCX_ROOT"}
		mkdir -p "$g${to%/*}"
		cp -L "$f" "$g$to"
	done
	cp /etc/libibverbs.d/rxe.driver "$g/etc/libibverbs.d/"
	cp -r /etc/ld.so.conf /etc/ld.so.conf.d "$g/etc/"
	ldconfig -X -r "$g"
}

# 6. The guest's RDMA user space, and what builds vstellar.ko and
# libvstellar in the sid root: the guest kernel's own headers (trixie is
# pinned low there, so they are asked for by suite), sid's newest, and
# rdma-core's source of exactly the installed version (a provider builds
# only inside the tree of the libibverbs that loads it). Only the orig
# tarball is fetched: the mirror may lack the Debian part, and a provider
# build needs none of it.
step_rdma() {
	local kver out=$DIR/rdma
	kver=$(<"$DIR/kernel/version")
	rm -rf "$out.new"
	mkdir -p "$out.new"
	in_root "
		kver=$kver
		apt-get update -qq
		apt-get install -y -q --no-install-recommends $RDMA_PACKAGES $RDMA_BUILD_DEPS $UCX_DEPS linux-headers-$kver/$KERNEL_SUITE
		apt-get clean
		ver=\$(dpkg-query -W -f='\${Version}' rdma-core)
		rm -rf $RDMA_SRC && mkdir -p $RDMA_SRC && cd $RDMA_SRC
		set -- \$(apt-get source -q --print-uris rdma-core=\$ver | grep \"orig\\.tar\")
		/usr/lib/apt/apt-helper download-file \"\${1//\\'/}\" orig.tar \"\$4\"
		mkdir src && tar -xf orig.tar -C src --strip-components=1 && rm orig.tar
		grep -q \"set(PACKAGE_VERSION \\\"\${ver%%-*}\\\")\" src/CMakeLists.txt
		rm -rf $UCX_ROOT && mkdir -p $UCX_ROOT/debs && cd $UCX_ROOT/debs
		for p in $UCX_DEBS; do apt-get download -q \$p/$UCX_SUITE; done
		for d in *.deb; do dpkg-deb -x \$d $UCX_ROOT; done
		dpkg-deb -f libucx0_*.deb Version >$UCX_ROOT/version
		cd / && rm -rf $UCX_ROOT/debs
		RDMA_GUEST_BINS='$RDMA_GUEST_BINS'
		UCX_GUEST_FILES='$UCX_GUEST_FILES'
		UCX_ROOT=$UCX_ROOT
		$(declare -f stage_guest_root)
		stage_guest_root /srv/guest-root
		# checkpatch.pl (and the files it reads) from the guest kernel's
		# source: no package ships it alone.
		rm -rf $CHECKPATCH && mkdir -p $CHECKPATCH && cd $CHECKPATCH
		apt-get download -q linux-source-\${kver%.*}/$KERNEL_SUITE
		dpkg-deb --fsys-tarfile linux-source-*.deb | tar -xO --wildcards '*/linux-source-*.tar.xz' |
			tar -xJ --strip-components=1 --wildcards '*/scripts/checkpatch.pl' '*/scripts/spelling.txt' '*/scripts/const_structs.checkpatch'
		rm linux-source-*.deb
		test -x scripts/checkpatch.pl
		cd $RDMA_SRC
		newest=\$(dpkg-query -W -f='\${Depends}' linux-headers-amd64 | grep -o 'linux-headers-[^ ,]*')
		pabi=\$(sed -n 's/^set(IBVERBS_PABI_VERSION \"\\(.*\\)\")/\\1/p' src/CMakeLists.txt)
		printf '%s\n' \"\$ver\" \"\$pabi\" \"\$(dpkg-query -W -f='\${Version}' perftest)\" \"/usr/src/linux-headers-$kver\" \"/usr/src/\$newest\" \"\$(cat $UCX_ROOT/version)\" >/srv/guest-root.info
	"
	mv "$SID/srv/guest-root" "$out.new/guest-root"
	mv "$SID/srv/guest-root.info" "$out.new/info"
	rm -rf "$out"
	mv "$out.new" "$out"
	echo "rdma-core $(sed -n 1p "$out/info") (provider ABI $(sed -n 2p "$out/info")), perftest $(sed -n 3p "$out/info"), UCX $(sed -n 6p "$out/info"), guest root $(du -sh "$out/guest-root" | cut -f1)"
}

# json STRING: STRING as a JSON string.
json() {
	local s=$1
	s=${s//\\/\\\\}
	s=${s//\"/\\\"}
	printf '"%s"' "$s"
}

# qemu_json NAME BINARY VIRTIO_ID SHM RECONNECT: one manifest entry (paths
# relative to DIR). RECONNECT: the generic device survives a back-end
# reconnect (0002-*.patch; stock QEMU aborts).
qemu_json() {
	local version
	version=$(sid_qemu "$DIR/$2" --version | head -n 1)
	cat <<-EOF
		    $(json "$1"): {
		      "loader": "sid/lib64/ld-linux-x86-64.so.2",
		      "library_path": ["sid/usr/lib/x86_64-linux-gnu", "sid/lib/x86_64-linux-gnu"],
		      "binary": $(json "$2"),
		      "firmware_dirs": ["sid/usr/share/qemu", "sid/usr/share/seabios"],
		      "version": $(json "$version"),
		      "virtio_id": $3,
		      "shared_memory": $4,
		      "backend_reconnect": $5
		    }
	EOF
}

# 7. The manifest package realvm reads.
step_manifest() {
	local standin m first=1 mods="" keys="" n
	standin=$(<"$DIR/standin-virtio-id")
	for m in $KERNEL_MODULES; do
		((first)) || mods+=", "
		first=0
		mods+="{\"name\": $(json "$m"), \"path\": $(json "kernel/modules/$m.ko")}"
	done
	first=1
	for n in host sid qemu kernel standin rdma; do
		((first)) || keys+=", "
		first=0
		keys+="$(json "$n"): $(json "${KEYS[$n]}")"
	done
	cat >"$DIR/manifest.json.new" <<-EOF
		{
		  "schema": 1,
		  "sid_root": "sid",
		  "qemu": {
		$(qemu_json qemu-11.1.3 sid/usr/bin/qemu-system-x86_64 "$standin" true false),
		$(qemu_json "$QEMU_NAME" "$QEMU_NAME/qemu-system-x86_64" 42 false true)
		  },
		  "kernel": {
		    "path": "kernel/vmlinuz",
		    "vmlinux": "kernel/vmlinux",
		    "version": $(json "$(<"$DIR/kernel/version")"),
		    "package": $(json "$(<"$DIR/kernel/package") $(<"$DIR/kernel/package-version")"),
		    "config": "kernel/config",
		    "modules_alias": "kernel/modules.alias",
		    "modules_builtin": "kernel/modules.builtin",
		    "modules_builtin_modinfo": "kernel/modules.builtin.modinfo",
		    "modules": [$mods]
		  },
		  "rdma": {
		    "guest_root": "rdma/guest-root",
		    "rdma_core": $(json "$(sed -n 1p "$DIR/rdma/info")"),
		    "provider_abi": $(json "$(sed -n 2p "$DIR/rdma/info")"),
		    "perftest": $(json "$(sed -n 3p "$DIR/rdma/info")"),
		    "rdma_core_src": $(json "$RDMA_SRC/src"),
		    "kernel_headers": $(json "$(sed -n 4p "$DIR/rdma/info")"),
		    "newest_kernel_headers": $(json "$(sed -n 5p "$DIR/rdma/info")"),
		    "checkpatch": $(json "$CHECKPATCH/scripts/checkpatch.pl"),
		    "ucx": $(json "$(sed -n 6p "$DIR/rdma/info")")
		  },
		  "standin_virtio_id": $standin,
		  "keys": {$keys}
		}
	EOF
	mv "$DIR/manifest.json.new" "$DIR/manifest.json"
	echo "$DIR/manifest.json"
}

host_key=$(key "$(declare -f step_host)" "$HOST_PACKAGES")
step host "$host_key" /usr/sbin/debootstrap /usr/bin/cpio /usr/bin/zstd /usr/bin/xz
sid_key=$(key "$(declare -f step_sid sid_complete)" "$SID_INCLUDE")
step sid "$sid_key" "$SID/usr/bin/qemu-system-x86_64" "$LOADER"
kernel_key=$(key "$(declare -f step_kernel in_root extract_vmlinux)" "$KERNEL_SUITE" "$KERNEL_META" "$KERNEL_MODULES")
step kernel "$kernel_key" "$DIR/kernel/vmlinuz" "$DIR/kernel/vmlinux" "$DIR/kernel/version"
qemu_key=$(key "$sid_key" "$(declare -f step_qemu in_root probe_virtio_id)" "$QEMU_DEB_VERSION" \
	"$(cat "${PATCHES[@]}" | sha256sum)" "$BUILD_DEPS" "$CONFIGURE_FLAGS")
step qemu "$qemu_key" "$DIR/$QEMU_NAME/qemu-system-x86_64"
standin_key=$(key "$sid_key" "$kernel_key" "$(declare -f step_standin claimed_by_kernel probe_virtio_id)" \
	"$STANDIN_CANDIDATES")
step standin "$standin_key" "$DIR/standin-virtio-id"
rdma_key=$(key "$sid_key" "$kernel_key" "$(declare -f step_rdma stage_guest_root in_root)" "$RDMA_PACKAGES" \
	"$RDMA_BUILD_DEPS" "$RDMA_GUEST_BINS" "$RDMA_SRC" "$CHECKPATCH" "$UCX_SUITE" "$UCX_DEBS" "$UCX_DEPS" \
	"$UCX_GUEST_FILES" "$UCX_ROOT")
step rdma "$rdma_key" "$DIR/rdma/guest-root" "$DIR/rdma/info"
manifest_key=$(key "$(declare -f step_manifest qemu_json json)" "$host_key" "$sid_key" "$qemu_key" \
	"$kernel_key" "$standin_key" "$rdma_key" "$KERNEL_MODULES")
step manifest "$manifest_key" "$DIR/manifest.json"
printf '%-9s         %6.1fs  %s\n' total "$(elapsed "$TOTAL_START")" "$DIR"
