/* SPDX-License-Identifier: GPL-2.0 */
/*
 * vstellar: Linux driver for the vStellar paravirtual RDMA device.
 *
 * The device (docs/spec.md) is a virtio device with three virtqueues, all
 * slow path: commands, asynchronous events and a bare wake-up kick. Rings
 * live in guest memory, doorbells in a shared-memory region (or, as a
 * fallback, in guest RAM), so user space posts and polls without a system
 * call. The kernel's part is control: objects, ring memory, mappings and
 * events.
 */
#ifndef VSTELLAR_H
#define VSTELLAR_H

#include <linux/completion.h>
#include <linux/kref.h>
#include <linux/list.h>
#include <linux/mutex.h>
#include <linux/spinlock.h>
#include <linux/types.h>
#include <linux/virtio.h>
#include <linux/virtio_config.h>
#include <linux/xarray.h>
#include <rdma/ib_verbs.h>

#include "vstellar-dev.h"

#include "vstellar-abi.h"

#define DRV_NAME "vstellar"

/* The device takes whole rings; larger ones are refused with -ENOMEM. */
#define VSTELLAR_MAX_RING_SIZE (4UL << 20)

/* Event buffers kept posted on the event queue. */
#define VSTELLAR_EVENT_BUFS 64

extern unsigned int vstellar_cmd_timeout_ms;

/* Config space, host endian, as read and validated. */
struct vstellar_cfg {
	u32 abi_version;
	u32 status;
	u64 node_guid;
	u64 max_mr_size;
	u64 page_size_cap;
	u32 max_qp;
	u32 max_cq;
	u32 max_mr;
	u32 max_pd;
	u32 max_ah;
	u32 max_qp_wr;
	u32 max_cqe;
	u32 max_sge;
	u32 max_inline_data;
	u32 max_qp_rd_atom;
	u32 max_gid;
	u32 max_srq;		/* 0 before ABI 1.1: no SRQs */
	u32 max_srq_wr;
	u32 max_srq_sge;
	u8 phys_port_cnt;
	u8 doorbell_shmid;
	u16 doorbell_record_size;
	u32 doorbell_page_size;
	u32 doorbell_pages;
	u32 doorbell_records_offset;
	u32 doorbell_records;
};

/* Where user space kicks the wake-up queue (spec §6.6). */
struct vstellar_notify {
	phys_addr_t page;	/* page holding the register */
	u32 offset;		/* of the register in that page */
};

/*
 * Memory the device reads or writes on its own (rings), or may still touch
 * after a command timed out. Reference counted: the owning object holds one
 * reference, each mmap entry another; a device that stopped answering gets
 * the owner's reference (vstellar_bury) until it has been reset.
 */
struct vstellar_buf {
	struct kref ref;
	void *va;
	size_t size;		/* page aligned */
	struct list_head grave;
};

struct vstellar_dev {
	struct ib_device ibdev;
	struct virtio_device *vdev;
	struct device *dma_dev;
	struct vstellar_cfg cfg;

	/* control queue: one command at a time */
	struct virtqueue *ctrl_vq;
	struct mutex cmd_lock;		/* serialises commands */
	struct completion cmd_done;
	void *cmd_req;
	void *cmd_resp;
	bool dead;			/* a command timed out */

	/* event queue */
	struct virtqueue *event_vq;
	spinlock_t event_lock;		/* event_vq */
	struct vstellar_event *event_bufs;
	bool events_on;
	atomic_t events_unknown;

	/* doorbells */
	bool db_shmem;			/* else the guest-RAM area below */
	phys_addr_t db_phys;
	size_t db_size;
	void *db_area;			/* guest-RAM fallback */

	/* wake-up register (IDLE_WAKEUP) */
	bool wakeup;
	struct vstellar_notify notify;

	/* QUERY_DEVICE and QUERY_PORT, read at probe */
	struct ib_device_attr attr;
	struct vstellar_port_attr port;
	union ib_gid gid0;		/* the device's own GID */
	u16 lid;

	/* objects by number, for events; modified with interrupts off */
	struct xarray cqs;
	struct xarray qps;
	struct xarray srqs;

	/* what must outlive a device that stopped answering */
	spinlock_t grave_lock;
	struct list_head grave_bufs;
	struct list_head grave_mrs;
};

static inline struct vstellar_dev *to_vdev(struct ib_device *ibdev)
{
	return container_of(ibdev, struct vstellar_dev, ibdev);
}

enum vstellar_mmap_type {
	VSTELLAR_MMAP_DB_SHMEM,		/* shared-memory doorbell region */
	VSTELLAR_MMAP_DB_RAM,		/* guest-RAM doorbell area */
	VSTELLAR_MMAP_NOTIFY,		/* page of the wake-up register */
	VSTELLAR_MMAP_RING,		/* a CQ, SQ or RQ ring */
};

struct vstellar_mmap_entry {
	struct rdma_user_mmap_entry rdma_entry;
	enum vstellar_mmap_type type;
	phys_addr_t phys;
	struct vstellar_buf *buf;	/* RING: a reference of its own */
};

struct vstellar_ucontext {
	struct ib_ucontext ibuctx;
	struct rdma_user_mmap_entry *db_entry;
	struct rdma_user_mmap_entry *notify_entry;
};

struct vstellar_pd {
	struct ib_pd ibpd;
	u32 pdn;
};

struct vstellar_ah {
	struct ib_ah ibah;
	u32 ahn;
};

struct vstellar_cq {
	struct ib_cq ibcq;
	u32 cqn;
	u32 entries;
	struct vstellar_buf *ring;
	struct rdma_user_mmap_entry *ring_entry;
};

struct vstellar_qp {
	struct ib_qp ibqp;
	u32 qpn;
	u32 sq_size;
	u32 rq_size;
	u32 sq_stride;
	u32 rq_stride;
	u32 max_send_sge;
	u32 max_recv_sge;
	u32 max_inline;
	bool sig_all;
	struct vstellar_buf *sq;
	struct vstellar_buf *rq;
	struct rdma_user_mmap_entry *sq_entry;
	struct rdma_user_mmap_entry *rq_entry;
};

struct vstellar_srq {
	struct ib_srq ibsrq;
	u32 srqn;
	u32 size;
	u32 stride;
	u32 max_sge;
	struct vstellar_buf *ring;
	struct rdma_user_mmap_entry *ring_entry;
};

struct vstellar_mr {
	struct ib_mr ibmr;
	struct ib_umem *umem;
	struct list_head grave;
};

static inline struct vstellar_ucontext *to_vuctx(struct ib_ucontext *c)
{
	return container_of(c, struct vstellar_ucontext, ibuctx);
}

static inline struct vstellar_pd *to_vpd(struct ib_pd *pd)
{
	return container_of(pd, struct vstellar_pd, ibpd);
}

static inline struct vstellar_ah *to_vah(struct ib_ah *ah)
{
	return container_of(ah, struct vstellar_ah, ibah);
}

static inline struct vstellar_cq *to_vcq(struct ib_cq *cq)
{
	return container_of(cq, struct vstellar_cq, ibcq);
}

static inline struct vstellar_qp *to_vqp(struct ib_qp *qp)
{
	return container_of(qp, struct vstellar_qp, ibqp);
}

static inline struct vstellar_srq *to_vsrq(struct ib_srq *srq)
{
	return container_of(srq, struct vstellar_srq, ibsrq);
}

static inline struct vstellar_mr *to_vmr(struct ib_mr *mr)
{
	return container_of(mr, struct vstellar_mr, ibmr);
}

static inline struct vstellar_mmap_entry *
to_vmentry(struct rdma_user_mmap_entry *e)
{
	return container_of(e, struct vstellar_mmap_entry, rdma_entry);
}

/* vstellar_cmd.c */
int vstellar_cmd_init(struct vstellar_dev *dev);
void vstellar_cmd_free(struct vstellar_dev *dev);
void vstellar_ctrl_done(struct virtqueue *vq);
int vstellar_cmd(struct vstellar_dev *dev, u32 op, const void *req,
		 size_t req_len, void *resp, size_t resp_len);
int vstellar_destroy_cmd(struct vstellar_dev *dev, u32 op, u32 handle);
void vstellar_bury(struct vstellar_dev *dev, struct vstellar_buf *buf);
void vstellar_free_graves(struct vstellar_dev *dev);
struct vstellar_buf *vstellar_buf_alloc(size_t size);
void vstellar_buf_put(struct vstellar_buf *buf);

/* vstellar_event.c */
int vstellar_event_init(struct vstellar_dev *dev);
void vstellar_event_free(struct vstellar_dev *dev);
void vstellar_event_done(struct virtqueue *vq);

/* vstellar_doorbell.c */
int vstellar_find_notify(struct virtio_device *vdev,
			 struct vstellar_notify *out, bool probing);
int vstellar_doorbell_init(struct vstellar_dev *dev);
void vstellar_doorbell_free(struct vstellar_dev *dev);

/* vstellar_verbs.c */
int vstellar_query_device(struct ib_device *ibdev,
			  struct ib_device_attr *props, struct ib_udata *udata);
int vstellar_query_port(struct ib_device *ibdev, u32 port,
			struct ib_port_attr *props);
int vstellar_get_port_immutable(struct ib_device *ibdev, u32 port,
				struct ib_port_immutable *immutable);
enum rdma_link_layer vstellar_get_link_layer(struct ib_device *ibdev,
					     u32 port);
int vstellar_query_gid(struct ib_device *ibdev, u32 port, int index,
		       union ib_gid *gid);
int vstellar_query_pkey(struct ib_device *ibdev, u32 port, u16 index,
			u16 *pkey);
void vstellar_get_fw_str(struct ib_device *ibdev, char *str);
int vstellar_alloc_ucontext(struct ib_ucontext *uctx, struct ib_udata *udata);
void vstellar_dealloc_ucontext(struct ib_ucontext *uctx);
void vstellar_disassociate_ucontext(struct ib_ucontext *uctx);
int vstellar_mmap(struct ib_ucontext *uctx, struct vm_area_struct *vma);
void vstellar_mmap_free(struct rdma_user_mmap_entry *rentry);
struct rdma_user_mmap_entry *
vstellar_insert_ring(struct ib_ucontext *uctx, struct vstellar_buf *buf,
		     u64 *key);
int vstellar_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata);
int vstellar_dealloc_pd(struct ib_pd *ibpd, struct ib_udata *udata);
int vstellar_ah_attr_to_dev(struct vstellar_dev *dev,
			    const struct rdma_ah_attr *ah,
			    struct vstellar_ah_attr *out);
int vstellar_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init_attr,
		       struct ib_udata *udata);
int vstellar_destroy_ah(struct ib_ah *ibah, u32 flags);

/* vstellar_cq.c */
int vstellar_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
		       struct uverbs_attr_bundle *attrs);
int vstellar_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata);
void vstellar_cq_event(struct vstellar_dev *dev, u32 type, u32 cqn);

/* vstellar_qp.c */
u32 vstellar_rq_stride(u32 max_sge);
int vstellar_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init,
			struct ib_udata *udata);
int vstellar_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
			enum ib_srq_attr_mask mask, struct ib_udata *udata);
int vstellar_query_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr);
int vstellar_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata);
void vstellar_srq_event(struct vstellar_dev *dev, u32 type, u32 srqn);
int vstellar_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init_attr,
		       struct ib_udata *udata);
int vstellar_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr,
		       int attr_mask, struct ib_udata *udata);
int vstellar_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr,
		      int attr_mask, struct ib_qp_init_attr *init_attr);
int vstellar_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata);
void vstellar_qp_event(struct vstellar_dev *dev, u32 type, u32 qpn);

/* vstellar_mr.c */
#ifdef VSTELLAR_REG_MR_DMAH
struct ib_mr *vstellar_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length,
				   u64 virt_addr, int access,
				   struct ib_dmah *dmah,
				   struct ib_udata *udata);
#else
struct ib_mr *vstellar_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length,
				   u64 virt_addr, int access,
				   struct ib_udata *udata);
#endif
int vstellar_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata);
void vstellar_free_mr(struct vstellar_mr *mr);

#endif /* VSTELLAR_H */
