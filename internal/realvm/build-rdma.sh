#!/usr/bin/env bash
# build-rdma.sh ROOT REPO OUT KERNEL_HEADERS RDMA_CORE_SRC: builds the
# guest side for unmodified RDMA programs inside the sid root ROOT (as
# prepare.sh left it; run as root): vstellar.ko from REPO/guest-driver/linux
# against KERNEL_HEADERS (a path inside ROOT, the guest kernel's headers)
# and libvstellar from REPO/guest-driver/rdma-core inside the rdma-core
# tree RDMA_CORE_SRC (inside ROOT). OUT gets vstellar.ko,
# libvstellar-rdmav<N>.so and vstellar.driver, and bin/ every test program
# of REPO/guest-driver/tools/*.c (linked with libibverbs). Package realvm calls it
# (Env.BuildRDMA) and caches OUT by the sources' hash.
set -euo pipefail
root=$1 repo=$2 out=$3 headers=$4 rdmasrc=$5
b=/srv/vstellar-build
exec 9>"$root/srv/.vstellar-build.lock"
flock 9
rm -rf "$root$b"
mkdir -p "$root$b/out" "$out"
cp -r "$repo/guest-driver/include" "$repo/guest-driver/linux" "$repo/guest-driver/rdma-core" "$root$b/"
if [[ -d $repo/guest-driver/tools ]]; then cp -r "$repo/guest-driver/tools" "$root$b/"; fi
unshare --mount --propagation private --pid --fork --kill-child -- /bin/bash -euo pipefail -c '
	r=$1
	mount -t proc proc "$r/proc"
	mount --rbind /dev "$r/dev"
	mount -t sysfs sysfs "$r/sys"
	exec chroot "$r" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 /bin/bash -euo pipefail -c "$2"
' build "$root" "
	make -s -C $headers M=$b/linux CC=gcc-14 modules
	cp $b/linux/vstellar.ko $b/out/
	bash $b/rdma-core/build.sh $b/out $rdmasrc
	mkdir -p $b/out/bin
	for c in \$(ls $b/tools/*.c 2>/dev/null); do
		n=\${c##*/}
		gcc -O2 -g -Wall -Wextra -Werror -I $b/include -o $b/out/bin/\${n%.c} \$c -libverbs
	done
"
cp -r "$root$b"/out/* "$out/"
rm -rf "$root$b"
ls "$out"
