/* SPDX-License-Identifier: ((GPL-2.0 WITH Linux-syscall-note) OR BSD-2-Clause) */
/*
 * vStellar device ABI 1.1 (docs/spec.md): the layout of everything that
 * crosses the guest/device boundary of the paravirtual RDMA device, for the
 * Linux kernel driver and the rdma-core provider.
 *
 * Generated from package virtio/abi, the one definition of the ABI, by
 *	go test ./virtio/abi -run TestCHeader -update
 * Do not edit: change the Go definition and regenerate. The static
 * assertions make the C compiler prove every size and offset equal to Go's.
 *
 * All multi-byte fields are little-endian; a field named reserved is
 * written as zero by the driver and ignored when the device wrote it.
 */
#ifndef VSTELLAR_DEV_H
#define VSTELLAR_DEV_H

#include <linux/types.h>
#ifdef __KERNEL__
#include <linux/build_bug.h>
#include <linux/stddef.h>
#else
#include <assert.h>
#include <stddef.h>
#endif

/*
 * Device identification, feature bits and virtqueues (spec §2-§4)
 */

#define VSTELLAR_DEVICE_ID	42
#define VSTELLAR_PCI_VENDOR_ID	0x1af4U
#define VSTELLAR_PCI_DEVICE_ID	0x106aU	/* 0x1040 + VSTELLAR_DEVICE_ID */

/* Device feature bit numbers (virtio bits 0-23). */
#define VSTELLAR_F_SHMEM_DOORBELL	0
#define VSTELLAR_F_EVENT_QUEUE		1
#define VSTELLAR_F_RC			2
#define VSTELLAR_F_UD			3
#define VSTELLAR_F_ATOMIC		4
#define VSTELLAR_F_INLINE		5
#define VSTELLAR_F_IDLE_WAKEUP		6
#define VSTELLAR_F_CQ_NOTIFY		7
#define VSTELLAR_F_RESIZE_CQ		8
#define VSTELLAR_LAST_DEVICE_FEATURE	23
#define VSTELLAR_DEVICE_FEATURE_BITS	0xffffffU	/* bits 0-23 */

/* Virtqueue indices. */
#define VSTELLAR_QUEUE_CONTROL		0
#define VSTELLAR_QUEUE_EVENT		1
#define VSTELLAR_QUEUE_WAKEUP		2
#define VSTELLAR_NUM_QUEUES		3
#define VSTELLAR_DEFAULT_QUEUE_SIZE	256
#define VSTELLAR_MAX_QUEUE_SIZE		1024

/*
 * Configuration space (spec §5)
 */

/* abi_version is major << 16 | minor; a driver accepts any minor of its major. */
#define VSTELLAR_ABI_MAJOR	1
#define VSTELLAR_ABI_MINOR	1
#define VSTELLAR_ABI_VERSION	0x10001U

/* config.status bits. */
#define VSTELLAR_CONFIG_STATUS_DOORBELL_SHMEM		0x1U
#define VSTELLAR_CONFIG_STATUS_DOORBELL_GUEST_RAM	0x2U

/*
 * The largest limits ABI 1 allows; every config limit is 1 .. its ceiling,
 * and page_size_cap must include 4 KiB.
 */
#define VSTELLAR_CEILING_MAX_QP			262144
#define VSTELLAR_CEILING_MAX_CQ			262144
#define VSTELLAR_CEILING_MAX_MR			16777216
#define VSTELLAR_CEILING_MAX_PD			16777216
#define VSTELLAR_CEILING_MAX_AH			16777216
#define VSTELLAR_CEILING_MAX_QP_WR		65536
#define VSTELLAR_CEILING_MAX_CQE		4194304
#define VSTELLAR_CEILING_MAX_SGE		64
#define VSTELLAR_CEILING_MAX_INLINE_DATA	1024
#define VSTELLAR_CEILING_MAX_QP_RD_ATOM		255
#define VSTELLAR_CEILING_MAX_GID		256
#define VSTELLAR_CEILING_MAX_SRQ		262144
#define VSTELLAR_CEILING_MAX_SRQ_WR		65536
#define VSTELLAR_CEILING_MAX_SRQ_SGE		64
#define VSTELLAR_CEILING_MAX_MR_SIZE		0x10000000000000ULL

#define VSTELLAR_CONFIG_SIZE	256

/* Configuration space; every field is read-only. */
struct vstellar_config {
	__le32 abi_version;
	__le32 status;			/* VSTELLAR_CONFIG_STATUS_* */
	__le64 node_guid;
	__le64 max_mr_size;
	__le64 page_size_cap;
	__le32 max_qp;
	__le32 max_cq;
	__le32 max_mr;
	__le32 max_pd;
	__le32 max_ah;
	__le32 max_qp_wr;
	__le32 max_cqe;
	__le32 max_sge;
	__le32 max_inline_data;
	__le32 max_qp_rd_atom;
	__le32 max_gid;
	__u8 phys_port_cnt;
	__u8 doorbell_shmid;
	__le16 doorbell_record_size;
	__le32 doorbell_page_size;
	__le32 doorbell_pages;		/* a power of two */
	__le32 doorbell_records_offset;
	__le32 doorbell_records;
	__le32 max_srq;			/* ABI 1.1 */
	__le32 max_srq_wr;
	__le32 max_srq_sge;
	__u8 reserved[148];
};

static_assert(sizeof(struct vstellar_config) == 256, "sizeof vstellar_config");
static_assert(offsetof(struct vstellar_config, abi_version) == 0x00, "vstellar_config.abi_version");
static_assert(offsetof(struct vstellar_config, status) == 0x04, "vstellar_config.status");
static_assert(offsetof(struct vstellar_config, node_guid) == 0x08, "vstellar_config.node_guid");
static_assert(offsetof(struct vstellar_config, max_mr_size) == 0x10, "vstellar_config.max_mr_size");
static_assert(offsetof(struct vstellar_config, page_size_cap) == 0x18,
	      "vstellar_config.page_size_cap");
static_assert(offsetof(struct vstellar_config, max_qp) == 0x20, "vstellar_config.max_qp");
static_assert(offsetof(struct vstellar_config, max_cq) == 0x24, "vstellar_config.max_cq");
static_assert(offsetof(struct vstellar_config, max_mr) == 0x28, "vstellar_config.max_mr");
static_assert(offsetof(struct vstellar_config, max_pd) == 0x2c, "vstellar_config.max_pd");
static_assert(offsetof(struct vstellar_config, max_ah) == 0x30, "vstellar_config.max_ah");
static_assert(offsetof(struct vstellar_config, max_qp_wr) == 0x34, "vstellar_config.max_qp_wr");
static_assert(offsetof(struct vstellar_config, max_cqe) == 0x38, "vstellar_config.max_cqe");
static_assert(offsetof(struct vstellar_config, max_sge) == 0x3c, "vstellar_config.max_sge");
static_assert(offsetof(struct vstellar_config, max_inline_data) == 0x40,
	      "vstellar_config.max_inline_data");
static_assert(offsetof(struct vstellar_config, max_qp_rd_atom) == 0x44,
	      "vstellar_config.max_qp_rd_atom");
static_assert(offsetof(struct vstellar_config, max_gid) == 0x48, "vstellar_config.max_gid");
static_assert(offsetof(struct vstellar_config, phys_port_cnt) == 0x4c,
	      "vstellar_config.phys_port_cnt");
static_assert(offsetof(struct vstellar_config, doorbell_shmid) == 0x4d,
	      "vstellar_config.doorbell_shmid");
static_assert(offsetof(struct vstellar_config, doorbell_record_size) == 0x4e,
	      "vstellar_config.doorbell_record_size");
static_assert(offsetof(struct vstellar_config, doorbell_page_size) == 0x50,
	      "vstellar_config.doorbell_page_size");
static_assert(offsetof(struct vstellar_config, doorbell_pages) == 0x54,
	      "vstellar_config.doorbell_pages");
static_assert(offsetof(struct vstellar_config, doorbell_records_offset) == 0x58,
	      "vstellar_config.doorbell_records_offset");
static_assert(offsetof(struct vstellar_config, doorbell_records) == 0x5c,
	      "vstellar_config.doorbell_records");
static_assert(offsetof(struct vstellar_config, max_srq) == 0x60, "vstellar_config.max_srq");
static_assert(offsetof(struct vstellar_config, max_srq_wr) == 0x64, "vstellar_config.max_srq_wr");
static_assert(offsetof(struct vstellar_config, max_srq_sge) == 0x68, "vstellar_config.max_srq_sge");
static_assert(offsetof(struct vstellar_config, reserved) == 0x6c, "vstellar_config.reserved");

/*
 * Doorbell region (spec §6): the device page, then one record per QP,
 * CQ and SRQ. Record index: qpn - 2 for a QP, max_qp + cqn - 1 for a CQ,
 * max_qp + max_cq + srqn - 1 for an SRQ (spec §7.3); the create commands
 * return it as doorbell_index.
 */

#define VSTELLAR_DOORBELL_SHM_ID	0
#define VSTELLAR_DOORBELL_RECORD_SIZE	64
#define VSTELLAR_DOORBELL_MIN_PAGE_SIZE	4096

/*
 * device_page.engine_flags: the engine sleeps; kick VSTELLAR_QUEUE_WAKEUP
 * after ringing a doorbell (spec §6.6).
 */
#define VSTELLAR_ENGINE_IDLE	0x1U

/* cq_doorbell.arm: arm_sn << VSTELLAR_CQ_ARM_SN_SHIFT | flags (spec §11.3). */
#define VSTELLAR_CQ_ARM_NEXT_COMP	0x1U
#define VSTELLAR_CQ_ARM_SOLICITED	0x2U
#define VSTELLAR_CQ_ARM_FLAGS_MASK	0x3U
#define VSTELLAR_CQ_ARM_SN_SHIFT	2
#define VSTELLAR_CQ_ARM_SN_MASK		0x3fffffffU	/* arm_sn and arm_ack, unshifted */

/* Start of the device page (offset 0 of the region), device-written. */
struct vstellar_device_page {
	__le32 engine_flags;	/* VSTELLAR_ENGINE_IDLE */
	__le32 reserved;
	__le64 wakeups;		/* statistics only */
};

static_assert(sizeof(struct vstellar_device_page) == 16, "sizeof vstellar_device_page");
static_assert(offsetof(struct vstellar_device_page, engine_flags) == 0x00,
	      "vstellar_device_page.engine_flags");
static_assert(offsetof(struct vstellar_device_page, reserved) == 0x04,
	      "vstellar_device_page.reserved");
static_assert(offsetof(struct vstellar_device_page, wakeups) == 0x08,
	      "vstellar_device_page.wakeups");

/*
 * QP doorbell record: free-running counters; the driver stores the
 * producers (release), the device the consumers.
 */
struct vstellar_qp_doorbell {
	__le32 sq_prod;		/* driver */
	__le32 rq_prod;		/* driver */
	__le32 sq_cons;		/* device */
	__le32 rq_cons;		/* device */
	__u8 reserved[48];
};

static_assert(sizeof(struct vstellar_qp_doorbell) == 64, "sizeof vstellar_qp_doorbell");
static_assert(offsetof(struct vstellar_qp_doorbell, sq_prod) == 0x00,
	      "vstellar_qp_doorbell.sq_prod");
static_assert(offsetof(struct vstellar_qp_doorbell, rq_prod) == 0x04,
	      "vstellar_qp_doorbell.rq_prod");
static_assert(offsetof(struct vstellar_qp_doorbell, sq_cons) == 0x08,
	      "vstellar_qp_doorbell.sq_cons");
static_assert(offsetof(struct vstellar_qp_doorbell, rq_cons) == 0x0c,
	      "vstellar_qp_doorbell.rq_cons");
static_assert(offsetof(struct vstellar_qp_doorbell, reserved) == 0x10,
	      "vstellar_qp_doorbell.reserved");

/* CQ doorbell record. */
struct vstellar_cq_doorbell {
	__le32 prod;		/* device: CQEs written */
	__le32 cons;		/* driver: CQEs consumed */
	__le32 arm;		/* driver: vstellar_cq_arm_word() */
	__le32 arm_ack;		/* device: last arm_sn served */
	__u8 reserved[48];
};

static_assert(sizeof(struct vstellar_cq_doorbell) == 64, "sizeof vstellar_cq_doorbell");
static_assert(offsetof(struct vstellar_cq_doorbell, prod) == 0x00, "vstellar_cq_doorbell.prod");
static_assert(offsetof(struct vstellar_cq_doorbell, cons) == 0x04, "vstellar_cq_doorbell.cons");
static_assert(offsetof(struct vstellar_cq_doorbell, arm) == 0x08, "vstellar_cq_doorbell.arm");
static_assert(offsetof(struct vstellar_cq_doorbell, arm_ack) == 0x0c,
	      "vstellar_cq_doorbell.arm_ack");
static_assert(offsetof(struct vstellar_cq_doorbell, reserved) == 0x10,
	      "vstellar_cq_doorbell.reserved");

/* SRQ doorbell record (ABI 1.1). */
struct vstellar_srq_doorbell {
	__le32 prod;		/* driver: receive WQEs posted */
	__le32 cons;		/* device: WQEs taken; slots free */
	__u8 reserved[56];
};

static_assert(sizeof(struct vstellar_srq_doorbell) == 64, "sizeof vstellar_srq_doorbell");
static_assert(offsetof(struct vstellar_srq_doorbell, prod) == 0x00, "vstellar_srq_doorbell.prod");
static_assert(offsetof(struct vstellar_srq_doorbell, cons) == 0x04, "vstellar_srq_doorbell.cons");
static_assert(offsetof(struct vstellar_srq_doorbell, reserved) == 0x08,
	      "vstellar_srq_doorbell.reserved");

/* The arm word for sequence number sn and VSTELLAR_CQ_ARM_* flags. */
static inline __u32 vstellar_cq_arm_word(__u32 sn, __u32 flags)
{
	return sn << VSTELLAR_CQ_ARM_SN_SHIFT | (flags & VSTELLAR_CQ_ARM_FLAGS_MASK);
}

/*
 * Control queue (spec §7): a request header and payload, device-readable,
 * then a response header and, on VSTELLAR_STATUS_OK, the payload.
 */

#define VSTELLAR_REQUEST_HEADER_SIZE	8
#define VSTELLAR_RESPONSE_HEADER_SIZE	8
#define VSTELLAR_MAX_REQUEST_SIZE	4096	/* device-readable bytes of a chain */
#define VSTELLAR_MAX_RESPONSE_SIZE	4096

/*
 * Opcodes, with their payloads: struct vstellar_<request> -> struct
 * vstellar_<response>, - for none.
 */
#define VSTELLAR_OP_QUERY_DEVICE	1	/* - -> device_attr */
#define VSTELLAR_OP_QUERY_PORT		2	/* query_port_req -> port_attr */
#define VSTELLAR_OP_QUERY_GID		3	/* gid_req -> gid_entry */
#define VSTELLAR_OP_ADD_GID		4	/* add_gid_req -> - */
#define VSTELLAR_OP_DEL_GID		5	/* gid_req -> - */
#define VSTELLAR_OP_ALLOC_PD		6	/* - -> handle_resp */
#define VSTELLAR_OP_DEALLOC_PD		7	/* handle_req -> - */
#define VSTELLAR_OP_CREATE_CQ		8	/* create_cq_req -> create_cq_resp */
#define VSTELLAR_OP_RESIZE_CQ		9	/* resize_cq_req -> - */
#define VSTELLAR_OP_DESTROY_CQ		10	/* handle_req -> - */
#define VSTELLAR_OP_CREATE_QP		11	/* create_qp_req -> create_qp_resp */
#define VSTELLAR_OP_MODIFY_QP		12	/* modify_qp_req -> - */
#define VSTELLAR_OP_QUERY_QP		13	/* handle_req -> query_qp_resp */
#define VSTELLAR_OP_DESTROY_QP		14	/* handle_req -> - */
#define VSTELLAR_OP_REG_MR		15	/* reg_mr_req -> reg_mr_resp */
#define VSTELLAR_OP_DEREG_MR		16	/* handle_req -> - */
#define VSTELLAR_OP_CREATE_AH		17	/* create_ah_req -> handle_resp */
#define VSTELLAR_OP_DESTROY_AH		18	/* handle_req -> - */
#define VSTELLAR_OP_SET_DOORBELL_AREA	19	/* set_doorbell_area_req -> - */
#define VSTELLAR_OP_RESET_STATE		20	/* - -> - */
#define VSTELLAR_OP_CREATE_SRQ		21	/* create_srq_req -> create_srq_resp */
#define VSTELLAR_OP_MODIFY_SRQ		22	/* modify_srq_req -> - */
#define VSTELLAR_OP_QUERY_SRQ		23	/* handle_req -> srq_attr */
#define VSTELLAR_OP_DESTROY_SRQ		24	/* handle_req -> - */

/* response_header.status. */
#define VSTELLAR_STATUS_OK			0
#define VSTELLAR_STATUS_INVALID_OPCODE		1
#define VSTELLAR_STATUS_INVALID_ARGUMENT	2
#define VSTELLAR_STATUS_RESPONSE_TOO_SMALL	3
#define VSTELLAR_STATUS_NOT_SUPPORTED		4
#define VSTELLAR_STATUS_NO_RESOURCES		5
#define VSTELLAR_STATUS_NOT_FOUND		6
#define VSTELLAR_STATUS_BUSY			7
#define VSTELLAR_STATUS_PERMISSION		8
#define VSTELLAR_STATUS_BAD_STATE		9
#define VSTELLAR_STATUS_BAD_ADDRESS		10
#define VSTELLAR_STATUS_DEVICE_ERROR		11

struct vstellar_request_header {
	__le32 opcode;	/* VSTELLAR_OP_* */
	__le32 flags;	/* reserved, 0 */
};

static_assert(sizeof(struct vstellar_request_header) == 8, "sizeof vstellar_request_header");
static_assert(offsetof(struct vstellar_request_header, opcode) == 0x00,
	      "vstellar_request_header.opcode");
static_assert(offsetof(struct vstellar_request_header, flags) == 0x04,
	      "vstellar_request_header.flags");

struct vstellar_response_header {
	__le32 status;		/* VSTELLAR_STATUS_* */
	__le32 reserved;
};

static_assert(sizeof(struct vstellar_response_header) == 8, "sizeof vstellar_response_header");
static_assert(offsetof(struct vstellar_response_header, status) == 0x00,
	      "vstellar_response_header.status");
static_assert(offsetof(struct vstellar_response_header, reserved) == 0x04,
	      "vstellar_response_header.reserved");

/*
 * Command payloads (spec §7.5, §8). Handles are never 0.
 */

/* QUERY_DEVICE */
#define VSTELLAR_DEVICE_ATTR_SIZE	160

/* device_attr.device_cap_flags. */
#define VSTELLAR_DEV_CAP_RESIZE_CQ		0x1ULL
#define VSTELLAR_DEV_CAP_RC_RNR_NAK_GEN		0x2ULL
#define VSTELLAR_DEV_CAP_PORT_ACTIVE_EVENT	0x4ULL
#define VSTELLAR_DEV_CAP_ON_DEMAND_PINNING	0x8ULL
#define VSTELLAR_DEV_CAP_MULTIPATH		0x10ULL

/* device_attr.atomic_cap. */
#define VSTELLAR_ATOMIC_NONE	0
#define VSTELLAR_ATOMIC_HCA	1
#define VSTELLAR_ATOMIC_GLOB	2

/* gid_entry.type. */
#define VSTELLAR_GID_TYPE_NONE	0
#define VSTELLAR_GID_TYPE_ROCE2	1

/* gid_entry.flags. */
#define VSTELLAR_GID_FLAG_DEVICE	0x1U
#define VSTELLAR_GID_FLAG_GUEST		0x2U

/* reg_mr_req.npages: page-list entries at most. */
#define VSTELLAR_MAX_MR_PAGES	1048576

/* QUERY_DEVICE response. */
struct vstellar_device_attr {
	__le64 fw_version;		/* major << 32 | minor << 16 | patch */
	__le64 node_guid;
	__le64 sys_image_guid;
	__le64 max_mr_size;
	__le64 page_size_cap;
	__le64 device_cap_flags;	/* VSTELLAR_DEV_CAP_* */
	__le32 vendor_id;
	__le32 vendor_part_id;
	__le32 hw_ver;
	__le32 max_qp;
	__le32 max_qp_wr;
	__le32 max_sge;
	__le32 max_sge_rd;
	__le32 max_cq;
	__le32 max_cqe;
	__le32 max_mr;
	__le32 max_pd;
	__le32 max_qp_rd_atom;
	__le32 max_qp_init_rd_atom;
	__le32 max_ah;
	__le32 max_inline_data;
	__u8 atomic_cap;		/* VSTELLAR_ATOMIC_* */
	__u8 phys_port_cnt;
	__u8 local_ca_ack_delay;
	__u8 reserved0;
	__le32 max_srq;			/* ABI 1.1 */
	__le32 max_srq_wr;
	__le32 max_srq_sge;
	__u8 reserved[36];
};

static_assert(sizeof(struct vstellar_device_attr) == 160, "sizeof vstellar_device_attr");
static_assert(offsetof(struct vstellar_device_attr, fw_version) == 0x00,
	      "vstellar_device_attr.fw_version");
static_assert(offsetof(struct vstellar_device_attr, node_guid) == 0x08,
	      "vstellar_device_attr.node_guid");
static_assert(offsetof(struct vstellar_device_attr, sys_image_guid) == 0x10,
	      "vstellar_device_attr.sys_image_guid");
static_assert(offsetof(struct vstellar_device_attr, max_mr_size) == 0x18,
	      "vstellar_device_attr.max_mr_size");
static_assert(offsetof(struct vstellar_device_attr, page_size_cap) == 0x20,
	      "vstellar_device_attr.page_size_cap");
static_assert(offsetof(struct vstellar_device_attr, device_cap_flags) == 0x28,
	      "vstellar_device_attr.device_cap_flags");
static_assert(offsetof(struct vstellar_device_attr, vendor_id) == 0x30,
	      "vstellar_device_attr.vendor_id");
static_assert(offsetof(struct vstellar_device_attr, vendor_part_id) == 0x34,
	      "vstellar_device_attr.vendor_part_id");
static_assert(offsetof(struct vstellar_device_attr, hw_ver) == 0x38, "vstellar_device_attr.hw_ver");
static_assert(offsetof(struct vstellar_device_attr, max_qp) == 0x3c, "vstellar_device_attr.max_qp");
static_assert(offsetof(struct vstellar_device_attr, max_qp_wr) == 0x40,
	      "vstellar_device_attr.max_qp_wr");
static_assert(offsetof(struct vstellar_device_attr, max_sge) == 0x44,
	      "vstellar_device_attr.max_sge");
static_assert(offsetof(struct vstellar_device_attr, max_sge_rd) == 0x48,
	      "vstellar_device_attr.max_sge_rd");
static_assert(offsetof(struct vstellar_device_attr, max_cq) == 0x4c, "vstellar_device_attr.max_cq");
static_assert(offsetof(struct vstellar_device_attr, max_cqe) == 0x50,
	      "vstellar_device_attr.max_cqe");
static_assert(offsetof(struct vstellar_device_attr, max_mr) == 0x54, "vstellar_device_attr.max_mr");
static_assert(offsetof(struct vstellar_device_attr, max_pd) == 0x58, "vstellar_device_attr.max_pd");
static_assert(offsetof(struct vstellar_device_attr, max_qp_rd_atom) == 0x5c,
	      "vstellar_device_attr.max_qp_rd_atom");
static_assert(offsetof(struct vstellar_device_attr, max_qp_init_rd_atom) == 0x60,
	      "vstellar_device_attr.max_qp_init_rd_atom");
static_assert(offsetof(struct vstellar_device_attr, max_ah) == 0x64, "vstellar_device_attr.max_ah");
static_assert(offsetof(struct vstellar_device_attr, max_inline_data) == 0x68,
	      "vstellar_device_attr.max_inline_data");
static_assert(offsetof(struct vstellar_device_attr, atomic_cap) == 0x6c,
	      "vstellar_device_attr.atomic_cap");
static_assert(offsetof(struct vstellar_device_attr, phys_port_cnt) == 0x6d,
	      "vstellar_device_attr.phys_port_cnt");
static_assert(offsetof(struct vstellar_device_attr, local_ca_ack_delay) == 0x6e,
	      "vstellar_device_attr.local_ca_ack_delay");
static_assert(offsetof(struct vstellar_device_attr, reserved0) == 0x6f,
	      "vstellar_device_attr.reserved0");
static_assert(offsetof(struct vstellar_device_attr, max_srq) == 0x70,
	      "vstellar_device_attr.max_srq");
static_assert(offsetof(struct vstellar_device_attr, max_srq_wr) == 0x74,
	      "vstellar_device_attr.max_srq_wr");
static_assert(offsetof(struct vstellar_device_attr, max_srq_sge) == 0x78,
	      "vstellar_device_attr.max_srq_sge");
static_assert(offsetof(struct vstellar_device_attr, reserved) == 0x7c,
	      "vstellar_device_attr.reserved");

/*
 * DEALLOC_PD, DESTROY_CQ, DESTROY_QP, QUERY_QP, DEREG_MR (lkey), DESTROY_AH,
 * QUERY_SRQ, DESTROY_SRQ.
 */
struct vstellar_handle_req {
	__le32 handle;
	__le32 reserved;
};

static_assert(sizeof(struct vstellar_handle_req) == 8, "sizeof vstellar_handle_req");
static_assert(offsetof(struct vstellar_handle_req, handle) == 0x00, "vstellar_handle_req.handle");
static_assert(offsetof(struct vstellar_handle_req, reserved) == 0x04,
	      "vstellar_handle_req.reserved");

/* ALLOC_PD (pdn), CREATE_AH (ahn). */
struct vstellar_handle_resp {
	__le32 handle;
	__le32 reserved;
};

static_assert(sizeof(struct vstellar_handle_resp) == 8, "sizeof vstellar_handle_resp");
static_assert(offsetof(struct vstellar_handle_resp, handle) == 0x00, "vstellar_handle_resp.handle");
static_assert(offsetof(struct vstellar_handle_resp, reserved) == 0x04,
	      "vstellar_handle_resp.reserved");

/* QUERY_PORT request; port is 1. */
struct vstellar_query_port_req {
	__le32 port;
	__le32 reserved;
};

static_assert(sizeof(struct vstellar_query_port_req) == 8, "sizeof vstellar_query_port_req");
static_assert(offsetof(struct vstellar_query_port_req, port) == 0x00,
	      "vstellar_query_port_req.port");
static_assert(offsetof(struct vstellar_query_port_req, reserved) == 0x04,
	      "vstellar_query_port_req.reserved");

/* QUERY_PORT response. */
struct vstellar_port_attr {
	__le32 state;
	__le32 max_mtu;
	__le32 active_mtu;
	__le32 gid_tbl_len;
	__le32 port_cap_flags;
	__le32 max_msg_sz;
	__le16 pkey_tbl_len;
	__u8 active_width;
	__u8 active_speed;
	__u8 phys_state;
	__u8 link_layer;
	__le16 reserved0;
	__le32 reserved[4];
};

static_assert(sizeof(struct vstellar_port_attr) == 48, "sizeof vstellar_port_attr");
static_assert(offsetof(struct vstellar_port_attr, state) == 0x00, "vstellar_port_attr.state");
static_assert(offsetof(struct vstellar_port_attr, max_mtu) == 0x04, "vstellar_port_attr.max_mtu");
static_assert(offsetof(struct vstellar_port_attr, active_mtu) == 0x08,
	      "vstellar_port_attr.active_mtu");
static_assert(offsetof(struct vstellar_port_attr, gid_tbl_len) == 0x0c,
	      "vstellar_port_attr.gid_tbl_len");
static_assert(offsetof(struct vstellar_port_attr, port_cap_flags) == 0x10,
	      "vstellar_port_attr.port_cap_flags");
static_assert(offsetof(struct vstellar_port_attr, max_msg_sz) == 0x14,
	      "vstellar_port_attr.max_msg_sz");
static_assert(offsetof(struct vstellar_port_attr, pkey_tbl_len) == 0x18,
	      "vstellar_port_attr.pkey_tbl_len");
static_assert(offsetof(struct vstellar_port_attr, active_width) == 0x1a,
	      "vstellar_port_attr.active_width");
static_assert(offsetof(struct vstellar_port_attr, active_speed) == 0x1b,
	      "vstellar_port_attr.active_speed");
static_assert(offsetof(struct vstellar_port_attr, phys_state) == 0x1c,
	      "vstellar_port_attr.phys_state");
static_assert(offsetof(struct vstellar_port_attr, link_layer) == 0x1d,
	      "vstellar_port_attr.link_layer");
static_assert(offsetof(struct vstellar_port_attr, reserved0) == 0x1e,
	      "vstellar_port_attr.reserved0");
static_assert(offsetof(struct vstellar_port_attr, reserved) == 0x20, "vstellar_port_attr.reserved");

/* QUERY_GID and DEL_GID request. */
struct vstellar_gid_req {
	__le32 port;
	__le32 index;
};

static_assert(sizeof(struct vstellar_gid_req) == 8, "sizeof vstellar_gid_req");
static_assert(offsetof(struct vstellar_gid_req, port) == 0x00, "vstellar_gid_req.port");
static_assert(offsetof(struct vstellar_gid_req, index) == 0x04, "vstellar_gid_req.index");

/* QUERY_GID response. */
struct vstellar_gid_entry {
	__u8 gid[16];
	__le32 type;
	__le32 flags;
	__le32 reserved[2];
};

static_assert(sizeof(struct vstellar_gid_entry) == 32, "sizeof vstellar_gid_entry");
static_assert(offsetof(struct vstellar_gid_entry, gid) == 0x00, "vstellar_gid_entry.gid");
static_assert(offsetof(struct vstellar_gid_entry, type) == 0x10, "vstellar_gid_entry.type");
static_assert(offsetof(struct vstellar_gid_entry, flags) == 0x14, "vstellar_gid_entry.flags");
static_assert(offsetof(struct vstellar_gid_entry, reserved) == 0x18, "vstellar_gid_entry.reserved");

/* ADD_GID request. */
struct vstellar_add_gid_req {
	__le32 port;
	__le32 index;
	__u8 gid[16];
};

static_assert(sizeof(struct vstellar_add_gid_req) == 24, "sizeof vstellar_add_gid_req");
static_assert(offsetof(struct vstellar_add_gid_req, port) == 0x00, "vstellar_add_gid_req.port");
static_assert(offsetof(struct vstellar_add_gid_req, index) == 0x04, "vstellar_add_gid_req.index");
static_assert(offsetof(struct vstellar_add_gid_req, gid) == 0x08, "vstellar_add_gid_req.gid");

/* CREATE_CQ request: entries x 32-byte CQEs at ring_addr. */
struct vstellar_create_cq_req {
	__le64 ring_addr;
	__le32 entries;
	__le32 flags;
};

static_assert(sizeof(struct vstellar_create_cq_req) == 16, "sizeof vstellar_create_cq_req");
static_assert(offsetof(struct vstellar_create_cq_req, ring_addr) == 0x00,
	      "vstellar_create_cq_req.ring_addr");
static_assert(offsetof(struct vstellar_create_cq_req, entries) == 0x08,
	      "vstellar_create_cq_req.entries");
static_assert(offsetof(struct vstellar_create_cq_req, flags) == 0x0c,
	      "vstellar_create_cq_req.flags");

/* CREATE_CQ response. */
struct vstellar_create_cq_resp {
	__le32 cqn;
	__le32 doorbell_index;
};

static_assert(sizeof(struct vstellar_create_cq_resp) == 8, "sizeof vstellar_create_cq_resp");
static_assert(offsetof(struct vstellar_create_cq_resp, cqn) == 0x00, "vstellar_create_cq_resp.cqn");
static_assert(offsetof(struct vstellar_create_cq_resp, doorbell_index) == 0x04,
	      "vstellar_create_cq_resp.doorbell_index");

/* RESIZE_CQ request. */
struct vstellar_resize_cq_req {
	__le32 cqn;
	__le32 entries;
	__le64 ring_addr;
};

static_assert(sizeof(struct vstellar_resize_cq_req) == 16, "sizeof vstellar_resize_cq_req");
static_assert(offsetof(struct vstellar_resize_cq_req, cqn) == 0x00, "vstellar_resize_cq_req.cqn");
static_assert(offsetof(struct vstellar_resize_cq_req, entries) == 0x04,
	      "vstellar_resize_cq_req.entries");
static_assert(offsetof(struct vstellar_resize_cq_req, ring_addr) == 0x08,
	      "vstellar_resize_cq_req.ring_addr");

/* CREATE_QP request. */
struct vstellar_create_qp_req {
	__le32 pdn;
	__u8 qp_type;
	__u8 sq_sig_all;
	__le16 reserved0;
	__le32 send_cqn;
	__le32 recv_cqn;
	__le32 sq_size;
	__le32 rq_size;
	__le32 max_send_sge;
	__le32 max_recv_sge;
	__le32 max_inline_data;
	__le32 srqn;
	__le64 sq_addr;
	__le64 rq_addr;
};

static_assert(sizeof(struct vstellar_create_qp_req) == 56, "sizeof vstellar_create_qp_req");
static_assert(offsetof(struct vstellar_create_qp_req, pdn) == 0x00, "vstellar_create_qp_req.pdn");
static_assert(offsetof(struct vstellar_create_qp_req, qp_type) == 0x04,
	      "vstellar_create_qp_req.qp_type");
static_assert(offsetof(struct vstellar_create_qp_req, sq_sig_all) == 0x05,
	      "vstellar_create_qp_req.sq_sig_all");
static_assert(offsetof(struct vstellar_create_qp_req, reserved0) == 0x06,
	      "vstellar_create_qp_req.reserved0");
static_assert(offsetof(struct vstellar_create_qp_req, send_cqn) == 0x08,
	      "vstellar_create_qp_req.send_cqn");
static_assert(offsetof(struct vstellar_create_qp_req, recv_cqn) == 0x0c,
	      "vstellar_create_qp_req.recv_cqn");
static_assert(offsetof(struct vstellar_create_qp_req, sq_size) == 0x10,
	      "vstellar_create_qp_req.sq_size");
static_assert(offsetof(struct vstellar_create_qp_req, rq_size) == 0x14,
	      "vstellar_create_qp_req.rq_size");
static_assert(offsetof(struct vstellar_create_qp_req, max_send_sge) == 0x18,
	      "vstellar_create_qp_req.max_send_sge");
static_assert(offsetof(struct vstellar_create_qp_req, max_recv_sge) == 0x1c,
	      "vstellar_create_qp_req.max_recv_sge");
static_assert(offsetof(struct vstellar_create_qp_req, max_inline_data) == 0x20,
	      "vstellar_create_qp_req.max_inline_data");
static_assert(offsetof(struct vstellar_create_qp_req, srqn) == 0x24, "vstellar_create_qp_req.srqn");
static_assert(offsetof(struct vstellar_create_qp_req, sq_addr) == 0x28,
	      "vstellar_create_qp_req.sq_addr");
static_assert(offsetof(struct vstellar_create_qp_req, rq_addr) == 0x30,
	      "vstellar_create_qp_req.rq_addr");

/* CREATE_QP response; use the strides it returns. */
struct vstellar_create_qp_resp {
	__le32 qpn;
	__le32 doorbell_index;
	__le32 sq_stride;
	__le32 rq_stride;
};

static_assert(sizeof(struct vstellar_create_qp_resp) == 16, "sizeof vstellar_create_qp_resp");
static_assert(offsetof(struct vstellar_create_qp_resp, qpn) == 0x00, "vstellar_create_qp_resp.qpn");
static_assert(offsetof(struct vstellar_create_qp_resp, doorbell_index) == 0x04,
	      "vstellar_create_qp_resp.doorbell_index");
static_assert(offsetof(struct vstellar_create_qp_resp, sq_stride) == 0x08,
	      "vstellar_create_qp_resp.sq_stride");
static_assert(offsetof(struct vstellar_create_qp_resp, rq_stride) == 0x0c,
	      "vstellar_create_qp_resp.rq_stride");

/* Address vector. */
struct vstellar_ah_attr {
	__u8 dgid[16];
	__le32 flow_label;
	__u8 sgid_index;
	__u8 hop_limit;
	__u8 traffic_class;
	__u8 sl;
	__u8 port;
	__u8 reserved[7];
};

static_assert(sizeof(struct vstellar_ah_attr) == 32, "sizeof vstellar_ah_attr");
static_assert(offsetof(struct vstellar_ah_attr, dgid) == 0x00, "vstellar_ah_attr.dgid");
static_assert(offsetof(struct vstellar_ah_attr, flow_label) == 0x10, "vstellar_ah_attr.flow_label");
static_assert(offsetof(struct vstellar_ah_attr, sgid_index) == 0x14, "vstellar_ah_attr.sgid_index");
static_assert(offsetof(struct vstellar_ah_attr, hop_limit) == 0x15, "vstellar_ah_attr.hop_limit");
static_assert(offsetof(struct vstellar_ah_attr, traffic_class) == 0x16,
	      "vstellar_ah_attr.traffic_class");
static_assert(offsetof(struct vstellar_ah_attr, sl) == 0x17, "vstellar_ah_attr.sl");
static_assert(offsetof(struct vstellar_ah_attr, port) == 0x18, "vstellar_ah_attr.port");
static_assert(offsetof(struct vstellar_ah_attr, reserved) == 0x19, "vstellar_ah_attr.reserved");

/* MODIFY_QP and QUERY_QP attributes. */
struct vstellar_qp_attr {
	__le32 qp_state;
	__le32 cur_qp_state;
	__le32 path_mtu;
	__le32 qp_access_flags;
	__le32 dest_qp_num;
	__le32 rq_psn;
	__le32 sq_psn;
	__le32 qkey;
	__le16 pkey_index;
	__u8 port_num;
	__u8 max_rd_atomic;
	__u8 max_dest_rd_atomic;
	__u8 min_rnr_timer;
	__u8 timeout;
	__u8 retry_cnt;
	__u8 rnr_retry;
	__u8 sq_draining;
	__le16 reserved0;
	__le32 reserved1;
	struct vstellar_ah_attr ah_attr;
};

static_assert(sizeof(struct vstellar_qp_attr) == 80, "sizeof vstellar_qp_attr");
static_assert(offsetof(struct vstellar_qp_attr, qp_state) == 0x00, "vstellar_qp_attr.qp_state");
static_assert(offsetof(struct vstellar_qp_attr, cur_qp_state) == 0x04,
	      "vstellar_qp_attr.cur_qp_state");
static_assert(offsetof(struct vstellar_qp_attr, path_mtu) == 0x08, "vstellar_qp_attr.path_mtu");
static_assert(offsetof(struct vstellar_qp_attr, qp_access_flags) == 0x0c,
	      "vstellar_qp_attr.qp_access_flags");
static_assert(offsetof(struct vstellar_qp_attr, dest_qp_num) == 0x10,
	      "vstellar_qp_attr.dest_qp_num");
static_assert(offsetof(struct vstellar_qp_attr, rq_psn) == 0x14, "vstellar_qp_attr.rq_psn");
static_assert(offsetof(struct vstellar_qp_attr, sq_psn) == 0x18, "vstellar_qp_attr.sq_psn");
static_assert(offsetof(struct vstellar_qp_attr, qkey) == 0x1c, "vstellar_qp_attr.qkey");
static_assert(offsetof(struct vstellar_qp_attr, pkey_index) == 0x20, "vstellar_qp_attr.pkey_index");
static_assert(offsetof(struct vstellar_qp_attr, port_num) == 0x22, "vstellar_qp_attr.port_num");
static_assert(offsetof(struct vstellar_qp_attr, max_rd_atomic) == 0x23,
	      "vstellar_qp_attr.max_rd_atomic");
static_assert(offsetof(struct vstellar_qp_attr, max_dest_rd_atomic) == 0x24,
	      "vstellar_qp_attr.max_dest_rd_atomic");
static_assert(offsetof(struct vstellar_qp_attr, min_rnr_timer) == 0x25,
	      "vstellar_qp_attr.min_rnr_timer");
static_assert(offsetof(struct vstellar_qp_attr, timeout) == 0x26, "vstellar_qp_attr.timeout");
static_assert(offsetof(struct vstellar_qp_attr, retry_cnt) == 0x27, "vstellar_qp_attr.retry_cnt");
static_assert(offsetof(struct vstellar_qp_attr, rnr_retry) == 0x28, "vstellar_qp_attr.rnr_retry");
static_assert(offsetof(struct vstellar_qp_attr, sq_draining) == 0x29,
	      "vstellar_qp_attr.sq_draining");
static_assert(offsetof(struct vstellar_qp_attr, reserved0) == 0x2a, "vstellar_qp_attr.reserved0");
static_assert(offsetof(struct vstellar_qp_attr, reserved1) == 0x2c, "vstellar_qp_attr.reserved1");
static_assert(offsetof(struct vstellar_qp_attr, ah_attr) == 0x30, "vstellar_qp_attr.ah_attr");

/* MODIFY_QP request; attr_mask (VSTELLAR_QP_ATTR_*) selects the fields. */
struct vstellar_modify_qp_req {
	__le32 qpn;
	__le32 attr_mask;
	struct vstellar_qp_attr attr;
};

static_assert(sizeof(struct vstellar_modify_qp_req) == 88, "sizeof vstellar_modify_qp_req");
static_assert(offsetof(struct vstellar_modify_qp_req, qpn) == 0x00, "vstellar_modify_qp_req.qpn");
static_assert(offsetof(struct vstellar_modify_qp_req, attr_mask) == 0x04,
	      "vstellar_modify_qp_req.attr_mask");
static_assert(offsetof(struct vstellar_modify_qp_req, attr) == 0x08, "vstellar_modify_qp_req.attr");

/* What a QP was created with (QUERY_QP). */
struct vstellar_qp_cap {
	__le32 pdn;
	__le32 send_cqn;
	__le32 recv_cqn;
	__le32 sq_size;
	__le32 rq_size;
	__le32 max_send_sge;
	__le32 max_recv_sge;
	__le32 max_inline_data;
	__u8 qp_type;
	__u8 sq_sig_all;
	__le16 reserved0;
	__le32 srqn;
};

static_assert(sizeof(struct vstellar_qp_cap) == 40, "sizeof vstellar_qp_cap");
static_assert(offsetof(struct vstellar_qp_cap, pdn) == 0x00, "vstellar_qp_cap.pdn");
static_assert(offsetof(struct vstellar_qp_cap, send_cqn) == 0x04, "vstellar_qp_cap.send_cqn");
static_assert(offsetof(struct vstellar_qp_cap, recv_cqn) == 0x08, "vstellar_qp_cap.recv_cqn");
static_assert(offsetof(struct vstellar_qp_cap, sq_size) == 0x0c, "vstellar_qp_cap.sq_size");
static_assert(offsetof(struct vstellar_qp_cap, rq_size) == 0x10, "vstellar_qp_cap.rq_size");
static_assert(offsetof(struct vstellar_qp_cap, max_send_sge) == 0x14,
	      "vstellar_qp_cap.max_send_sge");
static_assert(offsetof(struct vstellar_qp_cap, max_recv_sge) == 0x18,
	      "vstellar_qp_cap.max_recv_sge");
static_assert(offsetof(struct vstellar_qp_cap, max_inline_data) == 0x1c,
	      "vstellar_qp_cap.max_inline_data");
static_assert(offsetof(struct vstellar_qp_cap, qp_type) == 0x20, "vstellar_qp_cap.qp_type");
static_assert(offsetof(struct vstellar_qp_cap, sq_sig_all) == 0x21, "vstellar_qp_cap.sq_sig_all");
static_assert(offsetof(struct vstellar_qp_cap, reserved0) == 0x22, "vstellar_qp_cap.reserved0");
static_assert(offsetof(struct vstellar_qp_cap, srqn) == 0x24, "vstellar_qp_cap.srqn");

/* QUERY_QP response. */
struct vstellar_query_qp_resp {
	struct vstellar_qp_attr attr;
	struct vstellar_qp_cap cap;
};

static_assert(sizeof(struct vstellar_query_qp_resp) == 120, "sizeof vstellar_query_qp_resp");
static_assert(offsetof(struct vstellar_query_qp_resp, attr) == 0x00, "vstellar_query_qp_resp.attr");
static_assert(offsetof(struct vstellar_query_qp_resp, cap) == 0x50, "vstellar_query_qp_resp.cap");

/*
 * REG_MR request: npages 0 registers [addr, +length); else addr points
 * at npages le64 page addresses of 1 << page_shift bytes.
 */
struct vstellar_reg_mr_req {
	__le32 pdn;
	__le32 access;
	__le64 iova;
	__le64 length;
	__le64 addr;
	__le32 page_shift;
	__le32 npages;
};

static_assert(sizeof(struct vstellar_reg_mr_req) == 40, "sizeof vstellar_reg_mr_req");
static_assert(offsetof(struct vstellar_reg_mr_req, pdn) == 0x00, "vstellar_reg_mr_req.pdn");
static_assert(offsetof(struct vstellar_reg_mr_req, access) == 0x04, "vstellar_reg_mr_req.access");
static_assert(offsetof(struct vstellar_reg_mr_req, iova) == 0x08, "vstellar_reg_mr_req.iova");
static_assert(offsetof(struct vstellar_reg_mr_req, length) == 0x10, "vstellar_reg_mr_req.length");
static_assert(offsetof(struct vstellar_reg_mr_req, addr) == 0x18, "vstellar_reg_mr_req.addr");
static_assert(offsetof(struct vstellar_reg_mr_req, page_shift) == 0x20,
	      "vstellar_reg_mr_req.page_shift");
static_assert(offsetof(struct vstellar_reg_mr_req, npages) == 0x24, "vstellar_reg_mr_req.npages");

/* REG_MR response. */
struct vstellar_reg_mr_resp {
	__le32 lkey;
	__le32 rkey;
};

static_assert(sizeof(struct vstellar_reg_mr_resp) == 8, "sizeof vstellar_reg_mr_resp");
static_assert(offsetof(struct vstellar_reg_mr_resp, lkey) == 0x00, "vstellar_reg_mr_resp.lkey");
static_assert(offsetof(struct vstellar_reg_mr_resp, rkey) == 0x04, "vstellar_reg_mr_resp.rkey");

/* CREATE_AH request; the response is a vstellar_handle_resp. */
struct vstellar_create_ah_req {
	__le32 pdn;
	__le32 reserved;
	struct vstellar_ah_attr ah_attr;
};

static_assert(sizeof(struct vstellar_create_ah_req) == 40, "sizeof vstellar_create_ah_req");
static_assert(offsetof(struct vstellar_create_ah_req, pdn) == 0x00, "vstellar_create_ah_req.pdn");
static_assert(offsetof(struct vstellar_create_ah_req, reserved) == 0x04,
	      "vstellar_create_ah_req.reserved");
static_assert(offsetof(struct vstellar_create_ah_req, ah_attr) == 0x08,
	      "vstellar_create_ah_req.ah_attr");

/* SET_DOORBELL_AREA request (guest-RAM doorbells only). */
struct vstellar_set_doorbell_area_req {
	__le64 addr;
	__le64 length;
};

static_assert(sizeof(struct vstellar_set_doorbell_area_req) == 16,
	      "sizeof vstellar_set_doorbell_area_req");
static_assert(offsetof(struct vstellar_set_doorbell_area_req, addr) == 0x00,
	      "vstellar_set_doorbell_area_req.addr");
static_assert(offsetof(struct vstellar_set_doorbell_area_req, length) == 0x08,
	      "vstellar_set_doorbell_area_req.length");

/* CREATE_SRQ request: size receive WQEs at ring_addr. */
struct vstellar_create_srq_req {
	__le32 pdn;
	__le32 size;
	__le32 max_sge;
	__le32 limit;
	__le64 ring_addr;
};

static_assert(sizeof(struct vstellar_create_srq_req) == 24, "sizeof vstellar_create_srq_req");
static_assert(offsetof(struct vstellar_create_srq_req, pdn) == 0x00, "vstellar_create_srq_req.pdn");
static_assert(offsetof(struct vstellar_create_srq_req, size) == 0x04,
	      "vstellar_create_srq_req.size");
static_assert(offsetof(struct vstellar_create_srq_req, max_sge) == 0x08,
	      "vstellar_create_srq_req.max_sge");
static_assert(offsetof(struct vstellar_create_srq_req, limit) == 0x0c,
	      "vstellar_create_srq_req.limit");
static_assert(offsetof(struct vstellar_create_srq_req, ring_addr) == 0x10,
	      "vstellar_create_srq_req.ring_addr");

/* CREATE_SRQ response; use the stride it returns. */
struct vstellar_create_srq_resp {
	__le32 srqn;
	__le32 doorbell_index;
	__le32 stride;
	__le32 reserved;
};

static_assert(sizeof(struct vstellar_create_srq_resp) == 16, "sizeof vstellar_create_srq_resp");
static_assert(offsetof(struct vstellar_create_srq_resp, srqn) == 0x00,
	      "vstellar_create_srq_resp.srqn");
static_assert(offsetof(struct vstellar_create_srq_resp, doorbell_index) == 0x04,
	      "vstellar_create_srq_resp.doorbell_index");
static_assert(offsetof(struct vstellar_create_srq_resp, stride) == 0x08,
	      "vstellar_create_srq_resp.stride");
static_assert(offsetof(struct vstellar_create_srq_resp, reserved) == 0x0c,
	      "vstellar_create_srq_resp.reserved");

/* MODIFY_SRQ request; attr_mask (VSTELLAR_SRQ_ATTR_*) selects the fields. */
struct vstellar_modify_srq_req {
	__le32 srqn;
	__le32 attr_mask;
	__le32 max_wr;
	__le32 limit;
};

static_assert(sizeof(struct vstellar_modify_srq_req) == 16, "sizeof vstellar_modify_srq_req");
static_assert(offsetof(struct vstellar_modify_srq_req, srqn) == 0x00,
	      "vstellar_modify_srq_req.srqn");
static_assert(offsetof(struct vstellar_modify_srq_req, attr_mask) == 0x04,
	      "vstellar_modify_srq_req.attr_mask");
static_assert(offsetof(struct vstellar_modify_srq_req, max_wr) == 0x08,
	      "vstellar_modify_srq_req.max_wr");
static_assert(offsetof(struct vstellar_modify_srq_req, limit) == 0x0c,
	      "vstellar_modify_srq_req.limit");

/* QUERY_SRQ response. */
struct vstellar_srq_attr {
	__le32 pdn;
	__le32 max_wr;
	__le32 max_sge;
	__le32 limit;
};

static_assert(sizeof(struct vstellar_srq_attr) == 16, "sizeof vstellar_srq_attr");
static_assert(offsetof(struct vstellar_srq_attr, pdn) == 0x00, "vstellar_srq_attr.pdn");
static_assert(offsetof(struct vstellar_srq_attr, max_wr) == 0x04, "vstellar_srq_attr.max_wr");
static_assert(offsetof(struct vstellar_srq_attr, max_sge) == 0x08, "vstellar_srq_attr.max_sge");
static_assert(offsetof(struct vstellar_srq_attr, limit) == 0x0c, "vstellar_srq_attr.limit");

/*
 * Verbs values (the IBV_* values where verbs has the concept)
 */

/* create_qp_req.qp_type; UD is reserved (NOT_SUPPORTED). */
#define VSTELLAR_QP_TYPE_RC	2
#define VSTELLAR_QP_TYPE_UD	4

/* QP states (qp_attr.qp_state, spec §12). */
#define VSTELLAR_QP_STATE_RESET	0
#define VSTELLAR_QP_STATE_INIT	1
#define VSTELLAR_QP_STATE_RTR	2
#define VSTELLAR_QP_STATE_RTS	3
#define VSTELLAR_QP_STATE_SQD	4
#define VSTELLAR_QP_STATE_SQE	5
#define VSTELLAR_QP_STATE_ERR	6

/* modify_qp_req.attr_mask. */
#define VSTELLAR_QP_ATTR_STATE			0x1U
#define VSTELLAR_QP_ATTR_CUR_STATE		0x2U
#define VSTELLAR_QP_ATTR_EN_SQD_ASYNC_NOTIF	0x4U
#define VSTELLAR_QP_ATTR_ACCESS_FLAGS		0x8U
#define VSTELLAR_QP_ATTR_PKEY_INDEX		0x10U
#define VSTELLAR_QP_ATTR_PORT			0x20U
#define VSTELLAR_QP_ATTR_QKEY			0x40U
#define VSTELLAR_QP_ATTR_AV			0x80U
#define VSTELLAR_QP_ATTR_PATH_MTU		0x100U
#define VSTELLAR_QP_ATTR_TIMEOUT		0x200U
#define VSTELLAR_QP_ATTR_RETRY_CNT		0x400U
#define VSTELLAR_QP_ATTR_RNR_RETRY		0x800U
#define VSTELLAR_QP_ATTR_RQ_PSN			0x1000U
#define VSTELLAR_QP_ATTR_MAX_QP_RD_ATOMIC	0x2000U
#define VSTELLAR_QP_ATTR_ALT_PATH		0x4000U
#define VSTELLAR_QP_ATTR_MIN_RNR_TIMER		0x8000U
#define VSTELLAR_QP_ATTR_SQ_PSN			0x10000U
#define VSTELLAR_QP_ATTR_MAX_DEST_RD_ATOMIC	0x20000U
#define VSTELLAR_QP_ATTR_PATH_MIG_STATE		0x40000U
#define VSTELLAR_QP_ATTR_CAP			0x80000U
#define VSTELLAR_QP_ATTR_DEST_QPN		0x100000U
#define VSTELLAR_QP_ATTR_ALL			0x1fffffU

/* modify_srq_req.attr_mask; MAX_WR (resize) is NOT_SUPPORTED. */
#define VSTELLAR_SRQ_ATTR_MAX_WR	0x1U
#define VSTELLAR_SRQ_ATTR_LIMIT		0x2U
#define VSTELLAR_SRQ_ATTR_ALL		0x3U

/*
 * Access flags (reg_mr_req.access, qp_attr.qp_access_flags); local read is
 * always allowed.
 */
#define VSTELLAR_ACCESS_LOCAL_WRITE	0x1U
#define VSTELLAR_ACCESS_REMOTE_WRITE	0x2U
#define VSTELLAR_ACCESS_REMOTE_READ	0x4U
#define VSTELLAR_ACCESS_REMOTE_ATOMIC	0x8U
#define VSTELLAR_ACCESS_ALL		0xfU

/* MTU (qp_attr.path_mtu, port_attr.max_mtu and active_mtu). */
#define VSTELLAR_MTU_256	1
#define VSTELLAR_MTU_512	2
#define VSTELLAR_MTU_1024	3
#define VSTELLAR_MTU_2048	4
#define VSTELLAR_MTU_4096	5

/* port_attr.state. */
#define VSTELLAR_PORT_DOWN	1
#define VSTELLAR_PORT_INIT	2
#define VSTELLAR_PORT_ARMED	3
#define VSTELLAR_PORT_ACTIVE	4

/* port_attr.link_layer. */
#define VSTELLAR_LINK_LAYER_ETHERNET	2

/*
 * Work queues and completion queues (spec §10, §13). A send WQE slot is the
 * header and then num_sge SGEs or inline_len bytes; a receive WQE slot the
 * header and num_sge SGEs. Slot strides come from CREATE_QP's response.
 */

#define VSTELLAR_SGE_SIZE		16
#define VSTELLAR_SEND_WQE_HEADER_SIZE	64
#define VSTELLAR_RECV_WQE_HEADER_SIZE	16
#define VSTELLAR_CQE_SIZE		32

/* send_wqe.opcode. */
#define VSTELLAR_WR_RDMA_WRITE		0
#define VSTELLAR_WR_RDMA_WRITE_WITH_IMM	1
#define VSTELLAR_WR_SEND		2
#define VSTELLAR_WR_SEND_WITH_IMM	3
#define VSTELLAR_WR_RDMA_READ		4
#define VSTELLAR_WR_ATOMIC_CMP_SWAP	5
#define VSTELLAR_WR_ATOMIC_FETCH_ADD	6

/* send_wqe.send_flags. */
#define VSTELLAR_SEND_FENCE	0x1U
#define VSTELLAR_SEND_SIGNALED	0x2U
#define VSTELLAR_SEND_SOLICITED	0x4U
#define VSTELLAR_SEND_INLINE	0x8U

/* cqe.opcode. */
#define VSTELLAR_WC_SEND		0
#define VSTELLAR_WC_RDMA_WRITE		1
#define VSTELLAR_WC_RDMA_READ		2
#define VSTELLAR_WC_COMP_SWAP		3
#define VSTELLAR_WC_FETCH_ADD		4
#define VSTELLAR_WC_RECV		128
#define VSTELLAR_WC_RECV_RDMA_WITH_IMM	129

/* cqe.wc_flags. */
#define VSTELLAR_WC_WITH_IMM	0x2U

/* cqe.status. */
#define VSTELLAR_WC_SUCCESS		0
#define VSTELLAR_WC_LOC_LEN_ERR		1
#define VSTELLAR_WC_LOC_QP_OP_ERR	2
#define VSTELLAR_WC_LOC_PROT_ERR	4
#define VSTELLAR_WC_WR_FLUSH_ERR	5
#define VSTELLAR_WC_BAD_RESP_ERR	7
#define VSTELLAR_WC_LOC_ACCESS_ERR	8
#define VSTELLAR_WC_REM_INV_REQ_ERR	9
#define VSTELLAR_WC_REM_ACCESS_ERR	10
#define VSTELLAR_WC_REM_OP_ERR		11
#define VSTELLAR_WC_RETRY_EXC_ERR	12
#define VSTELLAR_WC_RNR_RETRY_EXC_ERR	13
#define VSTELLAR_WC_FATAL_ERR		19
#define VSTELLAR_WC_GENERAL_ERR		21

/* Scatter/gather element. */
struct vstellar_sge {
	__le64 addr;	/* IOVA within the MR */
	__le32 length;
	__le32 lkey;
};

static_assert(sizeof(struct vstellar_sge) == 16, "sizeof vstellar_sge");
static_assert(offsetof(struct vstellar_sge, addr) == 0x00, "vstellar_sge.addr");
static_assert(offsetof(struct vstellar_sge, length) == 0x08, "vstellar_sge.length");
static_assert(offsetof(struct vstellar_sge, lkey) == 0x0c, "vstellar_sge.lkey");

/* Send WQE header; num_sge SGEs or inline_len bytes follow at 0x40. */
struct vstellar_send_wqe {
	__le64 wr_id;
	__u8 opcode;		/* VSTELLAR_WR_* */
	__u8 send_flags;	/* VSTELLAR_SEND_* */
	__le16 num_sge;		/* 0 with INLINE */
	__le32 imm_data;	/* WITH_IMM opcodes, as written */
	__le64 remote_addr;
	__le32 rkey;
	__le32 inline_len;	/* 0 without INLINE */
	__le64 compare_add;
	__le64 swap;
	__le32 ah;		/* UD only, reserved */
	__le32 remote_qpn;	/* UD only, reserved */
	__le32 remote_qkey;	/* UD only, reserved */
	__le32 reserved;
};

static_assert(sizeof(struct vstellar_send_wqe) == 64, "sizeof vstellar_send_wqe");
static_assert(offsetof(struct vstellar_send_wqe, wr_id) == 0x00, "vstellar_send_wqe.wr_id");
static_assert(offsetof(struct vstellar_send_wqe, opcode) == 0x08, "vstellar_send_wqe.opcode");
static_assert(offsetof(struct vstellar_send_wqe, send_flags) == 0x09,
	      "vstellar_send_wqe.send_flags");
static_assert(offsetof(struct vstellar_send_wqe, num_sge) == 0x0a, "vstellar_send_wqe.num_sge");
static_assert(offsetof(struct vstellar_send_wqe, imm_data) == 0x0c, "vstellar_send_wqe.imm_data");
static_assert(offsetof(struct vstellar_send_wqe, remote_addr) == 0x10,
	      "vstellar_send_wqe.remote_addr");
static_assert(offsetof(struct vstellar_send_wqe, rkey) == 0x18, "vstellar_send_wqe.rkey");
static_assert(offsetof(struct vstellar_send_wqe, inline_len) == 0x1c,
	      "vstellar_send_wqe.inline_len");
static_assert(offsetof(struct vstellar_send_wqe, compare_add) == 0x20,
	      "vstellar_send_wqe.compare_add");
static_assert(offsetof(struct vstellar_send_wqe, swap) == 0x28, "vstellar_send_wqe.swap");
static_assert(offsetof(struct vstellar_send_wqe, ah) == 0x30, "vstellar_send_wqe.ah");
static_assert(offsetof(struct vstellar_send_wqe, remote_qpn) == 0x34,
	      "vstellar_send_wqe.remote_qpn");
static_assert(offsetof(struct vstellar_send_wqe, remote_qkey) == 0x38,
	      "vstellar_send_wqe.remote_qkey");
static_assert(offsetof(struct vstellar_send_wqe, reserved) == 0x3c, "vstellar_send_wqe.reserved");

/* Receive WQE header; num_sge SGEs follow. */
struct vstellar_recv_wqe {
	__le64 wr_id;
	__le16 num_sge;
	__le16 reserved0;
	__le32 reserved1;
};

static_assert(sizeof(struct vstellar_recv_wqe) == 16, "sizeof vstellar_recv_wqe");
static_assert(offsetof(struct vstellar_recv_wqe, wr_id) == 0x00, "vstellar_recv_wqe.wr_id");
static_assert(offsetof(struct vstellar_recv_wqe, num_sge) == 0x08, "vstellar_recv_wqe.num_sge");
static_assert(offsetof(struct vstellar_recv_wqe, reserved0) == 0x0a, "vstellar_recv_wqe.reserved0");
static_assert(offsetof(struct vstellar_recv_wqe, reserved1) == 0x0c, "vstellar_recv_wqe.reserved1");

/* Completion queue entry, device-written. */
struct vstellar_cqe {
	__le64 wr_id;
	__u8 status;		/* VSTELLAR_WC_* status */
	__u8 opcode;		/* VSTELLAR_WC_* opcode */
	__le16 wc_flags;	/* VSTELLAR_WC_WITH_IMM */
	__le32 byte_len;
	__le32 imm_data;
	__le32 qp_num;
	__le32 src_qp;
	__le32 vendor_err;
};

static_assert(sizeof(struct vstellar_cqe) == 32, "sizeof vstellar_cqe");
static_assert(offsetof(struct vstellar_cqe, wr_id) == 0x00, "vstellar_cqe.wr_id");
static_assert(offsetof(struct vstellar_cqe, status) == 0x08, "vstellar_cqe.status");
static_assert(offsetof(struct vstellar_cqe, opcode) == 0x09, "vstellar_cqe.opcode");
static_assert(offsetof(struct vstellar_cqe, wc_flags) == 0x0a, "vstellar_cqe.wc_flags");
static_assert(offsetof(struct vstellar_cqe, byte_len) == 0x0c, "vstellar_cqe.byte_len");
static_assert(offsetof(struct vstellar_cqe, imm_data) == 0x10, "vstellar_cqe.imm_data");
static_assert(offsetof(struct vstellar_cqe, qp_num) == 0x14, "vstellar_cqe.qp_num");
static_assert(offsetof(struct vstellar_cqe, src_qp) == 0x18, "vstellar_cqe.src_qp");
static_assert(offsetof(struct vstellar_cqe, vendor_err) == 0x1c, "vstellar_cqe.vendor_err");

/*
 * Slot strides (spec §10.5): the header plus the larger of the SGEs and the
 * inline data, rounded up to a power of two. CREATE_QP needs rings of
 * these strides and returns the strides the device uses.
 */
static inline __u64 vstellar_wqe_stride(__u64 bytes)
{
	__u64 stride = 1;

	while (stride < bytes)
		stride <<= 1;
	return stride;
}

static inline __u64 vstellar_send_wqe_stride(__u32 max_sge, __u32 max_inline)
{
	__u64 payload = (__u64)max_sge * VSTELLAR_SGE_SIZE;

	if (max_inline > payload)
		payload = max_inline;
	return vstellar_wqe_stride(VSTELLAR_SEND_WQE_HEADER_SIZE + payload);
}

static inline __u64 vstellar_recv_wqe_stride(__u32 max_sge)
{
	__u64 payload = (__u64)max_sge * VSTELLAR_SGE_SIZE;

	return vstellar_wqe_stride(VSTELLAR_RECV_WQE_HEADER_SIZE + payload);
}

/*
 * Asynchronous events on VSTELLAR_QUEUE_EVENT (spec §11)
 */

#define VSTELLAR_EVENT_SIZE	16

/* event.type. */
#define VSTELLAR_EVENT_CQ_COMP		1
#define VSTELLAR_EVENT_CQ_ERR		2
#define VSTELLAR_EVENT_QP_FATAL		3
#define VSTELLAR_EVENT_QP_REQ_ERR	4
#define VSTELLAR_EVENT_QP_ACCESS_ERR	5
#define VSTELLAR_EVENT_SQ_DRAINED	6
#define VSTELLAR_EVENT_PORT_ACTIVE	7
#define VSTELLAR_EVENT_PORT_ERR		8
#define VSTELLAR_EVENT_GID_CHANGE	9
#define VSTELLAR_EVENT_DEVICE_FATAL	10
#define VSTELLAR_EVENT_SRQ_LIMIT	11
#define VSTELLAR_EVENT_SRQ_ERR		12
#define VSTELLAR_EVENT_QP_LAST_WQE	13

/* One event per buffer; the device writes VSTELLAR_EVENT_SIZE bytes. */
struct vstellar_event {
	__le32 type;	/* VSTELLAR_EVENT_* */
	__le32 handle;	/* QPN, CQN or port */
	__le32 info;	/* QP events: the VSTELLAR_WC_* status */
	__le32 dropped;	/* events lost before this one */
};

static_assert(sizeof(struct vstellar_event) == 16, "sizeof vstellar_event");
static_assert(offsetof(struct vstellar_event, type) == 0x00, "vstellar_event.type");
static_assert(offsetof(struct vstellar_event, handle) == 0x04, "vstellar_event.handle");
static_assert(offsetof(struct vstellar_event, info) == 0x08, "vstellar_event.info");
static_assert(offsetof(struct vstellar_event, dropped) == 0x0c, "vstellar_event.dropped");

#endif /* VSTELLAR_DEV_H */
