// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * Exercises libvstellar's data path against rings and a doorbell region in
 * ordinary memory, with no kernel and no device: the WQEs, CQE conversion,
 * checks, full rings, CQ arming, and the wake-up protocol against a thread
 * that plays the device's engine (store EngineIdle, fence, rescan, sleep
 * until kicked). Built and run by tests/run.sh.
 */
#include <config.h>

#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The provider's sources, so that the test reaches its static functions. */
#include "cq.c"
#include "qp.c"
#include "srq.c"
#include "vstellar.c"
#include "verbs.c"

static int failures;

#define CHECK(cond)                                                          \
	do {                                                                 \
		if (!(cond)) {                                               \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, \
				__LINE__, #cond);                            \
			failures++;                                          \
		}                                                            \
	} while (0)

#define RECORDS 10
#define PAGE 4096

static struct vstellar_context ctx;
static uint8_t *db;
static volatile uint16_t *notify;

static struct ibv_device fake_dev = { .name = "vstellar-fake" };

static void setup_ctx(void)
{
	ctx.ibv_ctx.context.abi_compat = __VERBS_ABI_IS_EXTENDED;
	ctx.ibv_ctx.context.device = &fake_dev;
	db = aligned_alloc(PAGE, 2 * PAGE);
	memset(db, 0, 2 * PAGE);
	ctx.db = db;
	ctx.db_len = 2 * PAGE;
	ctx.db_records_offset = PAGE;
	ctx.db_record_size = VSTELLAR_DOORBELL_RECORD_SIZE;
	ctx.db_records = RECORDS;
	ctx.engine_flags = (const __le32 *)db;
	notify = aligned_alloc(PAGE, PAGE);
	ctx.notify_page = (void *)notify;
	ctx.notify_reg = (void *)notify;
	ctx.notify_value = 2;
}

static uint8_t *alloc_ring(size_t len)
{
	uint8_t *p = aligned_alloc(PAGE, len < PAGE ? PAGE : len);

	memset(p, 0xee, len);
	return p;
}

static void setup_wq(struct vstellar_wq *wq, uint32_t size, uint32_t stride,
		     uint32_t max_sge, __le32 *prod, __le32 *cons)
{
	pthread_spin_init(&wq->lock, PTHREAD_PROCESS_PRIVATE);
	wq->ring = alloc_ring((size_t)size * stride);
	wq->ring_len = (size_t)size * stride;
	wq->size = size;
	wq->stride = stride;
	wq->max_sge = max_sge;
	wq->prod = wq->cons = 0;
	wq->prod_db = prod;
	wq->cons_db = cons;
}

static struct vstellar_qp *make_qp(uint32_t sq_size, uint32_t rq_size,
				   uint32_t max_sge, uint32_t max_inline,
				   uint32_t record, bool ex)
{
	struct vstellar_qp *qp = calloc(1, sizeof(*qp));
	struct ibv_qp_init_attr_ex attr = {
		.comp_mask = IBV_QP_INIT_ATTR_PD |
			     IBV_QP_INIT_ATTR_SEND_OPS_FLAGS,
		.send_ops_flags = IBV_QP_EX_WITH_SEND |
				  IBV_QP_EX_WITH_RDMA_WRITE |
				  IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
				  IBV_QP_EX_WITH_RDMA_READ |
				  IBV_QP_EX_WITH_SEND_WITH_IMM |
				  IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
				  IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD,
	};
	uint32_t payload = max_sge * 16 > max_inline ? max_sge * 16 : max_inline;
	uint32_t stride = 64, rstride = 16;

	while (stride < 64 + payload)
		stride <<= 1;
	while (rstride < 16 + max_sge * 16)
		rstride <<= 1;
	qp->vqp.qp.context = &ctx.ibv_ctx.context;
	qp->vqp.qp.state = IBV_QPS_RTS;
	qp->qpn = record + 2;
	qp->max_inline = max_inline;
	qp->rec = vstellar_db_record(&ctx, record);
	setup_wq(&qp->sq, sq_size, stride, max_sge, &qp->rec->sq_prod,
		 &qp->rec->sq_cons);
	setup_wq(&qp->rq, rq_size, rstride, max_sge, &qp->rec->rq_prod,
		 &qp->rec->rq_cons);
	if (ex)
		vstellar_fill_wr_ops(qp, attr.send_ops_flags);
	return qp;
}

static struct vstellar_send_wqe *sq_wqe(struct vstellar_qp *qp, uint32_t i)
{
	return (void *)(qp->sq.ring + (size_t)(i & (qp->sq.size - 1)) *
					      qp->sq.stride);
}

static struct vstellar_sge *wqe_sge(struct vstellar_send_wqe *w, int i)
{
	return (struct vstellar_sge *)(w + 1) + i;
}

static void test_post_send(void)
{
	struct vstellar_qp *qp = make_qp(4, 4, 4, 64, 0, false);
	char payload[64], big[65];
	struct ibv_sge sg[5] = {
		{ .addr = 0x1000, .length = 100, .lkey = 7 },
		{ .addr = 0x2000, .length = 200, .lkey = 8 },
	};
	struct ibv_sge isg = { .addr = (uintptr_t)payload, .length = 10 };
	struct ibv_sge asg = { .addr = 0x3000, .length = 8, .lkey = 9 };
	struct ibv_send_wr wr2 = {
		.wr_id = 2, .opcode = IBV_WR_RDMA_WRITE_WITH_IMM,
		.send_flags = IBV_SEND_INLINE, .sg_list = &isg, .num_sge = 1,
		.imm_data = htobe32(0x01020304),
		.wr.rdma = { .remote_addr = 0xabc0, .rkey = 0x55 },
	};
	struct ibv_send_wr wr1 = {
		.wr_id = 1, .next = &wr2, .opcode = IBV_WR_SEND,
		.send_flags = IBV_SEND_SIGNALED | IBV_SEND_SOLICITED,
		.sg_list = sg, .num_sge = 2,
	};
	struct ibv_send_wr bad, *bad_wr = NULL;
	struct vstellar_send_wqe *w;
	uint8_t *in;

	memcpy(payload, "0123456789", 10);
	CHECK(vstellar_post_send(&qp->vqp.qp, &wr1, &bad_wr) == 0);
	CHECK(le32toh(qp->rec->sq_prod) == 2);
	w = sq_wqe(qp, 0);
	CHECK(le64toh(w->wr_id) == 1 && w->opcode == VSTELLAR_WR_SEND);
	CHECK(w->send_flags == (VSTELLAR_SEND_SIGNALED | VSTELLAR_SEND_SOLICITED));
	CHECK(le16toh(w->num_sge) == 2 && w->inline_len == 0 && !w->reserved);
	CHECK(le64toh(wqe_sge(w, 1)->addr) == 0x2000 &&
	      le32toh(wqe_sge(w, 1)->length) == 200 &&
	      le32toh(wqe_sge(w, 1)->lkey) == 8);
	w = sq_wqe(qp, 1);
	CHECK(w->opcode == VSTELLAR_WR_RDMA_WRITE_WITH_IMM);
	CHECK(w->send_flags == VSTELLAR_SEND_INLINE && w->num_sge == 0);
	CHECK(le32toh(w->inline_len) == 10 && le32toh(w->imm_data) == 0x01020304);
	CHECK(le64toh(w->remote_addr) == 0xabc0 && le32toh(w->rkey) == 0x55);
	in = (uint8_t *)(w + 1);
	CHECK(memcmp(in, "0123456789", 10) == 0);

	/* Refused work requests leave the ring alone. */
	bad = (struct ibv_send_wr){ .opcode = IBV_WR_SEND, .sg_list = sg,
				    .num_sge = 5 };
	CHECK(vstellar_post_send(&qp->vqp.qp, &bad, &bad_wr) == EINVAL &&
	      bad_wr == &bad);
	isg.length = 65;
	isg.addr = (uintptr_t)big;
	bad = (struct ibv_send_wr){ .opcode = IBV_WR_SEND,
				    .send_flags = IBV_SEND_INLINE,
				    .sg_list = &isg, .num_sge = 1 };
	CHECK(vstellar_post_send(&qp->vqp.qp, &bad, &bad_wr) == EINVAL);
	bad = (struct ibv_send_wr){ .opcode = IBV_WR_RDMA_READ,
				    .send_flags = IBV_SEND_INLINE,
				    .sg_list = &asg, .num_sge = 1 };
	CHECK(vstellar_post_send(&qp->vqp.qp, &bad, &bad_wr) == EINVAL);
	bad = (struct ibv_send_wr){ .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				    .sg_list = sg, .num_sge = 1 };
	CHECK(vstellar_post_send(&qp->vqp.qp, &bad, &bad_wr) == EINVAL);
	bad = (struct ibv_send_wr){ .opcode = IBV_WR_ATOMIC_CMP_AND_SWP,
				    .sg_list = sg, .num_sge = 2 };
	CHECK(vstellar_post_send(&qp->vqp.qp, &bad, &bad_wr) == EINVAL);
	bad = (struct ibv_send_wr){ .opcode = IBV_WR_LOCAL_INV };
	CHECK(vstellar_post_send(&qp->vqp.qp, &bad, &bad_wr) == EINVAL);
	bad = (struct ibv_send_wr){ .opcode = IBV_WR_SEND,
				    .send_flags = IBV_SEND_IP_CSUM };
	CHECK(vstellar_post_send(&qp->vqp.qp, &bad, &bad_wr) == EINVAL);
	CHECK(le32toh(qp->rec->sq_prod) == 2 && qp->sq.prod == 2);

	/* An atomic with its one 8-byte SGE. */
	bad = (struct ibv_send_wr){ .wr_id = 3,
				    .opcode = IBV_WR_ATOMIC_CMP_AND_SWP,
				    .sg_list = &asg, .num_sge = 1,
				    .wr.atomic = { .remote_addr = 0x10,
						   .compare_add = 5, .swap = 6,
						   .rkey = 4 } };
	CHECK(vstellar_post_send(&qp->vqp.qp, &bad, &bad_wr) == 0);
	w = sq_wqe(qp, 2);
	CHECK(w->opcode == VSTELLAR_WR_ATOMIC_CMP_SWAP &&
	      le64toh(w->compare_add) == 5 && le64toh(w->swap) == 6 &&
	      le32toh(w->rkey) == 4 && le16toh(w->num_sge) == 1);

	/* Fill the ring: the fifth is refused until the device retires one. */
	bad = (struct ibv_send_wr){ .wr_id = 4, .opcode = IBV_WR_SEND };
	CHECK(vstellar_post_send(&qp->vqp.qp, &bad, &bad_wr) == 0);
	bad_wr = NULL;
	CHECK(vstellar_post_send(&qp->vqp.qp, &bad, &bad_wr) == ENOMEM &&
	      bad_wr == &bad);
	qp->rec->sq_cons = htole32(1);
	CHECK(vstellar_post_send(&qp->vqp.qp, &bad, &bad_wr) == 0);
	CHECK(le32toh(qp->rec->sq_prod) == 5);
	/* A consumer index ahead of the producer is no room. */
	qp->rec->sq_cons = htole32(9);
	CHECK(vstellar_post_send(&qp->vqp.qp, &bad, &bad_wr) == ENOMEM);

	/* The wake-up register: written only while the engine is idle. */
	qp->rec->sq_cons = htole32(5);
	*notify = 0xffff;
	CHECK(vstellar_post_send(&qp->vqp.qp, &bad, &bad_wr) == 0);
	CHECK(*notify == 0xffff);
	*(__le32 *)db = htole32(VSTELLAR_ENGINE_IDLE);
	CHECK(vstellar_post_send(&qp->vqp.qp, &bad, &bad_wr) == 0);
	CHECK(*notify == htole16(2));
	*(__le32 *)db = 0;

	qp->vqp.qp.state = IBV_QPS_RESET;
	CHECK(vstellar_post_send(&qp->vqp.qp, &bad, &bad_wr) == EINVAL);
}

static void test_post_recv(void)
{
	struct vstellar_qp *qp = make_qp(4, 2, 2, 0, 1, false);
	struct ibv_sge sg[3] = {
		{ .addr = 0x1000, .length = 100, .lkey = 7 },
		{ .addr = 0x2000, .length = 200, .lkey = 8 },
	};
	struct ibv_recv_wr wr = { .wr_id = 9, .sg_list = sg, .num_sge = 2 };
	struct ibv_recv_wr *bad_wr;
	struct vstellar_recv_wqe *w = (void *)qp->rq.ring;
	struct vstellar_sge *s = (struct vstellar_sge *)(w + 1);

	CHECK(qp->rq.stride == 64);
	CHECK(vstellar_post_recv(&qp->vqp.qp, &wr, &bad_wr) == 0);
	CHECK(le64toh(w->wr_id) == 9 && le16toh(w->num_sge) == 2 &&
	      !w->reserved0 && !w->reserved1);
	CHECK(le64toh(s[1].addr) == 0x2000 && le32toh(s[1].lkey) == 8);
	CHECK(le32toh(qp->rec->rq_prod) == 1);
	wr.num_sge = 3;
	CHECK(vstellar_post_recv(&qp->vqp.qp, &wr, &bad_wr) == EINVAL &&
	      bad_wr == &wr);
	wr.num_sge = 0;
	CHECK(vstellar_post_recv(&qp->vqp.qp, &wr, &bad_wr) == 0);
	CHECK(vstellar_post_recv(&qp->vqp.qp, &wr, &bad_wr) == ENOMEM);
	CHECK(le32toh(qp->rec->rq_prod) == 2);
}

static void test_wr_api(void)
{
	struct vstellar_qp *qp = make_qp(8, 2, 2, 32, 2, true);
	struct ibv_qp_ex *qpx = &qp->vqp.qp_ex;
	struct vstellar_send_wqe *w;
	struct ibv_sge sgl[2] = { { 0x10, 4, 1 }, { 0x20, 8, 2 } };
	char hello[] = "hello", x[] = "x", big[33] = "";

	ibv_wr_start(qpx);
	qpx->wr_id = 11;
	qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send(qpx);
	ibv_wr_set_sge(qpx, 3, 0x100, 50);
	qpx->wr_id = 12;
	qpx->wr_flags = IBV_SEND_INLINE;
	ibv_wr_rdma_write(qpx, 0x77, 0x8000);
	ibv_wr_set_inline_data(qpx, hello, 5);
	qpx->wr_id = 13;
	qpx->wr_flags = 0;
	ibv_wr_atomic_fetch_add(qpx, 0x66, 0x9000, 3);
	ibv_wr_set_sge(qpx, 4, 0x200, 8);
	qpx->wr_id = 14;
	ibv_wr_rdma_read(qpx, 0x55, 0xa000);
	ibv_wr_set_sge_list(qpx, 2, sgl);
	CHECK(ibv_wr_complete(qpx) == 0);
	CHECK(le32toh(qp->rec->sq_prod) == 4);
	w = sq_wqe(qp, 0);
	CHECK(le64toh(w->wr_id) == 11 && w->opcode == VSTELLAR_WR_SEND &&
	      w->send_flags == VSTELLAR_SEND_SIGNALED &&
	      le16toh(w->num_sge) == 1 && le32toh(wqe_sge(w, 0)->lkey) == 3);
	w = sq_wqe(qp, 1);
	CHECK(w->opcode == VSTELLAR_WR_RDMA_WRITE &&
	      w->send_flags == VSTELLAR_SEND_INLINE && w->num_sge == 0 &&
	      le32toh(w->inline_len) == 5 && !memcmp(w + 1, "hello", 5) &&
	      le64toh(w->remote_addr) == 0x8000);
	w = sq_wqe(qp, 2);
	CHECK(w->opcode == VSTELLAR_WR_ATOMIC_FETCH_ADD &&
	      le64toh(w->compare_add) == 3 && le16toh(w->num_sge) == 1);
	w = sq_wqe(qp, 3);
	CHECK(w->opcode == VSTELLAR_WR_RDMA_READ && le16toh(w->num_sge) == 2);

	/* An atomic without its SGE fails the batch, which is taken back. */
	ibv_wr_start(qpx);
	ibv_wr_send(qpx);
	ibv_wr_atomic_cmp_swp(qpx, 1, 0x10, 1, 2);
	CHECK(ibv_wr_complete(qpx) == EINVAL);
	CHECK(qp->sq.prod == 4 && le32toh(qp->rec->sq_prod) == 4);
	ibv_wr_start(qpx);
	ibv_wr_atomic_cmp_swp(qpx, 1, 0x10, 1, 2);
	ibv_wr_set_sge(qpx, 1, 0x10, 4);
	CHECK(ibv_wr_complete(qpx) == EINVAL);
	ibv_wr_start(qpx);
	ibv_wr_rdma_read(qpx, 1, 0x10);
	ibv_wr_set_inline_data(qpx, x, 1);
	CHECK(ibv_wr_complete(qpx) == EINVAL);
	ibv_wr_start(qpx);
	ibv_wr_send(qpx);
	ibv_wr_set_inline_data(qpx, big, sizeof(big));
	CHECK(ibv_wr_complete(qpx) == EINVAL);
	ibv_wr_start(qpx);
	ibv_wr_send(qpx);
	ibv_wr_send(qpx);
	ibv_wr_abort(qpx);
	CHECK(qp->sq.prod == 4 && le32toh(qp->rec->sq_prod) == 4);
	/* Full: 4 more fit, the 9th in one batch does not. */
	ibv_wr_start(qpx);
	for (int i = 0; i < 5; i++)
		ibv_wr_send(qpx);
	CHECK(ibv_wr_complete(qpx) == ENOMEM);
	CHECK(qp->sq.prod == 4);
	ibv_wr_start(qpx);
	CHECK(ibv_wr_complete(qpx) == 0);
}

static struct vstellar_cq *make_cq(uint32_t entries, uint32_t record)
{
	struct vstellar_cq *cq = calloc(1, sizeof(*cq));

	cq->ibv_cq.context = &ctx.ibv_ctx.context;
	pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);
	cq->ring_len = entries * sizeof(struct vstellar_cqe);
	cq->ring = (void *)alloc_ring(cq->ring_len);
	cq->entries = entries;
	cq->cqn = 1;
	cq->rec = vstellar_db_record(&ctx, record);
	return cq;
}

static void put_cqe(struct vstellar_cq *cq, uint32_t i, uint64_t wr_id,
		    uint8_t status, uint8_t op, uint16_t flags, uint32_t imm)
{
	struct vstellar_cqe *c = (void *)&cq->ring[i & (cq->entries - 1)];

	memset(c, 0, sizeof(*c));
	c->wr_id = htole64(wr_id);
	c->status = status;
	c->opcode = op;
	c->wc_flags = htole16(flags);
	c->byte_len = htole32(123);
	c->imm_data = htole32(imm);
	c->qp_num = htole32(5);
	c->src_qp = htole32(6);
}

static void test_cq(void)
{
	struct vstellar_cq *cq = make_cq(4, 5);
	struct ibv_wc wc[4];

	CHECK(vstellar_poll_cq(&cq->ibv_cq, 4, wc) == 0);
	put_cqe(cq, 0, 100, VSTELLAR_WC_SUCCESS, VSTELLAR_WC_SEND, 0, 0);
	put_cqe(cq, 1, 101, VSTELLAR_WC_SUCCESS, VSTELLAR_WC_RECV,
		VSTELLAR_WC_WITH_IMM, 0x0a0b0c0d);
	put_cqe(cq, 2, 102, 99, VSTELLAR_WC_SEND, 0, 0);
	cq->rec->prod = htole32(3);
	CHECK(vstellar_poll_cq(&cq->ibv_cq, 2, wc) == 2);
	CHECK(le32toh(cq->rec->cons) == 2);
	CHECK(wc[0].wr_id == 100 && wc[0].status == IBV_WC_SUCCESS &&
	      wc[0].opcode == IBV_WC_SEND && wc[0].wc_flags == 0 &&
	      wc[0].byte_len == 123 && wc[0].qp_num == 5);
	CHECK(wc[1].opcode == IBV_WC_RECV && wc[1].wc_flags == IBV_WC_WITH_IMM &&
	      be32toh(wc[1].imm_data) == 0x0a0b0c0d && wc[1].src_qp == 6);
	CHECK(vstellar_poll_cq(&cq->ibv_cq, 4, wc) == 1);
	CHECK(wc[0].wr_id == 102 && wc[0].status == IBV_WC_GENERAL_ERR);
	/* Wrap around the ring. */
	for (uint32_t i = 3; i < 7; i++)
		put_cqe(cq, i, 200 + i, VSTELLAR_WC_WR_FLUSH_ERR,
			VSTELLAR_WC_RDMA_READ, 0, 0);
	cq->rec->prod = htole32(7);
	CHECK(vstellar_poll_cq(&cq->ibv_cq, 4, wc) == 4);
	CHECK(wc[3].wr_id == 206 && wc[3].status == IBV_WC_WR_FLUSH_ERR);
	/* A producer more than a ring ahead breaks the CQ for good. */
	cq->rec->prod = htole32(12);
	CHECK(vstellar_poll_cq(&cq->ibv_cq, 4, wc) == -EIO);
	cq->rec->prod = htole32(7);
	CHECK(vstellar_poll_cq(&cq->ibv_cq, 4, wc) == -EIO);

	cq = make_cq(4, 6);
	CHECK(vstellar_req_notify_cq(&cq->ibv_cq, 0) == 0);
	CHECK(le32toh(cq->rec->arm) == (1 << 2 | VSTELLAR_CQ_ARM_NEXT_COMP));
	CHECK(vstellar_req_notify_cq(&cq->ibv_cq, 1) == 0);
	CHECK(le32toh(cq->rec->arm) == (2 << 2 | VSTELLAR_CQ_ARM_SOLICITED));
	cq->arm_sn = VSTELLAR_CQ_ARM_SN_MASK;
	CHECK(vstellar_req_notify_cq(&cq->ibv_cq, 0) == 0);
	CHECK(le32toh(cq->rec->arm) >> 2 == 1);
}

/*
 * The wake-up protocol against an engine thread: it retires send WQEs
 * (one CQE each), and when it finds nothing it goes idle exactly as the
 * device does and sleeps until the register is written. A lost doorbell
 * shows up as the poster waiting for completions that never come.
 */
#define ENGINE_WQES 20000

static struct vstellar_qp *eqp;
static struct vstellar_cq *ecq;
static atomic_bool engine_stop;
static atomic_ulong engine_sleeps;

static uint32_t load32(const __le32 *p)
{
	return vstellar_load_acquire(p);
}

static void *engine(void *arg)
{
	uint32_t cons = 0, cqprod = 0;

	while (!atomic_load(&engine_stop)) {
		uint32_t prod = load32(&eqp->rec->sq_prod);

		if (prod != cons) {
			struct vstellar_send_wqe *w = sq_wqe(eqp, cons);

			while (cqprod - load32(&ecq->rec->cons) >= ecq->entries)
				;
			put_cqe(ecq, cqprod, le64toh(w->wr_id),
				VSTELLAR_WC_SUCCESS, VSTELLAR_WC_SEND, 0, 0);
			cqprod++;
			vstellar_store_release(&ecq->rec->prod, cqprod);
			cons++;
			vstellar_store_release(&eqp->rec->sq_cons, cons);
			continue;
		}
		/* Go idle: flag, fence, rescan, then sleep until kicked. */
		*notify = 0;
		atomic_store_explicit((_Atomic(__le32) *)db,
				      htole32(VSTELLAR_ENGINE_IDLE),
				      memory_order_seq_cst);
		atomic_thread_fence(memory_order_seq_cst);
		if (load32(&eqp->rec->sq_prod) == cons) {
			atomic_fetch_add(&engine_sleeps, 1);
			while (!*notify && !atomic_load(&engine_stop))
				sched_yield();
		}
		atomic_store_explicit((_Atomic(__le32) *)db, 0,
				      memory_order_seq_cst);
	}
	return arg;
}

static void test_wakeup(void)
{
	struct timespec start, now;
	struct ibv_send_wr wr = { .opcode = IBV_WR_SEND };
	struct ibv_send_wr *bad_wr;
	struct ibv_wc wc[16];
	unsigned long posted = 0, done = 0;
	pthread_t t;
	int n;

	eqp = make_qp(16, 2, 1, 0, 3, false);
	ecq = make_cq(8, 4);
	atomic_store(&engine_stop, false);
	pthread_create(&t, NULL, engine, NULL);
	clock_gettime(CLOCK_MONOTONIC, &start);
	while (done < ENGINE_WQES) {
		if (posted < ENGINE_WQES && posted - done < 16) {
			wr.wr_id = posted;
			if (vstellar_post_send(&eqp->vqp.qp, &wr, &bad_wr) == 0)
				posted++;
		}
		n = vstellar_poll_cq(&ecq->ibv_cq, 16, wc);
		CHECK(n >= 0);
		for (int i = 0; i < n; i++)
			CHECK(wc[i].wr_id == done + i);
		done += n;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec > 60) {
			fprintf(stderr, "wake-up: stuck at %lu of %lu posted\n",
				done, posted);
			failures++;
			break;
		}
	}
	atomic_store(&engine_stop, true);
	pthread_join(t, NULL);
	printf("wake-up: %lu WQEs, engine slept %lu times\n", done,
	       atomic_load(&engine_sleeps));
}

/*
 * ibv_post_srq_recv: WQEs into the SRQ's ring, the producer index into its
 * record, no wake-up (the device takes receives as messages arrive); a
 * QP on an SRQ refuses ibv_post_recv.
 */
static void test_post_srq_recv(void)
{
	struct vstellar_srq *srq = calloc(1, sizeof(*srq));
	struct vstellar_qp *qp = make_qp(4, 2, 1, 0, 7, false);
	struct ibv_sge sg = { .addr = 0x3000, .length = 64, .lkey = 9 };
	struct ibv_recv_wr wr2 = { .wr_id = 12, .sg_list = &sg, .num_sge = 1 };
	struct ibv_recv_wr wr = { .wr_id = 11, .sg_list = &sg, .num_sge = 1,
				  .next = &wr2 };
	struct ibv_recv_wr *bad_wr;
	struct vstellar_recv_wqe *w;
	uint16_t kicks = *notify;

	srq->rec = vstellar_db_record(&ctx, 8);
	setup_wq(&srq->wq, 2, 32, 1, &srq->rec->prod, &srq->rec->cons);
	srq->vsrq.srq.context = &ctx.ibv_ctx.context;
	w = (void *)srq->wq.ring;
	*(__le32 *)db = htole32(VSTELLAR_ENGINE_IDLE);
	CHECK(vstellar_post_srq_recv(&srq->vsrq.srq, &wr, &bad_wr) == 0);
	CHECK(le64toh(w[0].wr_id) == 11 && le64toh(w[2].wr_id) == 12);
	CHECK(le32toh(srq->rec->prod) == 2);
	CHECK(*notify == kicks);	/* an idle engine, and still no kick */
	*(__le32 *)db = 0;
	/* Full until the device takes one (cons). */
	CHECK(vstellar_post_srq_recv(&srq->vsrq.srq, &wr2, &bad_wr) == ENOMEM &&
	      bad_wr == &wr2);
	srq->rec->cons = htole32(1);
	CHECK(vstellar_post_srq_recv(&srq->vsrq.srq, &wr2, &bad_wr) == 0);
	CHECK(le32toh(srq->rec->prod) == 3);
	sg.length = 0;
	wr.num_sge = 2;
	wr.next = NULL;
	CHECK(vstellar_post_srq_recv(&srq->vsrq.srq, &wr, &bad_wr) == EINVAL &&
	      bad_wr == &wr);

	qp->on_srq = true;
	wr.num_sge = 1;
	CHECK(vstellar_post_recv(&qp->vqp.qp, &wr, &bad_wr) == EINVAL &&
	      bad_wr == &wr);
	CHECK(le32toh(qp->rec->rq_prod) == 0);
}

int main(void)
{
	setup_ctx();
	test_post_send();
	test_post_recv();
	test_post_srq_recv();
	test_wr_api();
	test_cq();
	test_wakeup();
	if (failures) {
		printf("FAIL: %d checks failed\n", failures);
		return 1;
	}
	printf("PASS\n");
	return 0;
}
