#!/bin/bash
# SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
#
# Builds the provider (../build.sh), then builds and runs fake_ring.c, the
# data-path test without kernel or device, with rdma-core's warning flags.
# Run inside the sid root: vst-inroot 'bash .../tests/run.sh [RDMA_CORE_SRC]'
# (package realvm's TestProviderDataPath does). The same paths against the
# real driver and device: guest-driver/tools/vstellar-loopback.c, in a VM.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SRC=${1:-/srv/rdma-core/src}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

bash "$HERE/../build.sh" "$OUT" "$SRC" >/dev/null
WORK=${VSTELLAR_PROVIDER_BUILD:-/srv/vstellar-provider/$(echo "$SRC" | sha256sum | cut -c1-12)}
B=$WORK/build
gcc -std=gnu11 -O2 -g -Wall -Wextra -Wno-sign-compare -Wno-unused-parameter \
	-Wmissing-prototypes -Wmissing-declarations -Wwrite-strings -Wformat=2 \
	-Wshadow -Wstrict-prototypes -Wredundant-decls -Werror ${VSTELLAR_TEST_CFLAGS:-} \
	-I"$B/include" -I"$WORK/rdma-core/providers/vstellar" \
	-o "$OUT/fake_ring" "$HERE/fake_ring.c" \
	-L"$B/lib" -libverbs -lpthread
LD_LIBRARY_PATH=$B/lib "$OUT/fake_ring"
