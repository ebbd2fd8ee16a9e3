/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR BSD-2-Clause) */
/*
 * User-space ABI between the vstellar kernel driver (guest-driver/linux) and
 * its rdma-core provider libvstellar (guest-driver/rdma-core): the driver
 * data that travels with the uverbs commands. The device's own ABI (rings,
 * doorbell records, CQEs) is in vstellar-dev.h, generated from package
 * virtio/abi.
 *
 * The kernel allocates every ring (physically contiguous, as the device
 * requires) and hands user space an mmap key for it; the provider maps the
 * rings, the doorbell region and the wake-up register and then posts and
 * polls without a system call.
 *
 * The create responses are *_uresp: vstellar-dev.h has the device's
 * CREATE_CQ, CREATE_QP and CREATE_SRQ responses under the plain names.
 */
#ifndef VSTELLAR_ABI_USER_H
#define VSTELLAR_ABI_USER_H

#include <linux/types.h>

/* Bumped on any incompatible change to the structs below. */
#define VSTELLAR_UVERBS_ABI_VERSION 1

/* vstellar_alloc_ucontext_resp.flags */
enum {
	/* Doorbells are in the device's shared-memory region, else in guest RAM. */
	VSTELLAR_UCTX_DOORBELL_SHMEM = 1 << 0,
	/*
	 * The wake-up register is mapped (notify_mmap_key): after ringing a
	 * doorbell the provider checks EngineIdle and, if set, writes
	 * notify_value there (spec §6.6). Without it the device rescans on its
	 * own timer.
	 */
	VSTELLAR_UCTX_IDLE_WAKEUP = 1 << 1,
};

struct vstellar_alloc_ucontext_resp {
	__u32 abi_version;		/* VSTELLAR_UVERBS_ABI_VERSION */
	__u32 flags;			/* VSTELLAR_UCTX_* */
	__u32 device_abi;		/* config space abi_version: major << 16 | minor */
	__u32 max_qp;			/* CQ records start at max_qp (spec §6.5) */
	__u32 max_inline_data;
	__u32 doorbell_page_size;
	__u32 doorbell_record_size;
	__u32 doorbell_records_offset;
	__u32 doorbell_records;
	__u32 notify_offset;		/* of the register in the notify mapping */
	__aligned_u64 doorbell_mmap_key; /* the whole doorbell region, device page first */
	__aligned_u64 doorbell_mmap_len;
	__aligned_u64 notify_mmap_key;	/* one page holding the wake-up register */
	__u16 notify_value;		/* le16 written to the register: the queue index */
	__u16 reserved0;
	__u32 reserved1;
};

struct vstellar_create_cq_uresp {
	__u32 cqn;
	__u32 entries;			/* ring slots: the CQ's cqe, a power of two */
	__u32 doorbell_index;		/* record index in the doorbell region */
	__u32 reserved;
	__aligned_u64 ring_mmap_key;	/* entries x 32-byte CQEs */
	__aligned_u64 ring_mmap_len;
};

/* A QP on an SRQ has no RQ: rq_size, rq_stride and rq_mmap_* are 0. */
struct vstellar_create_qp_uresp {
	__u32 qpn;
	__u32 doorbell_index;
	__u32 sq_size;			/* slots, a power of two */
	__u32 rq_size;
	__u32 sq_stride;		/* bytes per slot (spec §10.5) */
	__u32 rq_stride;
	__u32 max_send_sge;
	__u32 max_recv_sge;
	__u32 max_inline_data;
	__u32 reserved;
	__aligned_u64 sq_mmap_key;
	__aligned_u64 sq_mmap_len;
	__aligned_u64 rq_mmap_key;
	__aligned_u64 rq_mmap_len;
};

/* Device ABI 1.1: a shared receive queue's ring. */
struct vstellar_create_srq_uresp {
	__u32 srqn;
	__u32 doorbell_index;		/* record index in the doorbell region */
	__u32 size;			/* slots, a power of two */
	__u32 stride;			/* bytes per slot (spec §10.5) */
	__u32 max_sge;
	__u32 reserved;
	__aligned_u64 ring_mmap_key;
	__aligned_u64 ring_mmap_len;
};

#endif /* VSTELLAR_ABI_USER_H */
