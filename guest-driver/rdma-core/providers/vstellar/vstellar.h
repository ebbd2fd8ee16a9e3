/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * libvstellar: user-space provider for the vStellar paravirtual RDMA device.
 *
 * The kernel driver creates every object; this library maps what it hands
 * back (the doorbell region, the wake-up register, the CQ and WQ rings) and
 * then posts, polls and arms CQs with plain memory accesses, following the
 * device ABI (docs/spec.md, vstellar-dev.h).
 */
#ifndef __VSTELLAR_H__
#define __VSTELLAR_H__

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <infiniband/driver.h>
#include <util/util.h>

#include <rdma/vstellar-dev.h>
#include "vstellar-abi.h"

struct vstellar_device {
	struct verbs_device ibv_dev;
};

struct vstellar_context {
	struct verbs_context ibv_ctx;
	uint32_t flags;			/* VSTELLAR_UCTX_* */
	uint32_t max_inline_data;

	/* The doorbell region: device page, then one record per QP, CQ, SRQ. */
	uint8_t *db;
	size_t db_len;
	uint32_t db_records_offset;
	uint32_t db_record_size;
	uint32_t db_records;
	const __le32 *engine_flags;

	/* The wake-up register (spec 6.6), NULL when not mapped. */
	void *notify_page;
	size_t notify_len;
	void *notify_reg;
	uint16_t notify_value;
};

struct vstellar_cq {
	struct ibv_cq ibv_cq;
	pthread_spinlock_t lock;
	uint32_t cqn;
	const struct vstellar_cqe *ring;
	size_t ring_len;
	uint32_t entries;		/* a power of two */
	uint32_t cons;			/* CQEs consumed, free-running */
	uint32_t arm_sn;		/* last arm sequence number written */
	struct vstellar_cq_doorbell *rec;
	bool broken;			/* the device broke the ring protocol */
};

/* One work queue: a ring in kernel memory mapped here, and its counters. */
struct vstellar_wq {
	pthread_spinlock_t lock;
	uint8_t *ring;
	size_t ring_len;
	uint32_t size;			/* slots, a power of two */
	uint32_t stride;		/* bytes per slot */
	uint32_t max_sge;
	uint32_t prod;			/* WQEs posted, free-running */
	uint32_t cons;			/* last consumer index read */
	__le32 *prod_db;		/* in the QP's doorbell record */
	const __le32 *cons_db;
};

struct vstellar_qp {
	struct verbs_qp vqp;
	uint32_t qpn;
	uint32_t max_inline;
	struct vstellar_qp_doorbell *rec;
	struct vstellar_wq sq;
	struct vstellar_wq rq;		/* not mapped on an SRQ */
	bool on_srq;

	/* ibv_wr_* session state, under sq.lock from wr_start on. */
	int wr_err;
	uint32_t wr_start_prod;
	struct vstellar_send_wqe *wr_cur;
	bool wr_need_atomic_sge;
};

/* A shared receive queue (device ABI 1.1): one ring for many QPs. */
struct vstellar_srq {
	struct verbs_srq vsrq;
	uint32_t srqn;
	struct vstellar_srq_doorbell *rec;
	struct vstellar_wq wq;
};

static inline struct vstellar_context *to_vctx(struct ibv_context *ibctx)
{
	return container_of(ibctx, struct vstellar_context, ibv_ctx.context);
}

static inline struct vstellar_cq *to_vcq(struct ibv_cq *ibcq)
{
	return container_of(ibcq, struct vstellar_cq, ibv_cq);
}

static inline struct vstellar_qp *to_vqp(struct ibv_qp *ibqp)
{
	return container_of(ibqp, struct vstellar_qp, vqp.qp);
}

static inline struct vstellar_srq *to_vsrq(struct ibv_srq *ibsrq)
{
	return container_of(ibsrq, struct vstellar_srq, vsrq.srq);
}

static inline struct vstellar_qp *qpx_to_vqp(struct ibv_qp_ex *qpx)
{
	return container_of(qpx, struct vstellar_qp, vqp.qp_ex);
}

/*
 * Device-shared counters are little-endian 32-bit words each written by one
 * side; the other side reads them with acquire and writes with release
 * semantics (spec 6.4, 6.5).
 */
static inline uint32_t vstellar_load_acquire(const __le32 *p)
{
	return le32toh(atomic_load_explicit((_Atomic(__le32) *)p,
					    memory_order_acquire));
}

static inline void vstellar_store_release(__le32 *p, uint32_t v)
{
	atomic_store_explicit((_Atomic(__le32) *)p, htole32(v),
			      memory_order_release);
}

/* The record at a device-given index, NULL when it is not in the region. */
void *vstellar_db_record(struct vstellar_context *ctx, uint32_t index);

/* verbs.c */
int vstellar_query_device(struct ibv_context *context,
			  const struct ibv_query_device_ex_input *input,
			  struct ibv_device_attr_ex *attr, size_t attr_size);
int vstellar_query_port(struct ibv_context *context, uint8_t port,
			struct ibv_port_attr *attr);
struct ibv_pd *vstellar_alloc_pd(struct ibv_context *context);
int vstellar_dealloc_pd(struct ibv_pd *pd);
struct ibv_mr *vstellar_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
			       uint64_t hca_va, int access);
int vstellar_dereg_mr(struct verbs_mr *vmr);
struct ibv_ah *vstellar_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr);
int vstellar_destroy_ah(struct ibv_ah *ah);

/* cq.c */
struct ibv_cq *vstellar_create_cq(struct ibv_context *context, int cqe,
				  struct ibv_comp_channel *channel,
				  int comp_vector);
int vstellar_destroy_cq(struct ibv_cq *cq);
int vstellar_poll_cq(struct ibv_cq *cq, int ne, struct ibv_wc *wc);
int vstellar_req_notify_cq(struct ibv_cq *cq, int solicited_only);

/* qp.c */
struct ibv_qp *vstellar_create_qp(struct ibv_pd *pd,
				  struct ibv_qp_init_attr *attr);
struct ibv_qp *vstellar_create_qp_ex(struct ibv_context *context,
				     struct ibv_qp_init_attr_ex *attr);
int vstellar_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
		       int attr_mask);
int vstellar_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr,
		      int attr_mask, struct ibv_qp_init_attr *init_attr);
int vstellar_destroy_qp(struct ibv_qp *qp);
int vstellar_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
		       struct ibv_send_wr **bad_wr);
int vstellar_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
		       struct ibv_recv_wr **bad_wr);
int vstellar_wq_post_recv(struct vstellar_wq *wq, struct ibv_recv_wr *wr,
			  struct ibv_recv_wr **bad_wr);
uint32_t vstellar_recv_stride(uint32_t max_sge);
int vstellar_map_wq(struct vstellar_context *ctx, struct vstellar_wq *wq,
		    uint32_t size, uint32_t stride, uint32_t max_sge,
		    uint64_t len, uint64_t key);
void vstellar_unmap_wq(struct vstellar_wq *wq);

/* srq.c */
struct ibv_srq *vstellar_create_srq(struct ibv_pd *pd,
				    struct ibv_srq_init_attr *attr);
int vstellar_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr,
			int attr_mask);
int vstellar_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr);
int vstellar_destroy_srq(struct ibv_srq *srq);
int vstellar_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
			   struct ibv_recv_wr **bad_wr);

#endif /* __VSTELLAR_H__ */
