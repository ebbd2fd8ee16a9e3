// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * vstellar-srq: checks shared receive queues through libibverbs, between
 * QPs of one device connected in pairs: NQP senders with their own receive
 * queues, NQP receivers on one SRQ. Every message lands once, in the WQE
 * its completion names, on the QP it arrived at; the SRQ limit event and
 * the last-WQE event reach ibv_get_async_event; the provider refuses
 * ibv_post_recv on a QP of an SRQ and resizing, the kernel an SRQ in use.
 *
 *	vstellar-srq [DEVICE]
 *
 * Prints one line per failed check and PASS or FAIL at the end (exit
 * status 0 or 1). internal/realvm/build-rdma.sh builds it into the guest
 * image with the other programs of guest-driver/tools; e2e/realvm runs it.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <infiniband/verbs.h>

#include "vstellar-tool.h"

#define NQP 4
#define PER_QP 8
#define MSG 256
#define SRQ_WR 64

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static union ibv_gid gid;
static struct ibv_cq *scq, *rcq;
static struct ibv_srq *srq;
static struct ibv_qp *snd[NQP], *rcv[NQP];
static struct ibv_mr *smr, *rmr;
static uint8_t *sbuf, *rbuf;

static int to_rts(struct ibv_qp *qp, uint32_t dest)
{
	return vstellar_to_rts(qp, dest, &gid, IBV_ACCESS_LOCAL_WRITE);
}

static int setup(const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_srq_init_attr sa = { .attr = { SRQ_WR, 1, 0 } };
	struct ibv_device_attr da;
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
	    ibv_query_device(ctx, &da))
		return -1;
	CHECK(da.max_srq > 0 && da.max_srq_wr >= SRQ_WR && da.max_srq_sge >= 1,
	      "device attributes: %d SRQs of %d WRs, %d SGEs", da.max_srq,
	      da.max_srq_wr, da.max_srq_sge);
	pd = ibv_alloc_pd(ctx);
	sbuf = aligned_alloc(4096, NQP * PER_QP * MSG);
	rbuf = aligned_alloc(4096, NQP * PER_QP * MSG);
	if (!pd || !sbuf || !rbuf)
		return -1;
	smr = ibv_reg_mr(pd, sbuf, NQP * PER_QP * MSG, IBV_ACCESS_LOCAL_WRITE);
	rmr = ibv_reg_mr(pd, rbuf, NQP * PER_QP * MSG, IBV_ACCESS_LOCAL_WRITE);
	scq = ibv_create_cq(ctx, 2 * NQP * PER_QP, NULL, NULL, 0);
	rcq = ibv_create_cq(ctx, 2 * NQP * PER_QP, NULL, NULL, 0);
	srq = ibv_create_srq(pd, &sa);
	if (!smr || !rmr || !scq || !rcq || !srq) {
		printf("FAIL create: %s\n", strerror(errno));
		return -1;
	}
	CHECK(sa.attr.max_wr >= SRQ_WR && sa.attr.max_sge >= 1,
	      "SRQ created with %u WRs, %u SGEs", sa.attr.max_wr,
	      sa.attr.max_sge);
	for (i = 0; i < NQP; i++) {
		struct ibv_qp_init_attr qa = {
			.send_cq = scq, .recv_cq = scq, .qp_type = IBV_QPT_RC,
			.cap = { PER_QP, 1, 1, 1, 0 },
		};
		struct ibv_qp_init_attr qb = {
			.send_cq = rcq, .recv_cq = rcq, .srq = srq,
			.qp_type = IBV_QPT_RC, .cap = { 1, 0, 1, 0, 0 },
		};

		snd[i] = ibv_create_qp(pd, &qa);
		rcv[i] = ibv_create_qp(pd, &qb);
		if (!snd[i] || !rcv[i]) {
			printf("FAIL create_qp: %s\n", strerror(errno));
			return -1;
		}
		if (to_rts(snd[i], rcv[i]->qp_num) ||
		    to_rts(rcv[i], snd[i]->qp_num)) {
			printf("FAIL connecting: %s\n", strerror(errno));
			return -1;
		}
	}
	return 0;
}

static int poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n)
{
	int got = 0;

	for (long i = 0; got < n && i < 200000000L; i++) {
		int k = ibv_poll_cq(cq, n - got, wc + got);

		if (k < 0)
			return k;
		got += k;
	}
	return got;
}

/* Messages from every sender land in the SRQ's WQEs, each exactly once. */
static void test_many_qps(void)
{
	struct ibv_wc wc[NQP * PER_QP];
	int seen[NQP * PER_QP] = {};
	int next[NQP] = {};
	int i, n;

	for (i = 0; i < NQP * PER_QP; i++) {
		struct ibv_sge sge = { (uintptr_t)rbuf + i * MSG, MSG,
				       rmr->lkey };
		struct ibv_recv_wr wr = { .wr_id = 1000 + i, .sg_list = &sge,
					  .num_sge = 1 }, *bad;

		CHECK(!ibv_post_srq_recv(srq, &wr, &bad), "post_srq_recv %d",
		      i);
	}
	for (i = 0; i < NQP * PER_QP; i++)
		memset(sbuf + i * MSG, i + 1, MSG);
	for (i = 0; i < NQP * PER_QP; i++) {
		struct ibv_sge sge = { (uintptr_t)sbuf + i * MSG, MSG,
				       smr->lkey };
		struct ibv_send_wr wr = { .wr_id = i, .sg_list = &sge,
					  .num_sge = 1, .opcode = IBV_WR_SEND,
					  .send_flags = IBV_SEND_SIGNALED },
				   *bad;

		CHECK(!ibv_post_send(snd[i % NQP], &wr, &bad), "post_send %d",
		      i);
	}
	n = poll_n(scq, wc, NQP * PER_QP);
	CHECK(n == NQP * PER_QP, "%d send completions", n);
	for (i = 0; i < n; i++)
		CHECK(wc[i].status == IBV_WC_SUCCESS, "send %" PRIu64 ": %s",
		      wc[i].wr_id, ibv_wc_status_str(wc[i].status));
	n = poll_n(rcq, wc, NQP * PER_QP);
	CHECK(n == NQP * PER_QP, "%d receive completions", n);
	for (i = 0; i < n; i++) {
		int w = (int)wc[i].wr_id - 1000, q, m;

		CHECK(wc[i].status == IBV_WC_SUCCESS &&
		      wc[i].opcode == IBV_WC_RECV && wc[i].byte_len == MSG &&
		      w >= 0 && w < NQP * PER_QP && !seen[w],
		      "recv wr_id %" PRIu64 ": %s, %u bytes", wc[i].wr_id,
		      ibv_wc_status_str(wc[i].status), wc[i].byte_len);
		if (w < 0 || w >= NQP * PER_QP)
			continue;
		seen[w] = 1;
		for (q = 0; q < NQP && rcv[q]->qp_num != wc[i].qp_num; q++)
			;
		CHECK(q < NQP && wc[i].src_qp == snd[q]->qp_num,
		      "recv on QP %u from QP %u", wc[i].qp_num, wc[i].src_qp);
		if (q == NQP)
			continue;
		/* The QP's messages complete in order: the k-th of sender q. */
		m = next[q]++ * NQP + q;
		CHECK(rbuf[w * MSG] == (uint8_t)(m + 1) &&
		      rbuf[w * MSG + MSG - 1] == (uint8_t)(m + 1),
		      "WQE %d holds message %d's bytes (%u), want %d", w,
		      rbuf[w * MSG] - 1, m, m);
	}
	printf("%d messages of %d senders in %d WQEs of one SRQ\n", n, NQP, n);
}

static int wait_async(enum ibv_event_type type, const char *what)
{
	struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
	struct ibv_async_event ev;

	for (;;) {
		if (poll(&p, 1, 5000) != 1) {
			CHECK(0, "no %s event", what);
			return -1;
		}
		if (ibv_get_async_event(ctx, &ev))
			return -1;
		ibv_ack_async_event(&ev);
		if (ev.event_type == type)
			return 0;
		printf("(event %s while waiting for %s)\n",
		       ibv_event_type_str(ev.event_type), what);
	}
}

/* The limit, the last WQE event and the refusals. */
static void test_events_and_refusals(void)
{
	struct ibv_srq_attr at = { .srq_limit = 4 };
	struct ibv_qp_attr qa = { .qp_state = IBV_QPS_ERR };
	struct ibv_recv_wr wr = { .wr_id = 1 }, *bad;
	int err;

	/* The SRQ is empty: arming any limit fires at once. */
	CHECK(!ibv_modify_srq(srq, &at, IBV_SRQ_LIMIT), "arm limit: %s",
	      strerror(errno));
	if (!wait_async(IBV_EVENT_SRQ_LIMIT_REACHED, "SRQ limit"))
		printf("SRQ limit event\n");
	memset(&at, 0, sizeof(at));
	CHECK(!ibv_query_srq(srq, &at) && at.max_wr >= SRQ_WR &&
	      at.srq_limit == 0, "query_srq: %u WRs, limit %u", at.max_wr,
	      at.srq_limit);
	at.max_wr = 2 * SRQ_WR;
	CHECK(ibv_modify_srq(srq, &at, IBV_SRQ_MAX_WR) != 0,
	      "resizing an SRQ succeeded");
	err = ibv_post_recv(rcv[0], &wr, &bad);
	CHECK(err && bad == &wr, "post_recv on a QP of an SRQ: %d", err);

	CHECK(!ibv_modify_qp(rcv[1], &qa, IBV_QP_STATE), "QP to ERR: %s",
	      strerror(errno));
	if (!wait_async(IBV_EVENT_QP_LAST_WQE_REACHED, "last WQE"))
		printf("last WQE event\n");
	err = ibv_destroy_srq(srq);
	CHECK(err == EBUSY, "destroy of an SRQ in use: %d", err);
}

int main(int argc, char **argv)
{
	int i;

	if (setup(argc > 1 ? argv[1] : NULL)) {
		printf("FAIL setup: %s\n", strerror(errno));
		return 1;
	}
	test_many_qps();
	test_events_and_refusals();
	for (i = 0; i < NQP; i++) {
		CHECK(!ibv_destroy_qp(snd[i]) && !ibv_destroy_qp(rcv[i]),
		      "destroy QPs %d", i);
	}
	CHECK(!ibv_destroy_srq(srq), "destroy SRQ: %s", strerror(errno));
	ibv_destroy_cq(scq);
	ibv_destroy_cq(rcq);
	ibv_dereg_mr(smr);
	ibv_dereg_mr(rmr);
	ibv_dealloc_pd(pd);
	ibv_close_device(ctx);
	printf(failures ? "FAIL (%d)\n" : "PASS\n", failures);
	return failures != 0;
}
