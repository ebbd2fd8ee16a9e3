// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * vstellar-loopback: checks the paths of libvstellar that rdma-core's tools
 * and perftest do not reach on this device (perftest uses the ibv_wr_* API
 * and inline data only for devices it knows), between two RC QPs of one
 * device connected to each other: the extended send API with every opcode,
 * inline data, immediates, atomics, SGE lists, ring wrap-around, completion
 * events, a QP reset and reconnect, and the provider's refusals.
 *
 *	vstellar-loopback [DEVICE]
 *
 * Prints one line per check and PASS or FAIL at the end (exit status 0 or
 * 1). internal/realvm/build-rdma.sh builds it with the other programs of
 * guest-driver/tools into the guest image; e2e/realvm runs it.
 */
#include <endian.h>
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "vstellar-tool.h"

#define BUF 8192
#define DEPTH 16

struct side {
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_qp_ex *qpx;	/* NULL for the classic QP */
	struct ibv_mr *mr;
	uint8_t *buf;
};

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_comp_channel *chan;
static union ibv_gid gid;
static struct side a, b;
static struct ibv_qp_cap bcap;	/* b's caps as created (rounded up) */

/* Waits for one completion on cq (busy polling, bounded). */
static int poll_one(struct ibv_cq *cq, struct ibv_wc *wc)
{
	for (long i = 0; i < 200000000L; i++) {
		int n = ibv_poll_cq(cq, 1, wc);

		if (n)
			return n;
	}
	return 0;
}

static void expect_wc(struct ibv_cq *cq, const char *what, uint64_t wr_id,
		      enum ibv_wc_opcode op, struct ibv_wc *out)
{
	struct ibv_wc wc = {};
	int n = poll_one(cq, &wc);

	CHECK(n == 1, "%s: poll returned %d", what, n);
	if (n != 1)
		return;
	CHECK(wc.status == IBV_WC_SUCCESS && wc.wr_id == wr_id &&
	      wc.opcode == op,
	      "%s: status %s, wr_id %" PRIu64 ", opcode %d (want %" PRIu64
	      ", %d)", what, ibv_wc_status_str(wc.status), wc.wr_id,
	      wc.opcode, wr_id, op);
	if (out)
		*out = wc;
}

static void post_recv(struct side *s, uint64_t wr_id, uint32_t off,
		      uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)s->buf + off, len, s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge,
				  .num_sge = 1 };
	struct ibv_recv_wr *bad;

	CHECK(ibv_post_recv(s->qp, &wr, &bad) == 0, "post_recv");
}

static int to_rts(struct ibv_qp *qp, uint32_t dest)
{
	return vstellar_to_rts(qp, dest, &gid,
			       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
}

static int setup(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_qp_init_attr_ex ax = {};
	struct ibv_qp_init_attr ai = {};
	struct ibv_port_attr pa;
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		     IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	int i;

	for (i = 0; list && list[i]; i++)
		if (!name || !strcmp(ibv_get_device_name(list[i]), name))
			break;
	if (!list || !list[i]) {
		printf("FAIL no device %s\n", name ? name : "");
		return -1;
	}
	ctx = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!ctx || ibv_query_gid(ctx, 1, 0, &gid) ||
	    ibv_query_port(ctx, 1, &pa))
		return -1;
	/* The device routes by GID: UCX and NCCL go global on this flag. */
	CHECK(pa.flags & IBV_QPF_GRH_REQUIRED, "port flags %#x", pa.flags);
	pd = ibv_alloc_pd(ctx);
	chan = ibv_create_comp_channel(ctx);
	if (!pd || !chan)
		return -1;
	a.buf = aligned_alloc(4096, BUF);
	b.buf = aligned_alloc(4096, BUF);
	a.mr = ibv_reg_mr(pd, a.buf, BUF, access);
	b.mr = ibv_reg_mr(pd, b.buf, BUF, access);
	a.cq = ibv_create_cq(ctx, 2 * DEPTH, NULL, NULL, 0);
	b.cq = ibv_create_cq(ctx, 2 * DEPTH, NULL, chan, 0);
	if (!a.mr || !b.mr || !a.cq || !b.cq)
		return -1;

	/* a: the extended API; b: the classic one. */
	ax.send_cq = ax.recv_cq = a.cq;
	ax.qp_type = IBV_QPT_RC;
	ax.cap = (struct ibv_qp_cap){ DEPTH, DEPTH, 2, 2, 64 };
	ax.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
	ax.pd = pd;
	ax.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
			    IBV_QP_EX_WITH_RDMA_WRITE |
			    IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
			    IBV_QP_EX_WITH_RDMA_READ |
			    IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
			    IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
	a.qp = ibv_create_qp_ex(ctx, &ax);
	if (!a.qp) {
		printf("FAIL create_qp_ex: %s\n", strerror(errno));
		return -1;
	}
	a.qpx = ibv_qp_to_qp_ex(a.qp);
	ai.send_cq = ai.recv_cq = b.cq;
	ai.qp_type = IBV_QPT_RC;
	ai.cap = (struct ibv_qp_cap){ DEPTH, DEPTH, 2, 2, 64 };
	b.qp = ibv_create_qp(pd, &ai);
	if (!b.qp || !a.qpx) {
		printf("FAIL create_qp: %s\n", strerror(errno));
		return -1;
	}
	bcap = ai.cap;
	printf("QPs %u and %u, caps %u/%u WRs, %u/%u SGEs, %u inline\n",
	       a.qp->qp_num, b.qp->qp_num, ai.cap.max_send_wr,
	       ai.cap.max_recv_wr, ai.cap.max_send_sge, ai.cap.max_recv_sge,
	       ai.cap.max_inline_data);
	if (to_rts(a.qp, b.qp->qp_num) || to_rts(b.qp, a.qp->qp_num)) {
		printf("FAIL connecting: %s\n", strerror(errno));
		return -1;
	}
	return 0;
}

/* ibv_wr_*: SEND_WITH_IMM of inline data, WRITE of an SGE list. */
static void test_wr_send_write(void)
{
	struct ibv_sge sgl[2] = {
		{ (uintptr_t)a.buf + 100, 10, a.mr->lkey },
		{ (uintptr_t)a.buf + 200, 20, a.mr->lkey },
	};
	char msg[] = "inline via wr api";
	struct ibv_wc wc;

	memset(b.buf, 0, BUF);
	memset(a.buf + 100, 'x', 10);
	memset(a.buf + 200, 'y', 20);
	post_recv(&b, 50, 0, 64);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 1;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_send_imm(a.qpx, htobe32(0x12345678));
	ibv_wr_set_inline_data(a.qpx, msg, sizeof(msg));
	a.qpx->wr_id = 2;
	ibv_wr_rdma_write(a.qpx, b.mr->rkey, (uintptr_t)b.buf + 1000);
	ibv_wr_set_sge_list(a.qpx, 2, sgl);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect_wc(a.cq, "send_imm", 1, IBV_WC_SEND, NULL);
	expect_wc(a.cq, "write", 2, IBV_WC_RDMA_WRITE, &wc);
	CHECK(wc.byte_len == 30, "write byte_len %u", wc.byte_len);
	expect_wc(b.cq, "recv", 50, IBV_WC_RECV, &wc);
	CHECK(wc.wc_flags & IBV_WC_WITH_IMM &&
	      be32toh(wc.imm_data) == 0x12345678 &&
	      wc.byte_len == sizeof(msg) && wc.src_qp == a.qp->qp_num &&
	      wc.qp_num == b.qp->qp_num,
	      "recv flags %#x imm %#x len %u src %u", wc.wc_flags,
	      be32toh(wc.imm_data), wc.byte_len, wc.src_qp);
	CHECK(!memcmp(b.buf, msg, sizeof(msg)), "inline payload");
	CHECK(!memcmp(b.buf + 1000, "xxxxxxxxxxyyyyyyyyyyyyyyyyyyyy", 30),
	      "write payload");
	printf("ok   wr_send_imm inline, wr_rdma_write SGE list\n");
}

/* ibv_wr_*: WRITE_WITH_IMM into a zero-SGE receive, READ back. */
static void test_wr_write_imm_read(void)
{
	struct ibv_wc wc;

	memset(a.buf, 0, BUF);
	memcpy(a.buf, "write-with-imm", 14);
	{
		struct ibv_recv_wr wr = { .wr_id = 51 }, *bad;

		CHECK(ibv_post_recv(b.qp, &wr, &bad) == 0, "zero-SGE recv");
	}
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 3;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_rdma_write_imm(a.qpx, b.mr->rkey, (uintptr_t)b.buf + 2000,
			      htobe32(7));
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf, 14);
	a.qpx->wr_id = 4;
	ibv_wr_rdma_read(a.qpx, b.mr->rkey, (uintptr_t)b.buf + 2000);
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)a.buf + 500, 14);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect_wc(a.cq, "write_imm", 3, IBV_WC_RDMA_WRITE, NULL);
	expect_wc(a.cq, "read", 4, IBV_WC_RDMA_READ, &wc);
	CHECK(wc.byte_len == 14, "read byte_len %u", wc.byte_len);
	expect_wc(b.cq, "recv write_imm", 51, IBV_WC_RECV_RDMA_WITH_IMM, &wc);
	CHECK(be32toh(wc.imm_data) == 7 && wc.byte_len == 14,
	      "imm %u len %u", be32toh(wc.imm_data), wc.byte_len);
	CHECK(!memcmp(a.buf + 500, "write-with-imm", 14), "read payload");
	printf("ok   wr_rdma_write_imm, wr_rdma_read\n");
}

/* ibv_wr_*: FETCH_ADD and CMP_SWAP on the peer's 8-byte word. */
static void test_wr_atomics(void)
{
	uint64_t *word = (uint64_t *)(b.buf + 4096);
	uint64_t *res = (uint64_t *)(a.buf + 4096);

	*word = 100;
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 5;
	a.qpx->wr_flags = IBV_SEND_SIGNALED;
	ibv_wr_atomic_fetch_add(a.qpx, b.mr->rkey, (uintptr_t)word, 5);
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)res, 8);
	a.qpx->wr_id = 6;
	ibv_wr_atomic_cmp_swp(a.qpx, b.mr->rkey, (uintptr_t)word, 105, 7);
	ibv_wr_set_sge(a.qpx, a.mr->lkey, (uintptr_t)(res + 1), 8);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	expect_wc(a.cq, "fetch_add", 5, IBV_WC_FETCH_ADD, NULL);
	expect_wc(a.cq, "cmp_swp", 6, IBV_WC_COMP_SWAP, NULL);
	CHECK(res[0] == 100 && res[1] == 105 && *word == 7,
	      "fetch_add got %" PRIu64 ", cmp_swp got %" PRIu64
	      ", word %" PRIu64, res[0], res[1], *word);
	printf("ok   wr_atomic_fetch_add, wr_atomic_cmp_swp\n");
}

/* What the provider refuses before the device sees it. */
static void test_refusals(void)
{
	struct ibv_sge sge[64];
	struct ibv_send_wr wr = { .opcode = IBV_WR_SEND, .sg_list = sge,
				  .num_sge = bcap.max_send_sge + 1 }, *bad = NULL;
	char big[65] = "";
	struct ibv_sge isge = { (uintptr_t)big, bcap.max_inline_data + 1, 0 };
	struct ibv_recv_wr rwr = { .sg_list = sge,
				   .num_sge = bcap.max_recv_sge + 1 }, *rbad;
	int i;

	for (i = 0; i < 64; i++)
		sge[i] = (struct ibv_sge){ (uintptr_t)b.buf, 8, b.mr->lkey };
	CHECK(bcap.max_send_sge < 64 && bcap.max_recv_sge < 64 &&
	      bcap.max_inline_data < sizeof(big), "caps");
	CHECK(ibv_post_send(b.qp, &wr, &bad) == EINVAL && bad == &wr,
	      "one SGE more than max_send_sge");
	wr = (struct ibv_send_wr){ .opcode = IBV_WR_SEND, .sg_list = &isge,
				   .num_sge = 1, .send_flags = IBV_SEND_INLINE };
	CHECK(ibv_post_send(b.qp, &wr, &bad) == EINVAL,
	      "one byte more than max_inline_data");
	wr = (struct ibv_send_wr){ .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
				   .sg_list = sge, .num_sge = 2 };
	CHECK(ibv_post_send(b.qp, &wr, &bad) == EINVAL, "atomic, 2 SGEs");
	wr = (struct ibv_send_wr){ .opcode = IBV_WR_BIND_MW };
	CHECK(ibv_post_send(b.qp, &wr, &bad) == EINVAL, "BIND_MW");
	CHECK(ibv_post_recv(b.qp, &rwr, &rbad) == EINVAL && rbad == &rwr,
	      "one receive SGE more than max_recv_sge");
	ibv_wr_start(a.qpx);
	ibv_wr_atomic_fetch_add(a.qpx, b.mr->rkey, (uintptr_t)b.buf, 1);
	CHECK(ibv_wr_complete(a.qpx) == EINVAL, "atomic without its SGE");
	ibv_wr_start(a.qpx);
	ibv_wr_rdma_read(a.qpx, b.mr->rkey, (uintptr_t)b.buf);
	ibv_wr_set_inline_data(a.qpx, big, 1);
	CHECK(ibv_wr_complete(a.qpx) == EINVAL, "inline READ");
	ibv_wr_start(a.qpx);
	ibv_wr_send(a.qpx);
	ibv_wr_abort(a.qpx);
	printf("ok   refusals (EINVAL, nothing posted)\n");
}

/*
 * Classic API: inline SENDs from b, many times round the rings, with every
 * fourth one signalled, then a completion event on b's CQ.
 */
static void test_classic_wrap_and_event(void)
{
	struct ibv_sge sge;
	struct ibv_send_wr wr = { .opcode = IBV_WR_SEND, .sg_list = &sge,
				  .num_sge = 1 }, *bad;
	struct ibv_cq *ecq;
	struct ibv_wc wc;
	void *ectx;
	int i, posted = 0, recvd = 0, sent = 0, n;
	char msg[40];

	for (i = 0; i < DEPTH; i++)
		post_recv(&a, 1000 + i, 64 * i, 64);
	while (recvd < 10 * DEPTH) {
		if (posted < 10 * DEPTH && posted - sent < DEPTH &&
		    posted - recvd < DEPTH) {
			n = snprintf(msg, sizeof(msg), "message %d", posted);
			sge = (struct ibv_sge){ (uintptr_t)msg, n + 1, 0 };
			wr.wr_id = posted;
			wr.send_flags = IBV_SEND_INLINE |
					(posted % 4 == 3 ? IBV_SEND_SIGNALED : 0);
			if (ibv_post_send(b.qp, &wr, &bad) == 0)
				posted++;
		}
		n = ibv_poll_cq(b.cq, 1, &wc);
		if (n == 1) {
			CHECK(wc.status == IBV_WC_SUCCESS &&
			      wc.wr_id == (uint64_t)sent + 3,
			      "send %" PRIu64 ": %s", wc.wr_id,
			      ibv_wc_status_str(wc.status));
			sent += 4;
		}
		n = ibv_poll_cq(a.cq, 1, &wc);
		if (n == 1) {
			snprintf(msg, sizeof(msg), "message %d", recvd);
			CHECK(wc.status == IBV_WC_SUCCESS &&
			      !strcmp((char *)a.buf + (wc.wr_id - 1000) * 64,
				      msg),
			      "receive %d: %s", recvd,
			      ibv_wc_status_str(wc.status));
			post_recv(&a, wc.wr_id, (wc.wr_id - 1000) * 64, 64);
			recvd++;
		}
	}
	while (sent < posted && poll_one(b.cq, &wc) == 1)
		sent += 4;
	printf("ok   %d inline SENDs round %d-slot rings\n", recvd, DEPTH);

	/* Arm, send, wait for the event. */
	CHECK(ibv_req_notify_cq(b.cq, 0) == 0, "req_notify");
	post_recv(&b, 77, 0, 64);
	ibv_wr_start(a.qpx);
	a.qpx->wr_id = 8;
	a.qpx->wr_flags = 0;
	ibv_wr_send(a.qpx);
	ibv_wr_set_inline_data(a.qpx, msg, 8);
	CHECK(ibv_wr_complete(a.qpx) == 0, "wr_complete");
	{
		struct pollfd pfd = { .fd = chan->fd, .events = POLLIN };

		CHECK(poll(&pfd, 1, 10000) == 1, "no completion event in 10 s");
	}
	CHECK(ibv_get_cq_event(chan, &ecq, &ectx) == 0 && ecq == b.cq,
	      "get_cq_event");
	ibv_ack_cq_events(b.cq, 1);
	expect_wc(b.cq, "recv after event", 77, IBV_WC_RECV, NULL);
	printf("ok   completion event\n");
}

/* RESET restarts the producer counters; the QPs work again afterwards. */
static void test_reset(void)
{
	struct ibv_qp_attr at = { .qp_state = IBV_QPS_RESET };

	CHECK(ibv_modify_qp(a.qp, &at, IBV_QP_STATE) == 0, "a to RESET");
	CHECK(ibv_modify_qp(b.qp, &at, IBV_QP_STATE) == 0, "b to RESET");
	ibv_wr_start(a.qpx);
	ibv_wr_send(a.qpx);
	CHECK(ibv_wr_complete(a.qpx) == EINVAL, "posting in RESET");
	CHECK(to_rts(a.qp, b.qp->qp_num) == 0 && to_rts(b.qp, a.qp->qp_num) == 0,
	      "reconnect: %s", strerror(errno));
	test_wr_send_write();
	printf("ok   RESET and reconnect\n");
}

int main(int argc, char **argv)
{
	if (setup(argc > 1 ? argv[1] : NULL)) {
		printf("FAIL setup: %s\n", strerror(errno));
		return 1;
	}
	test_wr_send_write();
	test_wr_write_imm_read();
	test_wr_atomics();
	test_refusals();
	test_classic_wrap_and_event();
	test_reset();
	ibv_destroy_qp(a.qp);
	ibv_destroy_qp(b.qp);
	ibv_destroy_cq(a.cq);
	ibv_destroy_cq(b.cq);
	ibv_dereg_mr(a.mr);
	ibv_dereg_mr(b.mr);
	ibv_destroy_comp_channel(chan);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf(failures ? "FAIL (%d)\n" : "PASS\n", failures);
	return failures != 0;
}
