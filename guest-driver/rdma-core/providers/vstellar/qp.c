// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * libvstellar: queue pairs. WQEs go straight into the mapped send and
 * receive rings; the producer index goes into the QP's doorbell record
 * (spec 6.4, 6.6, 10).
 */
#include <config.h>

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <util/mmio.h>

#include "vstellar.h"

static_assert(sizeof(struct vstellar_send_wqe) == VSTELLAR_SEND_WQE_HEADER_SIZE,
	      "send WQE header size");
static_assert(sizeof(struct vstellar_recv_wqe) == VSTELLAR_RECV_WQE_HEADER_SIZE,
	      "receive WQE header size");
static_assert(sizeof(struct vstellar_sge) == VSTELLAR_SGE_SIZE, "SGE size");
static_assert(IBV_SEND_FENCE == VSTELLAR_SEND_FENCE &&
	      IBV_SEND_SIGNALED == VSTELLAR_SEND_SIGNALED &&
	      IBV_SEND_SOLICITED == VSTELLAR_SEND_SOLICITED &&
	      IBV_SEND_INLINE == VSTELLAR_SEND_INLINE,
	      "send flags differ from IBV_SEND_*");

enum {
	VSTELLAR_SEND_FLAGS = IBV_SEND_FENCE | IBV_SEND_SIGNALED |
			      IBV_SEND_SOLICITED | IBV_SEND_INLINE,
	VSTELLAR_QP_COMP_MASK = IBV_QP_INIT_ATTR_PD |
				IBV_QP_INIT_ATTR_CREATE_FLAGS |
				IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
	VSTELLAR_SEND_OPS = IBV_QP_EX_WITH_RDMA_WRITE |
			    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
			    IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
			    IBV_QP_EX_WITH_RDMA_READ |
			    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
			    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
};

/*
 * How long a post waits for the device to retire a slot before it reports
 * the ring full: the device writes a WQE's CQE before it moves the consumer
 * index past the WQE, so a caller that reposts as soon as it polls a
 * completion can briefly find its last slot still taken.
 */
#define VSTELLAR_FULL_WAIT_NS 200000

static void *vstellar_slot(struct vstellar_wq *wq)
{
	return wq->ring + (size_t)(wq->prod & (wq->size - 1)) * wq->stride;
}

/* True when the device has retired a slot for the next WQE. */
static bool vstellar_wq_room(struct vstellar_wq *wq)
{
	/* Acquire: the device is done with the slots before cons. */
	wq->cons = vstellar_load_acquire(wq->cons_db);
	/* A consumer index ahead of the producer reads as full, never room. */
	return wq->prod - wq->cons < wq->size;
}

static bool vstellar_wq_wait(struct vstellar_wq *wq)
{
	struct timespec start, now;
	int i;

	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		for (i = 0; i < 64; i++)
			if (vstellar_wq_room(wq))
				return true;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if ((now.tv_sec - start.tv_sec) * 1000000000LL +
		    (now.tv_nsec - start.tv_nsec) > VSTELLAR_FULL_WAIT_NS)
			return false;
	}
}

/* The slot for the next WQE, or NULL when the ring is full. */
static void *vstellar_wq_next(struct vstellar_wq *wq)
{
	if (wq->prod - wq->cons >= wq->size && !vstellar_wq_room(wq) &&
	    !vstellar_wq_wait(wq))
		return NULL;
	return vstellar_slot(wq);
}

/* After a producer store: the second half of the wake-up protocol. */
static void vstellar_wake(struct vstellar_context *ctx)
{
	/*
	 * Store->load ordering against the engine's EngineIdle store (spec
	 * 6.6): the producer store is above, EngineIdle is loaded below.
	 */
	atomic_thread_fence(memory_order_seq_cst);
	if (ctx->notify_reg &&
	    le32toh(atomic_load_explicit((_Atomic(__le32) *)ctx->engine_flags,
					 memory_order_relaxed)) &
		    VSTELLAR_ENGINE_IDLE)
		mmio_write16_le(ctx->notify_reg, htole16(ctx->notify_value));
}

static int vstellar_wr_opcode(enum ibv_wr_opcode op, uint8_t *dev_op)
{
	switch (op) {
	case IBV_WR_RDMA_WRITE:
		*dev_op = VSTELLAR_WR_RDMA_WRITE;
		return 0;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		*dev_op = VSTELLAR_WR_RDMA_WRITE_WITH_IMM;
		return 0;
	case IBV_WR_SEND:
		*dev_op = VSTELLAR_WR_SEND;
		return 0;
	case IBV_WR_SEND_WITH_IMM:
		*dev_op = VSTELLAR_WR_SEND_WITH_IMM;
		return 0;
	case IBV_WR_RDMA_READ:
		*dev_op = VSTELLAR_WR_RDMA_READ;
		return 0;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		*dev_op = VSTELLAR_WR_ATOMIC_CMP_SWAP;
		return 0;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		*dev_op = VSTELLAR_WR_ATOMIC_FETCH_ADD;
		return 0;
	default:
		return EINVAL;
	}
}

static bool vstellar_op_is_atomic(uint8_t op)
{
	return op == VSTELLAR_WR_ATOMIC_CMP_SWAP ||
	       op == VSTELLAR_WR_ATOMIC_FETCH_ADD;
}

/* Inline data carries a SEND's or a WRITE's payload only. */
static bool vstellar_op_takes_inline(uint8_t op)
{
	return op == VSTELLAR_WR_SEND || op == VSTELLAR_WR_SEND_WITH_IMM ||
	       op == VSTELLAR_WR_RDMA_WRITE ||
	       op == VSTELLAR_WR_RDMA_WRITE_WITH_IMM;
}

/*
 * The device carries imm_data as written and the receiver turns it back
 * into a __be32 (cq.c), so the value travels as the host-order number.
 */
static __le32 vstellar_imm(__be32 imm)
{
	return htole32(be32toh(imm));
}

static struct vstellar_sge *vstellar_wqe_sges(struct vstellar_send_wqe *wqe)
{
	return (struct vstellar_sge *)(wqe + 1);
}

static void vstellar_set_sge(struct vstellar_sge *d, uint64_t addr,
			     uint32_t length, uint32_t lkey)
{
	d->addr = htole64(addr);
	d->length = htole32(length);
	d->lkey = htole32(lkey);
}

/* Refuses what does not fit the QP or what the device would fail anyway. */
static int vstellar_check_send_wr(struct vstellar_qp *qp,
				  const struct ibv_send_wr *wr, uint8_t *op,
				  uint32_t *inline_len)
{
	uint64_t len = 0;
	int i;

	if (vstellar_wr_opcode(wr->opcode, op) ||
	    wr->send_flags & ~VSTELLAR_SEND_FLAGS || wr->num_sge < 0)
		return EINVAL;
	if (wr->send_flags & IBV_SEND_INLINE) {
		if (!vstellar_op_takes_inline(*op))
			return EINVAL;
		for (i = 0; i < wr->num_sge; i++)
			len += wr->sg_list[i].length;
		if (len > qp->max_inline)
			return EINVAL;
		*inline_len = len;
		return 0;
	}
	if ((uint32_t)wr->num_sge > qp->sq.max_sge)
		return EINVAL;
	if (vstellar_op_is_atomic(*op) &&
	    (wr->num_sge != 1 || wr->sg_list[0].length != sizeof(uint64_t)))
		return EINVAL;
	*inline_len = 0;
	return 0;
}

static void vstellar_write_send_wr(struct vstellar_send_wqe *wqe,
				   const struct ibv_send_wr *wr, uint8_t op,
				   uint32_t inline_len)
{
	uint8_t *data;
	int i;

	memset(wqe, 0, sizeof(*wqe));
	wqe->wr_id = htole64(wr->wr_id);
	wqe->opcode = op;
	wqe->send_flags = wr->send_flags;
	switch (op) {
	case VSTELLAR_WR_RDMA_WRITE_WITH_IMM:
		wqe->imm_data = vstellar_imm(wr->imm_data);
		SWITCH_FALLTHROUGH;
	case VSTELLAR_WR_RDMA_WRITE:
	case VSTELLAR_WR_RDMA_READ:
		wqe->remote_addr = htole64(wr->wr.rdma.remote_addr);
		wqe->rkey = htole32(wr->wr.rdma.rkey);
		break;
	case VSTELLAR_WR_SEND_WITH_IMM:
		wqe->imm_data = vstellar_imm(wr->imm_data);
		break;
	case VSTELLAR_WR_ATOMIC_CMP_SWAP:
		wqe->swap = htole64(wr->wr.atomic.swap);
		SWITCH_FALLTHROUGH;
	case VSTELLAR_WR_ATOMIC_FETCH_ADD:
		wqe->remote_addr = htole64(wr->wr.atomic.remote_addr);
		wqe->rkey = htole32(wr->wr.atomic.rkey);
		wqe->compare_add = htole64(wr->wr.atomic.compare_add);
		break;
	}

	if (wr->send_flags & IBV_SEND_INLINE) {
		data = (uint8_t *)(wqe + 1);
		for (i = 0; i < wr->num_sge; i++) {
			memcpy(data, (void *)(uintptr_t)wr->sg_list[i].addr,
			       wr->sg_list[i].length);
			data += wr->sg_list[i].length;
		}
		wqe->inline_len = htole32(inline_len);
		return;
	}
	wqe->num_sge = htole16(wr->num_sge);
	for (i = 0; i < wr->num_sge; i++)
		vstellar_set_sge(&vstellar_wqe_sges(wqe)[i],
				 wr->sg_list[i].addr, wr->sg_list[i].length,
				 wr->sg_list[i].lkey);
}

int vstellar_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
		       struct ibv_send_wr **bad_wr)
{
	struct vstellar_qp *qp = to_vqp(ibqp);
	struct vstellar_wq *sq = &qp->sq;
	uint32_t start, inline_len;
	void *slot;
	uint8_t op;
	int err = 0;

	pthread_spin_lock(&sq->lock);
	start = sq->prod;
	/* A QP in RESET takes no work requests (its record is zeroed). */
	if (ibqp->state == IBV_QPS_RESET)
		err = EINVAL;
	for (; wr && !err; wr = wr->next) {
		err = vstellar_check_send_wr(qp, wr, &op, &inline_len);
		if (err)
			break;
		slot = vstellar_wq_next(sq);
		if (!slot) {
			err = ENOMEM;
			break;
		}
		vstellar_write_send_wr(slot, wr, op, inline_len);
		sq->prod++;
	}
	if (err)
		*bad_wr = wr;
	if (sq->prod == start) {
		pthread_spin_unlock(&sq->lock);
		return err;
	}
	/* Release: the WQEs are in the ring before the device sees prod. */
	vstellar_store_release(sq->prod_db, sq->prod);
	pthread_spin_unlock(&sq->lock);
	vstellar_wake(to_vctx(ibqp->context));
	return err;
}

/*
 * Writes receive WQEs into wq's slots and advances its producer index (not
 * stored yet); the caller holds wq->lock.
 */
static int vstellar_put_recvs(struct vstellar_wq *wq, struct ibv_recv_wr *wr,
			      struct ibv_recv_wr **bad_wr)
{
	struct vstellar_recv_wqe *wqe;
	struct vstellar_sge *sges;
	int err = 0;
	int i;

	for (; wr; wr = wr->next) {
		if (wr->num_sge < 0 || (uint32_t)wr->num_sge > wq->max_sge) {
			err = EINVAL;
			break;
		}
		wqe = vstellar_wq_next(wq);
		if (!wqe) {
			err = ENOMEM;
			break;
		}
		memset(wqe, 0, sizeof(*wqe));
		wqe->wr_id = htole64(wr->wr_id);
		wqe->num_sge = htole16(wr->num_sge);
		sges = (struct vstellar_sge *)(wqe + 1);
		for (i = 0; i < wr->num_sge; i++)
			vstellar_set_sge(&sges[i], wr->sg_list[i].addr,
					 wr->sg_list[i].length,
					 wr->sg_list[i].lkey);
		wq->prod++;
	}
	if (err)
		*bad_wr = wr;
	return err;
}

/* Posts to an SRQ's ring: no wake-up, the device takes them on arrival. */
int vstellar_wq_post_recv(struct vstellar_wq *wq, struct ibv_recv_wr *wr,
			  struct ibv_recv_wr **bad_wr)
{
	uint32_t start;
	int err;

	pthread_spin_lock(&wq->lock);
	start = wq->prod;
	err = vstellar_put_recvs(wq, wr, bad_wr);
	if (wq->prod != start)
		vstellar_store_release(wq->prod_db, wq->prod);
	pthread_spin_unlock(&wq->lock);
	return err;
}

int vstellar_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
		       struct ibv_recv_wr **bad_wr)
{
	struct vstellar_qp *qp = to_vqp(ibqp);
	struct vstellar_wq *rq = &qp->rq;
	uint32_t start;
	int err = 0;

	/* A QP on an SRQ has no receive queue: post to the SRQ. */
	if (qp->on_srq) {
		*bad_wr = wr;
		return EINVAL;
	}
	pthread_spin_lock(&rq->lock);
	start = rq->prod;
	if (ibqp->state == IBV_QPS_RESET) {
		err = EINVAL;
		*bad_wr = wr;
	} else {
		err = vstellar_put_recvs(rq, wr, bad_wr);
	}
	if (rq->prod == start) {
		pthread_spin_unlock(&rq->lock);
		return err;
	}
	vstellar_store_release(rq->prod_db, rq->prod);
	pthread_spin_unlock(&rq->lock);
	vstellar_wake(to_vctx(ibqp->context));
	return err;
}

/*
 * The extended send API (ibv_wr_*). wr_start takes the SQ lock; each
 * builder writes a WQE header into the next slot and each setter completes
 * it; wr_complete publishes them all at once, and an error or wr_abort
 * takes the producer index back so that the device never sees them.
 */

/* A builder may start a WQE once the one before it is complete. */
static bool vstellar_wr_ok(struct vstellar_qp *qp)
{
	if (qp->wr_err)
		return false;
	if (qp->wr_need_atomic_sge) {
		/* An atomic needs its one 8-byte SGE (wr_set_sge). */
		qp->wr_err = EINVAL;
		return false;
	}
	return true;
}

static struct vstellar_send_wqe *vstellar_wr_begin(struct ibv_qp_ex *qpx,
						   uint8_t op)
{
	struct vstellar_qp *qp = qpx_to_vqp(qpx);
	struct vstellar_send_wqe *wqe;

	if (!vstellar_wr_ok(qp))
		return NULL;
	/* Inline data is chosen with wr_set_inline_data, not the flag. */
	if (qpx->wr_flags & ~VSTELLAR_SEND_FLAGS) {
		qp->wr_err = EINVAL;
		return NULL;
	}
	wqe = vstellar_wq_next(&qp->sq);
	if (!wqe) {
		qp->wr_err = ENOMEM;
		return NULL;
	}
	memset(wqe, 0, sizeof(*wqe));
	wqe->wr_id = htole64(qpx->wr_id);
	wqe->opcode = op;
	wqe->send_flags = qpx->wr_flags & ~IBV_SEND_INLINE;
	qp->sq.prod++;
	qp->wr_cur = wqe;
	qp->wr_need_atomic_sge = vstellar_op_is_atomic(op);
	return wqe;
}

static void vstellar_wr_send(struct ibv_qp_ex *qpx)
{
	vstellar_wr_begin(qpx, VSTELLAR_WR_SEND);
}

static void vstellar_wr_send_imm(struct ibv_qp_ex *qpx, __be32 imm_data)
{
	struct vstellar_send_wqe *wqe;

	wqe = vstellar_wr_begin(qpx, VSTELLAR_WR_SEND_WITH_IMM);
	if (wqe)
		wqe->imm_data = vstellar_imm(imm_data);
}

static void vstellar_wr_rdma(struct ibv_qp_ex *qpx, uint8_t op, uint32_t rkey,
			     uint64_t remote_addr, __be32 imm_data)
{
	struct vstellar_send_wqe *wqe;

	wqe = vstellar_wr_begin(qpx, op);
	if (!wqe)
		return;
	wqe->remote_addr = htole64(remote_addr);
	wqe->rkey = htole32(rkey);
	if (op == VSTELLAR_WR_RDMA_WRITE_WITH_IMM)
		wqe->imm_data = vstellar_imm(imm_data);
}

static void vstellar_wr_rdma_write(struct ibv_qp_ex *qpx, uint32_t rkey,
				   uint64_t remote_addr)
{
	vstellar_wr_rdma(qpx, VSTELLAR_WR_RDMA_WRITE, rkey, remote_addr, 0);
}

static void vstellar_wr_rdma_write_imm(struct ibv_qp_ex *qpx, uint32_t rkey,
				       uint64_t remote_addr, __be32 imm_data)
{
	vstellar_wr_rdma(qpx, VSTELLAR_WR_RDMA_WRITE_WITH_IMM, rkey,
			 remote_addr, imm_data);
}

static void vstellar_wr_rdma_read(struct ibv_qp_ex *qpx, uint32_t rkey,
				  uint64_t remote_addr)
{
	vstellar_wr_rdma(qpx, VSTELLAR_WR_RDMA_READ, rkey, remote_addr, 0);
}

static void vstellar_wr_atomic(struct ibv_qp_ex *qpx, uint8_t op,
			       uint32_t rkey, uint64_t remote_addr,
			       uint64_t compare_add, uint64_t swap)
{
	struct vstellar_send_wqe *wqe;

	wqe = vstellar_wr_begin(qpx, op);
	if (!wqe)
		return;
	wqe->remote_addr = htole64(remote_addr);
	wqe->rkey = htole32(rkey);
	wqe->compare_add = htole64(compare_add);
	wqe->swap = htole64(swap);
}

static void vstellar_wr_atomic_cmp_swp(struct ibv_qp_ex *qpx, uint32_t rkey,
				       uint64_t remote_addr, uint64_t compare,
				       uint64_t swap)
{
	vstellar_wr_atomic(qpx, VSTELLAR_WR_ATOMIC_CMP_SWAP, rkey, remote_addr,
			   compare, swap);
}

static void vstellar_wr_atomic_fetch_add(struct ibv_qp_ex *qpx, uint32_t rkey,
					 uint64_t remote_addr, uint64_t add)
{
	vstellar_wr_atomic(qpx, VSTELLAR_WR_ATOMIC_FETCH_ADD, rkey, remote_addr,
			   add, 0);
}

/* The WQE the setters complete, or NULL after an error. */
static struct vstellar_send_wqe *vstellar_wr_cur(struct vstellar_qp *qp)
{
	if (qp->wr_err)
		return NULL;
	if (!qp->wr_cur) {
		/* A setter before any builder. */
		qp->wr_err = EINVAL;
		return NULL;
	}
	return qp->wr_cur;
}

static void vstellar_wr_set_sge_list(struct ibv_qp_ex *qpx, size_t num_sge,
				     const struct ibv_sge *sg_list)
{
	struct vstellar_qp *qp = qpx_to_vqp(qpx);
	struct vstellar_send_wqe *wqe = vstellar_wr_cur(qp);
	size_t i;

	if (!wqe)
		return;
	if (num_sge > qp->sq.max_sge) {
		qp->wr_err = EINVAL;
		return;
	}
	if (vstellar_op_is_atomic(wqe->opcode)) {
		if (num_sge != 1 || sg_list[0].length != sizeof(uint64_t)) {
			qp->wr_err = EINVAL;
			return;
		}
		qp->wr_need_atomic_sge = false;
	}
	for (i = 0; i < num_sge; i++)
		vstellar_set_sge(&vstellar_wqe_sges(wqe)[i], sg_list[i].addr,
				 sg_list[i].length, sg_list[i].lkey);
	wqe->num_sge = htole16(num_sge);
	wqe->send_flags &= ~VSTELLAR_SEND_INLINE;
	wqe->inline_len = 0;
}

static void vstellar_wr_set_sge(struct ibv_qp_ex *qpx, uint32_t lkey,
				uint64_t addr, uint32_t length)
{
	struct vstellar_qp *qp = qpx_to_vqp(qpx);
	struct ibv_sge sge = { .addr = addr, .length = length, .lkey = lkey };
	size_t n = 1;

	/*
	 * No SGE for no data, so that a QP without send SGEs takes it too;
	 * an atomic's SGE is kept and checked.
	 */
	if (!length && qp->wr_cur && !vstellar_op_is_atomic(qp->wr_cur->opcode))
		n = 0;
	vstellar_wr_set_sge_list(qpx, n, &sge);
}

static void vstellar_wr_set_inline_data_list(struct ibv_qp_ex *qpx,
					     size_t num_buf,
					     const struct ibv_data_buf *buf_list)
{
	struct vstellar_qp *qp = qpx_to_vqp(qpx);
	struct vstellar_send_wqe *wqe = vstellar_wr_cur(qp);
	uint64_t len = 0;
	uint8_t *data;
	size_t i;

	if (!wqe)
		return;
	for (i = 0; i < num_buf; i++)
		len += buf_list[i].length;
	if (!vstellar_op_takes_inline(wqe->opcode) || len > qp->max_inline) {
		qp->wr_err = EINVAL;
		return;
	}
	data = (uint8_t *)(wqe + 1);
	for (i = 0; i < num_buf; i++) {
		memcpy(data, buf_list[i].addr, buf_list[i].length);
		data += buf_list[i].length;
	}
	wqe->num_sge = 0;
	wqe->send_flags |= VSTELLAR_SEND_INLINE;
	wqe->inline_len = htole32(len);
}

static void vstellar_wr_set_inline_data(struct ibv_qp_ex *qpx, void *addr,
					size_t length)
{
	struct ibv_data_buf buf = { .addr = addr, .length = length };

	vstellar_wr_set_inline_data_list(qpx, 1, &buf);
}

static void vstellar_wr_start(struct ibv_qp_ex *qpx)
{
	struct vstellar_qp *qp = qpx_to_vqp(qpx);

	pthread_spin_lock(&qp->sq.lock);
	qp->wr_err = qp->vqp.qp.state == IBV_QPS_RESET ? EINVAL : 0;
	qp->wr_start_prod = qp->sq.prod;
	qp->wr_cur = NULL;
	qp->wr_need_atomic_sge = false;
}

static int vstellar_wr_complete(struct ibv_qp_ex *qpx)
{
	struct vstellar_qp *qp = qpx_to_vqp(qpx);
	struct vstellar_wq *sq = &qp->sq;
	int err;

	/* The last WQE must be complete too (an atomic's SGE). */
	vstellar_wr_ok(qp);
	err = qp->wr_err;
	if (err || sq->prod == qp->wr_start_prod) {
		sq->prod = qp->wr_start_prod;
		pthread_spin_unlock(&sq->lock);
		return err;
	}
	vstellar_store_release(sq->prod_db, sq->prod);
	pthread_spin_unlock(&sq->lock);
	vstellar_wake(to_vctx(qp->vqp.qp.context));
	return 0;
}

static void vstellar_wr_abort(struct ibv_qp_ex *qpx)
{
	struct vstellar_qp *qp = qpx_to_vqp(qpx);

	qp->sq.prod = qp->wr_start_prod;
	pthread_spin_unlock(&qp->sq.lock);
}

static void vstellar_fill_wr_ops(struct vstellar_qp *qp, uint64_t ops)
{
	struct ibv_qp_ex *qpx = &qp->vqp.qp_ex;

	qpx->wr_start = vstellar_wr_start;
	qpx->wr_complete = vstellar_wr_complete;
	qpx->wr_abort = vstellar_wr_abort;
	if (ops & IBV_QP_EX_WITH_SEND)
		qpx->wr_send = vstellar_wr_send;
	if (ops & IBV_QP_EX_WITH_SEND_WITH_IMM)
		qpx->wr_send_imm = vstellar_wr_send_imm;
	if (ops & IBV_QP_EX_WITH_RDMA_WRITE)
		qpx->wr_rdma_write = vstellar_wr_rdma_write;
	if (ops & IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM)
		qpx->wr_rdma_write_imm = vstellar_wr_rdma_write_imm;
	if (ops & IBV_QP_EX_WITH_RDMA_READ)
		qpx->wr_rdma_read = vstellar_wr_rdma_read;
	if (ops & IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP)
		qpx->wr_atomic_cmp_swp = vstellar_wr_atomic_cmp_swp;
	if (ops & IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)
		qpx->wr_atomic_fetch_add = vstellar_wr_atomic_fetch_add;
	qpx->wr_set_sge = vstellar_wr_set_sge;
	qpx->wr_set_sge_list = vstellar_wr_set_sge_list;
	qpx->wr_set_inline_data = vstellar_wr_set_inline_data;
	qpx->wr_set_inline_data_list = vstellar_wr_set_inline_data_list;
}

static uint32_t vstellar_pow2(uint64_t n)
{
	return n <= 1 ? 1 : roundup_pow_of_two(n);
}

/* Slot strides as the device computes them (spec 10.5). */
static uint32_t vstellar_send_stride(uint32_t max_sge, uint32_t max_inline)
{
	uint64_t payload = (uint64_t)max_sge * sizeof(struct vstellar_sge);

	if (max_inline > payload)
		payload = max_inline;
	return vstellar_pow2(sizeof(struct vstellar_send_wqe) + payload);
}

uint32_t vstellar_recv_stride(uint32_t max_sge)
{
	return vstellar_pow2(sizeof(struct vstellar_recv_wqe) +
			     (uint64_t)max_sge * sizeof(struct vstellar_sge));
}

static bool vstellar_wq_resp_ok(uint32_t size, uint32_t stride,
				uint32_t max_sge, uint32_t want_size,
				uint32_t want_sge, uint64_t len, uint64_t key)
{
	return size && !(size & (size - 1)) &&
	       size <= VSTELLAR_CEILING_MAX_QP_WR && size >= want_size &&
	       max_sge <= VSTELLAR_CEILING_MAX_SGE && max_sge >= want_sge &&
	       len >= (uint64_t)size * stride && len <= SIZE_MAX &&
	       key <= INT64_MAX;
}

/* A QP on an SRQ has no receive ring: the kernel says so with zeros. */
static bool vstellar_rq_resp_ok(const struct vstellar_qp *qp,
				const struct ibv_qp_cap *cap,
				const struct vstellar_create_qp_uresp *r)
{
	if (qp->on_srq)
		return !r->rq_size && !r->rq_stride && !r->max_recv_sge &&
		       !r->rq_mmap_len && !r->rq_mmap_key;
	return vstellar_wq_resp_ok(r->rq_size, r->rq_stride, r->max_recv_sge,
				   cap->max_recv_wr, cap->max_recv_sge,
				   r->rq_mmap_len, r->rq_mmap_key) &&
	       r->rq_stride == vstellar_recv_stride(r->max_recv_sge);
}

/* Checks what the kernel says about the QP it created for cap. */
static int vstellar_check_qp_resp(struct vstellar_context *ctx,
				  struct vstellar_qp *qp,
				  const struct ibv_qp_cap *cap,
				  const struct vstellar_create_qp_uresp *r)
{
	if (r->qpn != qp->vqp.qp.qp_num ||
	    !vstellar_db_record(ctx, r->doorbell_index) ||
	    r->max_inline_data > VSTELLAR_CEILING_MAX_INLINE_DATA ||
	    r->max_inline_data < cap->max_inline_data ||
	    !vstellar_wq_resp_ok(r->sq_size, r->sq_stride, r->max_send_sge,
				 cap->max_send_wr, cap->max_send_sge,
				 r->sq_mmap_len, r->sq_mmap_key) ||
	    !vstellar_rq_resp_ok(qp, cap, r) ||
	    r->sq_stride != vstellar_send_stride(r->max_send_sge,
						 r->max_inline_data)) {
		verbs_err(&ctx->ibv_ctx,
			  "vstellar: QP %u: bad response: SQ %u x %u (%u SGEs, %u inline), RQ %u x %u (%u SGEs), doorbell %u of %u\n",
			  r->qpn, r->sq_size, r->sq_stride, r->max_send_sge,
			  r->max_inline_data, r->rq_size, r->rq_stride,
			  r->max_recv_sge, r->doorbell_index, ctx->db_records);
		return EPROTO;
	}
	return 0;
}

int vstellar_map_wq(struct vstellar_context *ctx, struct vstellar_wq *wq,
		    uint32_t size, uint32_t stride, uint32_t max_sge,
		    uint64_t len, uint64_t key)
{
	void *p;

	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED,
		 ctx->ibv_ctx.context.cmd_fd, key);
	if (p == MAP_FAILED)
		return errno;
	wq->ring = p;
	wq->ring_len = len;
	wq->size = size;
	wq->stride = stride;
	wq->max_sge = max_sge;
	pthread_spin_init(&wq->lock, PTHREAD_PROCESS_PRIVATE);
	return 0;
}

void vstellar_unmap_wq(struct vstellar_wq *wq)
{
	if (!wq->ring)
		return;
	munmap(wq->ring, wq->ring_len);
	pthread_spin_destroy(&wq->lock);
	wq->ring = NULL;
}

static int vstellar_check_qp_attr(struct vstellar_context *ctx,
				  const struct ibv_qp_init_attr_ex *attr)
{
	if (attr->comp_mask & ~VSTELLAR_QP_COMP_MASK ||
	    ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) &&
	     attr->create_flags) ||
	    ((attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) &&
	     attr->send_ops_flags & ~VSTELLAR_SEND_OPS)) {
		verbs_err(&ctx->ibv_ctx,
			  "vstellar: unsupported QP attributes (comp_mask %#x)\n",
			  attr->comp_mask);
		return EOPNOTSUPP;
	}
	if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD) || !attr->pd)
		return EINVAL;
	/* RC only: no UD in ABI 1.1 (spec 1). */
	if (attr->qp_type != IBV_QPT_RC) {
		verbs_err(&ctx->ibv_ctx,
			  "vstellar: only RC QPs are supported\n");
		return EOPNOTSUPP;
	}
	return 0;
}

static struct ibv_qp *vstellar_create_qp_common(struct ibv_context *context,
						struct ibv_qp_init_attr_ex *attr)
{
	struct vstellar_context *ctx = to_vctx(context);
	struct uvstellar_create_qp_resp resp = {};
	struct uvstellar_create_qp cmd = {};
	const struct vstellar_create_qp_uresp *r = &resp.drv_payload;
	struct ibv_qp_cap cap = attr->cap;
	uint32_t comp_mask = attr->comp_mask;
	struct vstellar_qp *qp;
	int err;

	err = vstellar_check_qp_attr(ctx, attr);
	if (err)
		goto err_out;

	qp = calloc(1, sizeof(*qp));
	if (!qp) {
		err = ENOMEM;
		goto err_out;
	}
	qp->on_srq = attr->srq != NULL;
	/* Create flags are none here, and the command takes no such bit. */
	attr->comp_mask &= ~IBV_QP_INIT_ATTR_CREATE_FLAGS;
	err = ibv_cmd_create_qp_ex(context, &qp->vqp, attr, &cmd.ibv_cmd,
				   sizeof(cmd), &resp.ibv_resp, sizeof(resp));
	attr->comp_mask = comp_mask;
	if (err)
		goto err_free;

	err = vstellar_check_qp_resp(ctx, qp, &cap, r);
	if (err)
		goto err_destroy;
	err = vstellar_map_wq(ctx, &qp->sq, r->sq_size, r->sq_stride,
			      r->max_send_sge, r->sq_mmap_len, r->sq_mmap_key);
	if (!err && !qp->on_srq)
		err = vstellar_map_wq(ctx, &qp->rq, r->rq_size, r->rq_stride,
				      r->max_recv_sge, r->rq_mmap_len,
				      r->rq_mmap_key);
	else if (!err)
		/* Still locked by a reset in modify_qp. */
		pthread_spin_init(&qp->rq.lock, PTHREAD_PROCESS_PRIVATE);
	if (err) {
		verbs_err(&ctx->ibv_ctx, "vstellar: QP %u: mapping a ring: %s\n",
			  r->qpn, strerror(err));
		goto err_unmap;
	}

	qp->qpn = r->qpn;
	qp->max_inline = r->max_inline_data;
	qp->rec = vstellar_db_record(ctx, r->doorbell_index);
	qp->sq.prod_db = &qp->rec->sq_prod;
	qp->sq.cons_db = &qp->rec->sq_cons;
	qp->rq.prod_db = &qp->rec->rq_prod;
	qp->rq.cons_db = &qp->rec->rq_cons;
	/* CREATE_QP zeroed the record; the counters start where it says. */
	qp->sq.cons = qp->sq.prod = vstellar_load_acquire(qp->sq.cons_db);
	qp->rq.cons = qp->rq.prod = vstellar_load_acquire(qp->rq.cons_db);

	if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
		vstellar_fill_wr_ops(qp, attr->send_ops_flags);
		qp->vqp.comp_mask |= VERBS_QP_EX;
	}
	return &qp->vqp.qp;

err_unmap:
	vstellar_unmap_wq(&qp->rq);
	vstellar_unmap_wq(&qp->sq);
err_destroy:
	ibv_cmd_destroy_qp(&qp->vqp.qp);
err_free:
	free(qp);
err_out:
	errno = err;
	return NULL;
}

struct ibv_qp *vstellar_create_qp(struct ibv_pd *pd,
				  struct ibv_qp_init_attr *attr)
{
	struct ibv_qp_init_attr_ex attr_ex = {};
	struct ibv_qp *qp;

	memcpy(&attr_ex, attr, sizeof(*attr));
	attr_ex.comp_mask = IBV_QP_INIT_ATTR_PD;
	attr_ex.pd = pd;
	qp = vstellar_create_qp_common(pd->context, &attr_ex);
	if (qp)
		memcpy(attr, &attr_ex, sizeof(*attr));
	return qp;
}

struct ibv_qp *vstellar_create_qp_ex(struct ibv_context *context,
				     struct ibv_qp_init_attr_ex *attr)
{
	return vstellar_create_qp_common(context, attr);
}

int vstellar_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr,
		       int attr_mask)
{
	struct vstellar_qp *qp = to_vqp(ibqp);
	struct ibv_modify_qp cmd = {};
	int err;

	err = ibv_cmd_modify_qp(ibqp, attr, attr_mask, &cmd, sizeof(cmd));
	if (err)
		return err;
	if ((attr_mask & IBV_QP_STATE) && attr->qp_state == IBV_QPS_RESET) {
		/* The device zeroed the record: start the counters over. */
		pthread_spin_lock(&qp->sq.lock);
		qp->sq.prod = qp->sq.cons = 0;
		pthread_spin_unlock(&qp->sq.lock);
		pthread_spin_lock(&qp->rq.lock);
		qp->rq.prod = qp->rq.cons = 0;
		pthread_spin_unlock(&qp->rq.lock);
	}
	return 0;
}

int vstellar_query_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr,
		      int attr_mask, struct ibv_qp_init_attr *init_attr)
{
	struct ibv_query_qp cmd = {};

	return ibv_cmd_query_qp(ibqp, attr, attr_mask, init_attr, &cmd,
				sizeof(cmd));
}

int vstellar_destroy_qp(struct ibv_qp *ibqp)
{
	struct vstellar_qp *qp = to_vqp(ibqp);
	int err;

	err = ibv_cmd_destroy_qp(ibqp);
	if (err)
		return err;
	vstellar_unmap_wq(&qp->rq);
	vstellar_unmap_wq(&qp->sq);
	free(qp);
	return 0;
}
