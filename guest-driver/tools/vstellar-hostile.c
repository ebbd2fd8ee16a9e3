// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * vstellar-hostile: a guest program that misuses the device through plain
 * libibverbs, the way a buggy or malicious process could, and checks that
 * it gets what docs/spec.md §13 and §14 promise: an error completion or an
 * errno, its QP in ERR, and nothing else harmed.
 *
 *   vstellar-hostile [-d DEV] [-g GIDX] [-n] CASE [ARGS]
 *
 * CASE is sge-outside, forged-rkey, doorbell-mr, cq-overrun or
 * "stream SECONDS". -n leaves every object to the kernel at exit instead of
 * destroying it. Each check is logged on stderr; the last line on stdout is
 * "vstellar-hostile CASE: PASS ..." or "vstellar-hostile CASE: FAIL ...",
 * and the exit status is 0 only on PASS.
 *
 * Every QP pair is a loopback: two RC QPs of this process on the same
 * device, connected to each other through GID GIDX.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define PAGE 4096
#define WAIT_MS 10000	/* for a completion or an event; TCG guests are slow */
#define QUIET_MS 300	/* for something that must not happen */

static const char *case_name = "?";
static int checks, failures;
static char first_failure[256];
static bool no_cleanup;

static void logf_(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logf_(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

/* check records one expectation; it never stops the case. */
static bool check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool check(bool ok, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	checks++;
	fprintf(stderr, "%s %s\n", ok ? "ok  " : "FAIL", msg);
	if (!ok && failures++ == 0)
		snprintf(first_failure, sizeof(first_failure), "%s", msg);
	return ok;
}

/* die ends the case when it cannot go on (a setup step failed). */
static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	fprintf(stderr, "FAIL %s\n", msg);
	printf("vstellar-hostile %s: FAIL (%s)\n", case_name, msg);
	fflush(stdout);
	exit(2);
}

static int finish(void)
{
	if (failures) {
		printf("vstellar-hostile %s: FAIL (%d of %d checks failed; first: %s)\n",
		       case_name, failures, checks, first_failure);
		return 1;
	}
	printf("vstellar-hostile %s: PASS (%d checks)\n", case_name, checks);
	return 0;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static const char *state_name(int s)
{
	static const char *const n[] = { "RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR" };

	return s >= 0 && s < (int)(sizeof(n) / sizeof(n[0])) ? n[s] : "?";
}

/* The device, its GID and the events seen on its async fd. */
struct dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	union ibv_gid gid;
	enum ibv_mtu mtu;
	uint8_t port;
	int gid_index;
};

#define MAX_EVENTS 64
struct event {
	enum ibv_event_type type;
	void *obj;	/* the QP or CQ: compared, never dereferenced */
};
static struct event events[MAX_EVENTS];
static int nevents;

static void *event_obj(const struct ibv_async_event *e)
{
	switch (e->event_type) {
	case IBV_EVENT_CQ_ERR:
		return e->element.cq;
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		return e->element.qp;
	case IBV_EVENT_SRQ_ERR:
	case IBV_EVENT_SRQ_LIMIT_REACHED:
		return e->element.srq;
	default:
		return NULL;
	}
}

/* read_events collects the async events that arrive within ms. */
static void read_events(struct dev *d, int ms)
{
	uint64_t end = now_ms() + ms;

	for (;;) {
		struct pollfd p = { .fd = d->ctx->async_fd, .events = POLLIN };
		int64_t left = (int64_t)(end - now_ms());
		struct ibv_async_event e;

		if (left < 0)
			left = 0;
		if (poll(&p, 1, (int)left) <= 0)
			return;
		if (ibv_get_async_event(d->ctx, &e))
			return;
		logf_("     event %s (%p)", ibv_event_type_str(e.event_type), event_obj(&e));
		if (nevents < MAX_EVENTS)
			events[nevents++] = (struct event){ e.event_type, event_obj(&e) };
		ibv_ack_async_event(&e);
	}
}

static bool has_event(enum ibv_event_type type, void *obj)
{
	for (int i = 0; i < nevents; i++)
		if (events[i].type == type && events[i].obj == obj)
			return true;
	return false;
}

/* wait_event waits up to ms for the event, keeping the others. */
static bool wait_event(struct dev *d, enum ibv_event_type type, void *obj, int ms)
{
	uint64_t end = now_ms() + ms;

	while (!has_event(type, obj)) {
		if (now_ms() >= end)
			return false;
		read_events(d, 50);
	}
	return true;
}

static int events_for(void *obj)
{
	int n = 0;

	for (int i = 0; i < nevents; i++)
		if (events[i].obj == obj)
			n++;
	return n;
}

static void open_dev(struct dev *d, const char *name, int gid_index)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_port_attr pa;
	struct ibv_device *dev = NULL;
	int flags;

	if (!list || !list[0])
		die("no RDMA device");
	for (int i = 0; list[i]; i++)
		if (!strcmp(ibv_get_device_name(list[i]), name))
			dev = list[i];
	if (!dev)
		die("no device %s", name);
	d->ctx = ibv_open_device(dev);
	ibv_free_device_list(list);
	if (!d->ctx)
		die("ibv_open_device %s: %s", name, strerror(errno));
	d->pd = ibv_alloc_pd(d->ctx);
	if (!d->pd)
		die("ibv_alloc_pd: %s", strerror(errno));
	d->port = 1;
	d->gid_index = gid_index;
	if (ibv_query_port(d->ctx, d->port, &pa))
		die("ibv_query_port: %s", strerror(errno));
	d->mtu = pa.active_mtu;
	if (ibv_query_gid(d->ctx, d->port, gid_index, &d->gid))
		die("ibv_query_gid %d: %s", gid_index, strerror(errno));
	flags = fcntl(d->ctx->async_fd, F_GETFL);
	if (fcntl(d->ctx->async_fd, F_SETFL, flags | O_NONBLOCK))
		die("async fd: %s", strerror(errno));
}

static void close_dev(struct dev *d)
{
	if (no_cleanup)
		return;
	check(ibv_dealloc_pd(d->pd) == 0, "ibv_dealloc_pd");
	check(ibv_close_device(d->ctx) == 0, "ibv_close_device");
}

static struct ibv_cq *make_cq(struct dev *d, int cqe)
{
	struct ibv_cq *cq = ibv_create_cq(d->ctx, cqe, NULL, NULL, 0);

	if (!cq)
		die("ibv_create_cq %d: %s", cqe, strerror(errno));
	return cq;
}

static void destroy_cq(struct ibv_cq *cq)
{
	if (!no_cleanup)
		check(ibv_destroy_cq(cq) == 0, "ibv_destroy_cq");
}

static struct ibv_mr *make_mr(struct dev *d, void *addr, size_t len, int access)
{
	struct ibv_mr *mr = ibv_reg_mr(d->pd, addr, len, access);

	if (!mr)
		die("ibv_reg_mr %zu bytes: %s", len, strerror(errno));
	return mr;
}

static void dereg(struct ibv_mr *mr)
{
	if (!no_cleanup)
		check(ibv_dereg_mr(mr) == 0, "ibv_dereg_mr");
}

static void *alloc_buf(size_t len, int fill)
{
	void *p = aligned_alloc(PAGE, len);

	if (!p)
		die("out of memory");
	memset(p, fill, len);
	return p;
}

/* A loopback pair: a is the requester, b its responder. */
struct pair {
	struct ibv_qp *a, *b;
};

static struct ibv_qp *make_qp(struct dev *d, struct ibv_cq *cq, int depth)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = cq,
		.recv_cq = cq,
		.cap = {
			.max_send_wr = depth,
			.max_recv_wr = depth,
			.max_send_sge = 1,
			.max_recv_sge = 1,
		},
		.qp_type = IBV_QPT_RC,
	};
	struct ibv_qp *qp = ibv_create_qp(d->pd, &ia);

	if (!qp)
		die("ibv_create_qp: %s", strerror(errno));
	return qp;
}

static int connect_qp(struct dev *d, struct ibv_qp *qp, uint32_t dest)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = d->port,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC,
	};
	int err;

	err = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			    IBV_QP_ACCESS_FLAGS);
	if (err)
		return err;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = d->mtu;
	a.dest_qp_num = dest;
	a.rq_psn = 0;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = d->gid;
	a.ah_attr.grh.sgid_index = d->gid_index;
	a.ah_attr.grh.hop_limit = 1;
	a.ah_attr.port_num = d->port;
	err = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			    IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			    IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	if (err)
		return err;
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 3;
	a.rnr_retry = 3;
	a.sq_psn = 0;
	a.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			     IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

static struct pair make_pair(struct dev *d, struct ibv_cq *cqa, struct ibv_cq *cqb, int depth)
{
	struct pair p = { make_qp(d, cqa, depth), make_qp(d, cqb, depth) };
	int err;

	err = connect_qp(d, p.a, p.b->qp_num);
	if (!err)
		err = connect_qp(d, p.b, p.a->qp_num);
	if (err)
		die("connecting QPs %u and %u: %s", p.a->qp_num, p.b->qp_num, strerror(err));
	return p;
}

static void destroy_qp(struct ibv_qp *qp)
{
	if (!no_cleanup)
		check(ibv_destroy_qp(qp) == 0, "ibv_destroy_qp %u", qp->qp_num);
}

static void destroy_pair(struct pair *p)
{
	destroy_qp(p->a);
	destroy_qp(p->b);
}

static int qp_state(struct ibv_qp *qp)
{
	struct ibv_qp_init_attr ia;
	struct ibv_qp_attr a;

	if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia))
		return -errno;
	return a.qp_state;
}

static int post(struct ibv_qp *qp, enum ibv_wr_opcode op, uint64_t wr_id, void *laddr,
		uint32_t len, uint32_t lkey, void *raddr, uint32_t rkey, bool signaled)
{
	struct ibv_sge sge = { .addr = (uintptr_t)laddr, .length = len, .lkey = lkey };
	struct ibv_send_wr wr = {
		.wr_id = wr_id,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = op,
		.send_flags = signaled ? IBV_SEND_SIGNALED : 0,
		.wr.rdma = { .remote_addr = (uintptr_t)raddr, .rkey = rkey },
	};
	struct ibv_send_wr *bad;

	return ibv_post_send(qp, &wr, &bad);
}

static int post_recv(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t len, uint32_t lkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr = { .wr_id = wr_id, .sg_list = &sge, .num_sge = 1 };
	struct ibv_recv_wr *bad;

	return ibv_post_recv(qp, &wr, &bad);
}

/* wait_wc polls cq for one completion for up to ms; false on timeout. */
static bool wait_wc(struct ibv_cq *cq, struct ibv_wc *wc, int ms)
{
	uint64_t end = now_ms() + ms;

	for (;;) {
		int n = ibv_poll_cq(cq, 1, wc);

		if (n < 0)
			die("ibv_poll_cq: %d", n);
		if (n == 1)
			return true;
		if (now_ms() >= end)
			return false;
		usleep(200);
	}
}

/* expect_wc waits for one completion on cq and checks its status and owner. */
static bool expect_wc(struct ibv_cq *cq, struct ibv_qp *qp, uint64_t wr_id,
		      enum ibv_wc_status want, const char *what)
{
	struct ibv_wc wc;

	if (!wait_wc(cq, &wc, WAIT_MS))
		return check(false, "%s: no completion within %d ms (want %s)", what, WAIT_MS,
			     ibv_wc_status_str(want));
	return check(wc.status == want && wc.wr_id == wr_id && wc.qp_num == qp->qp_num,
		     "%s: completion %s wr_id %" PRIu64 " qp %u (want %s wr_id %" PRIu64 " qp %u)",
		     what, ibv_wc_status_str(wc.status), wc.wr_id, wc.qp_num,
		     ibv_wc_status_str(want), wr_id, qp->qp_num);
}

static void expect_no_wc(struct ibv_cq *cq, const char *what)
{
	struct ibv_wc wc;

	if (wait_wc(cq, &wc, QUIET_MS))
		check(false, "%s: unexpected completion %s wr_id %" PRIu64 " qp %u", what,
		      ibv_wc_status_str(wc.status), wc.wr_id, wc.qp_num);
	else
		check(true, "%s: no completion", what);
}

static void expect_state(struct ibv_qp *qp, int want, const char *what)
{
	int s = qp_state(qp);

	check(s == want, "%s: QP %u in %s (want %s)", what, qp->qp_num,
	      s < 0 ? strerror(-s) : state_name(s), state_name(want));
}

static bool all_bytes(const void *p, int c, size_t len)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < len; i++)
		if (b[i] != (unsigned char)c)
			return false;
	return true;
}

/*
 * works checks that the pair moves data: a WRITE, a READ and a SEND of
 * len bytes, inside the MR mr (which holds at least 4 * len bytes).
 */
static void works(struct ibv_cq *cqa, struct ibv_cq *cqb, struct pair *p,
		  struct ibv_mr *mr, uint32_t len, const char *what)
{
	unsigned char *src = mr->addr, *dst = src + len, *rd = dst + len, *rcv = rd + len;
	char w[128];

	for (uint32_t i = 0; i < len; i++)
		src[i] = (unsigned char)(i * 7 + 1);
	memset(dst, 0, 3 * len);
	snprintf(w, sizeof(w), "%s: WRITE", what);
	if (check(!post(p->a, IBV_WR_RDMA_WRITE, 1, src, len, mr->lkey, dst, mr->rkey, true),
		  "%s posted", w) && expect_wc(cqa, p->a, 1, IBV_WC_SUCCESS, w))
		check(!memcmp(src, dst, len), "%s: data arrived", w);
	snprintf(w, sizeof(w), "%s: READ", what);
	if (check(!post(p->a, IBV_WR_RDMA_READ, 2, rd, len, mr->lkey, dst, mr->rkey, true),
		  "%s posted", w) && expect_wc(cqa, p->a, 2, IBV_WC_SUCCESS, w))
		check(!memcmp(src, rd, len), "%s: data arrived", w);
	snprintf(w, sizeof(w), "%s: SEND", what);
	if (!check(!post_recv(p->b, 3, rcv, len, mr->lkey), "%s: receive posted", w))
		return;
	if (check(!post(p->a, IBV_WR_SEND, 4, src, len, mr->lkey, NULL, 0, true),
		  "%s posted", w) && expect_wc(cqa, p->a, 4, IBV_WC_SUCCESS, w) &&
	    expect_wc(cqb, p->b, 3, IBV_WC_SUCCESS, "SEND's receive"))
		check(!memcmp(src, rcv, len), "%s: data arrived", w);
}

/* a random 32-bit key that is none of the keys in avoid */
static uint32_t forge_key(const uint32_t *avoid, int n)
{
	for (;;) {
		uint32_t k = (uint32_t)random() << 16 ^ (uint32_t)random();
		bool used = false;

		for (int i = 0; i < n; i++)
			used |= avoid[i] == k;
		if (!used)
			return k;
	}
}

/*
 * after_error checks what must hold once requester QP a got an error
 * completion: a in ERR with its async event, the flush of a later WQE, and
 * its responder b untouched.
 */
static void after_error(struct dev *d, struct ibv_cq *cqa, struct ibv_cq *cqb, struct pair *p,
			enum ibv_event_type ev, struct ibv_mr *mr, const char *what)
{
	char w[128];

	expect_state(p->a, IBV_QPS_ERR, what);
	check(wait_event(d, ev, p->a, WAIT_MS), "%s: %s event for QP %u", what,
	      ibv_event_type_str(ev), p->a->qp_num);
	/* a WQE posted to a QP in ERR is flushed (§13.3) */
	snprintf(w, sizeof(w), "%s: WQE after the error", what);
	if (check(!post(p->a, IBV_WR_RDMA_WRITE, 99, mr->addr, 8, mr->lkey, mr->addr, mr->rkey,
			true), "%s posted", w))
		expect_wc(cqa, p->a, 99, IBV_WC_WR_FLUSH_ERR, w);
	expect_no_wc(cqb, "responder");
	read_events(d, QUIET_MS);
	check(events_for(p->b) == 0, "%s: no event for responder QP %u", what, p->b->qp_num);
	expect_state(p->b, IBV_QPS_RTS, "responder");
}

static int case_sge_outside(struct dev *d)
{
	const size_t len = 4 * PAGE, tlen = 8 * PAGE;
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_cq *cqa = make_cq(d, 64), *cqb = make_cq(d, 64);
	unsigned char *buf = alloc_buf(len, 0x11), *unreg = alloc_buf(PAGE, 0x22);
	unsigned char *tbuf = alloc_buf(tlen, 0x33);
	struct ibv_mr *mr = make_mr(d, buf, len, access), *tmr = make_mr(d, tbuf, tlen, access);
	struct pair by = make_pair(d, cqa, cqb, 16);
	struct ibv_mr *dead;
	uint32_t stale, keys[5];
	/* every target is valid: only the local SGE is wrong */
	struct {
		const char *name;
		enum ibv_wr_opcode op;
		void *addr;
		uint32_t len;
		int key; /* 0: the MR's lkey, 1: stale, 2: forged, 3: zero */
	} cases[] = {
		{ "WRITE with a stale lkey", IBV_WR_RDMA_WRITE, buf, 64, 1 },
		{ "SEND with a forged lkey", IBV_WR_SEND, buf, 64, 2 },
		{ "WRITE with lkey 0", IBV_WR_RDMA_WRITE, buf, 64, 3 },
		{ "WRITE from memory in no MR", IBV_WR_RDMA_WRITE, unreg, 64, 0 },
		{ "SEND running past the MR's end", IBV_WR_SEND, buf + len - 32, 64, 0 },
		{ "WRITE one byte longer than the MR", IBV_WR_RDMA_WRITE, buf, (uint32_t)len + 1, 0 },
	};

	dead = make_mr(d, unreg, PAGE, access);
	stale = dead->lkey;
	check(ibv_dereg_mr(dead) == 0, "deregistering the MR whose lkey goes stale");
	keys[0] = mr->lkey, keys[1] = mr->rkey, keys[2] = tmr->lkey, keys[3] = tmr->rkey;
	keys[4] = stale;
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct pair p = make_pair(d, cqa, cqb, 16);
		uint32_t lkey = cases[i].key == 1 ? stale : cases[i].key == 2 ? forge_key(keys, 5) :
				cases[i].key == 3 ? 0 : mr->lkey;

		logf_("---- %s (QP %u -> %u, lkey 0x%x)", cases[i].name, p.a->qp_num, p.b->qp_num, lkey);
		nevents = 0;
		memset(tbuf, 0x33, tlen);
		/* a failed SEND must not consume the responder's receive */
		check(!post_recv(p.b, 50, tbuf + 4 * PAGE, 4 * PAGE, tmr->lkey), "receive posted");
		if (check(!post(p.a, cases[i].op, 7, cases[i].addr, cases[i].len, lkey,
				tbuf, tmr->rkey, true), "%s: posted", cases[i].name))
			expect_wc(cqa, p.a, 7, IBV_WC_LOC_PROT_ERR, cases[i].name);
		check(all_bytes(tbuf, 0x33, tlen), "%s: target memory untouched", cases[i].name);
		after_error(d, cqa, cqb, &p, IBV_EVENT_QP_FATAL, mr, cases[i].name);
		check(events_for(by.a) == 0 && events_for(by.b) == 0, "no event for the bystander pair");
		destroy_pair(&p);
	}
	logf_("---- a fresh pair, and the bystander pair on the same CQs");
	{
		struct pair p = make_pair(d, cqa, cqb, 16);

		works(cqa, cqb, &p, mr, 512, "fresh pair");
		destroy_pair(&p);
	}
	expect_state(by.a, IBV_QPS_RTS, "bystander");
	works(cqa, cqb, &by, mr, 512, "bystander pair");
	destroy_pair(&by);
	dereg(mr);
	dereg(tmr);
	destroy_cq(cqa);
	destroy_cq(cqb);
	return 0;
}

static int case_forged_rkey(struct dev *d)
{
	int remote = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_cq *cqa = make_cq(d, 64), *cqb = make_cq(d, 64);
	unsigned char *lbuf = alloc_buf(4 * PAGE, 0x3c), *rbuf = alloc_buf(PAGE, 0xa5);
	unsigned char *rdead = alloc_buf(PAGE, 0x5a), *rlocal = alloc_buf(PAGE, 0x69);
	struct ibv_mr *lmr = make_mr(d, lbuf, 4 * PAGE, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *rmr = make_mr(d, rbuf, PAGE, remote);
	struct ibv_mr *local = make_mr(d, rlocal, PAGE, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *dead = make_mr(d, rdead, PAGE, remote), *good;
	struct pair by = make_pair(d, cqa, cqb, 16);
	uint32_t stale = dead->rkey, keys[6], forged;
	struct {
		const char *name;
		enum ibv_wr_opcode op;
		void *raddr;
		uint32_t len;
		/* 0: the MR's rkey, 1: forged, 2: stale, 3: a local-only MR's, 4: zero */
		int key;
	} cases[] = {
		{ "WRITE with a forged rkey", IBV_WR_RDMA_WRITE, rbuf, 64, 1 },
		{ "READ with a forged rkey", IBV_WR_RDMA_READ, rbuf, 64, 1 },
		{ "WRITE with rkey 0", IBV_WR_RDMA_WRITE, rbuf, 64, 4 },
		{ "READ with rkey 0", IBV_WR_RDMA_READ, rbuf, 64, 4 },
		{ "WRITE with a deregistered rkey", IBV_WR_RDMA_WRITE, rdead, 64, 2 },
		{ "READ with a deregistered rkey", IBV_WR_RDMA_READ, rdead, 64, 2 },
		{ "WRITE with a local-only MR's key", IBV_WR_RDMA_WRITE, rlocal, 64, 3 },
		{ "WRITE past the end of the peer's MR", IBV_WR_RDMA_WRITE, rbuf + PAGE - 32, 64, 0 },
		{ "READ past the end of the peer's MR", IBV_WR_RDMA_READ, rbuf + PAGE - 32, 64, 0 },
	};

	check(ibv_dereg_mr(dead) == 0, "deregistering the MR whose rkey goes stale");
	keys[0] = lmr->lkey, keys[1] = lmr->rkey, keys[2] = rmr->rkey, keys[3] = rmr->lkey;
	keys[4] = local->lkey, keys[5] = stale;
	forged = forge_key(keys, 6);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct pair p = make_pair(d, cqa, cqb, 16);
		uint32_t rkey = cases[i].key == 1 ? forged : cases[i].key == 2 ? stale :
				cases[i].key == 3 ? local->rkey : cases[i].key == 4 ? 0 : rmr->rkey;

		logf_("---- %s (QP %u -> %u, rkey 0x%x)", cases[i].name, p.a->qp_num, p.b->qp_num, rkey);
		nevents = 0;
		memset(lbuf, 0x3c, PAGE);
		if (check(!post(p.a, cases[i].op, 8, lbuf, cases[i].len, lmr->lkey, cases[i].raddr,
				rkey, true), "%s: posted", cases[i].name))
			expect_wc(cqa, p.a, 8, IBV_WC_REM_ACCESS_ERR, cases[i].name);
		check(all_bytes(rbuf, 0xa5, PAGE) && all_bytes(rdead, 0x5a, PAGE) &&
		      all_bytes(rlocal, 0x69, PAGE), "%s: the responder's memory is untouched",
		      cases[i].name);
		check(all_bytes(lbuf, 0x3c, PAGE), "%s: the requester's buffer is untouched",
		      cases[i].name);
		after_error(d, cqa, cqb, &p, IBV_EVENT_QP_ACCESS_ERR, lmr, cases[i].name);
		check(events_for(by.a) == 0 && events_for(by.b) == 0, "no event for the bystander pair");
		destroy_pair(&p);
	}
	logf_("---- a fresh pair with the right keys, and the bystander pair");
	good = make_mr(d, lbuf, 4 * PAGE, remote);
	{
		struct pair p = make_pair(d, cqa, cqb, 16);

		works(cqa, cqb, &p, good, 1024, "fresh pair");
		destroy_pair(&p);
	}
	expect_state(by.a, IBV_QPS_RTS, "bystander");
	works(cqa, cqb, &by, good, 1024, "bystander pair");
	destroy_pair(&by);
	dereg(good);
	dereg(lmr);
	dereg(rmr);
	dereg(local);
	destroy_cq(cqa);
	destroy_cq(cqb);
	return 0;
}

struct mapping {
	uintptr_t start, end;
	char desc[512];
};

/* uverbs_mappings lists this process's mappings of /dev/infiniband/uverbs*. */
static int uverbs_mappings(struct mapping *m, int max)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int n = 0;

	if (!f)
		die("/proc/self/maps: %s", strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		unsigned long s, e;

		if (!strstr(line, "/dev/infiniband/uverbs") || sscanf(line, "%lx-%lx", &s, &e) != 2)
			continue;
		if (n < max) {
			line[strcspn(line, "\n")] = 0;
			m[n] = (struct mapping){ .start = s, .end = e };
			snprintf(m[n].desc, sizeof(m[n].desc), "%s", line);
			n++;
		}
	}
	fclose(f);
	return n;
}

/* refuse checks that ibv_reg_mr over [addr, addr + len) fails with an errno. */
static void refuse(struct dev *d, void *addr, size_t len, int access, const char *what)
{
	struct ibv_mr *mr;

	errno = 0;
	mr = ibv_reg_mr(d->pd, addr, len, access);
	if (mr) {
		check(false, "ibv_reg_mr over %s (%p + %zu, access 0x%x) succeeded: lkey 0x%x",
		      what, addr, len, access, mr->lkey);
		ibv_dereg_mr(mr);
		return;
	}
	check(errno != 0, "ibv_reg_mr over %s (%p + %zu, access 0x%x) fails: %s", what, addr,
	      len, access, strerror(errno));
}

static int case_doorbell_mr(struct dev *d)
{
	static const int accesses[] = {
		IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
		IBV_ACCESS_LOCAL_WRITE,
		0, /* read only: no FOLL_WRITE when the kernel pins it */
	};
	struct ibv_cq *cqa = make_cq(d, 64), *cqb = make_cq(d, 64);
	unsigned char *buf = alloc_buf(4 * PAGE, 0);
	struct ibv_mr *mr = make_mr(d, buf, 4 * PAGE, accesses[0]);
	struct pair p = make_pair(d, cqa, cqb, 16);
	struct mapping m[32];
	int n = uverbs_mappings(m, 32);

	/* a doorbell region and the rings of 2 CQs and 2 QPs, at least */
	check(n >= 1, "%d mappings of /dev/infiniband/uverbs*", n);
	for (int i = 0; i < n; i++) {
		void *s = (void *)m[i].start;
		size_t len = m[i].end - m[i].start;
		void *before;

		logf_("---- %s", m[i].desc);
		for (size_t j = 0; j < sizeof(accesses) / sizeof(accesses[0]); j++) {
			refuse(d, s, len, accesses[j], "the whole mapping");
			refuse(d, s, PAGE < len ? PAGE : len, accesses[j], "its first page");
			refuse(d, (char *)s + len - 8, 8, accesses[j], "its last 8 bytes");
		}
		/* an MR that starts in ordinary memory and runs into the mapping */
		before = mmap((char *)s - PAGE, PAGE, PROT_READ | PROT_WRITE,
			      MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
		if (before == (char *)s - PAGE) {
			memset(before, 0, PAGE);
			refuse(d, before, 2 * PAGE, accesses[0], "a page of anonymous memory and the mapping");
			munmap(before, PAGE);
		} else {
			if (before != MAP_FAILED)
				munmap(before, PAGE);
			logf_("     (the page before it is taken: no straddling MR)");
		}
	}
	logf_("---- the pair still works");
	works(cqa, cqb, &p, mr, 512, "pair");
	destroy_pair(&p);
	dereg(mr);
	destroy_cq(cqa);
	destroy_cq(cqb);
	return 0;
}

static int case_cq_overrun(struct dev *d)
{
	struct ibv_cq *small = make_cq(d, 4), *cqb = make_cq(d, 64);
	struct ibv_cq *cqby = make_cq(d, 64), *cqby2 = make_cq(d, 64);
	unsigned char *buf = alloc_buf(4 * PAGE, 0);
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *mr = make_mr(d, buf, 4 * PAGE, access);
	struct pair by = make_pair(d, cqby, cqby2, 16);
	struct pair p = make_pair(d, small, cqb, 64);
	int n = 2 * small->cqe + 8, posted = 0, polled = 0;
	struct ibv_wc wc;

	if (n > 60)
		n = 60;
	logf_("---- %d signalled WRITEs on QP %u into a CQ of %d entries, never polled",
	      n, p.a->qp_num, small->cqe);
	nevents = 0;
	for (int i = 0; i < n; i++) {
		int err = post(p.a, IBV_WR_RDMA_WRITE, 100 + i, buf, 8, mr->lkey, buf + PAGE,
			       mr->rkey, true);

		if (err) {
			logf_("     posting WRITE %d: %s", i, strerror(err));
			break;
		}
		posted++;
	}
	check(posted > small->cqe + 1, "posted %d WRITEs, more than the CQ holds", posted);
	check(wait_event(d, IBV_EVENT_CQ_ERR, small, WAIT_MS), "CQ_ERR event for the overrun CQ");
	check(wait_event(d, IBV_EVENT_QP_FATAL, p.a, WAIT_MS), "QP_FATAL event for QP %u",
	      p.a->qp_num);
	expect_state(p.a, IBV_QPS_ERR, "QP on the overrun CQ");
	expect_state(p.b, IBV_QPS_RTS, "its responder (on another CQ)");
	read_events(d, QUIET_MS);
	check(events_for(p.b) == 0 && events_for(cqb) == 0, "no event for the responder or its CQ");
	check(events_for(by.a) == 0 && events_for(by.b) == 0 && events_for(cqby) == 0 &&
	      events_for(cqby2) == 0, "no event for the bystander pair or its CQs");
	expect_no_wc(cqb, "responder's CQ");
	/* it held what it promised before it overflowed, and can still be read */
	while (polled <= posted && ibv_poll_cq(small, 1, &wc) == 1)
		polled++;
	check(polled >= small->cqe && polled < posted,
	      "polled %d completions from the overrun CQ of %d entries", polled, small->cqe);
	logf_("---- the bystander pair, on its own CQ");
	expect_state(by.a, IBV_QPS_RTS, "bystander");
	works(cqby, cqby2, &by, mr, 512, "bystander pair");
	logf_("---- a fresh pair on a fresh CQ");
	{
		struct ibv_cq *cq = make_cq(d, 64), *cq2 = make_cq(d, 64);
		struct pair q = make_pair(d, cq, cq2, 16);

		works(cq, cq2, &q, mr, 512, "fresh pair");
		destroy_pair(&q);
		destroy_cq(cq);
		destroy_cq(cq2);
	}
	/* the QPs go first: they hold the CQ in error (§13.4) */
	destroy_pair(&p);
	destroy_cq(small);
	destroy_pair(&by);
	dereg(mr);
	destroy_cq(cqb);
	destroy_cq(cqby);
	destroy_cq(cqby2);
	return 0;
}

static int case_stream(struct dev *d, int seconds)
{
	const uint32_t chunk = 64 * 1024, depth = 16;
	const size_t len = 2 * depth * chunk;
	struct ibv_cq *cq = make_cq(d, 2 * depth), *cqb = make_cq(d, 16);
	unsigned char *buf = alloc_buf(len, 0x77);
	int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *mr = make_mr(d, buf, len, access);
	struct pair p = make_pair(d, cq, cqb, depth);
	uint64_t end = now_ms() + (uint64_t)seconds * 1000, done = 0, bytes = 0, wr = 0;
	uint32_t inflight = 0;
	struct ibv_wc wc[16];

	printf("vstellar-hostile stream: running for %d s\n", seconds);
	fflush(stdout);
	while (now_ms() < end || inflight) {
		int n;

		while (inflight < depth && now_ms() < end) {
			/* WRITEs from the first half into the second, READs back */
			uint32_t slot = wr % depth;
			enum ibv_wr_opcode op = wr % 2 ? IBV_WR_RDMA_READ : IBV_WR_RDMA_WRITE;
			unsigned char *l = buf + (size_t)slot * chunk, *r = l + depth * chunk;
			int err = post(p.a, op, wr, l, chunk, mr->lkey, r, mr->rkey, true);

			if (err)
				die("posting work request %" PRIu64 ": %s", wr, strerror(err));
			wr++;
			inflight++;
		}
		n = ibv_poll_cq(cq, 16, wc);
		if (n < 0)
			die("ibv_poll_cq: %d", n);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				die("work request %" PRIu64 ": %s", wc[i].wr_id,
				    ibv_wc_status_str(wc[i].status));
			done++;
			bytes += chunk;
		}
		inflight -= n;
		if (!n)
			usleep(100);
	}
	check(done == wr, "%" PRIu64 " of %" PRIu64 " work requests completed, %" PRIu64 " MiB",
	      done, wr, bytes >> 20);
	destroy_pair(&p);
	dereg(mr);
	destroy_cq(cq);
	destroy_cq(cqb);
	return 0;
}

static void usage(void)
{
	fprintf(stderr,
		"usage: vstellar-hostile [-d DEV] [-g GID_INDEX] [-n] CASE\n"
		"cases: sge-outside, forged-rkey, doorbell-mr, cq-overrun, stream SECONDS\n"
		"-n: leave every object to the kernel at exit\n");
	exit(2);
}

int main(int argc, char **argv)
{
	const char *devname = "vstellar0";
	int gid_index = 0, opt;
	struct dev d = { 0 };

	setvbuf(stderr, NULL, _IOLBF, 0);
	while ((opt = getopt(argc, argv, "d:g:n")) != -1) {
		switch (opt) {
		case 'd':
			devname = optarg;
			break;
		case 'g':
			gid_index = atoi(optarg);
			break;
		case 'n':
			no_cleanup = true;
			break;
		default:
			usage();
		}
	}
	if (optind >= argc)
		usage();
	case_name = argv[optind];
	srandom((unsigned int)(time(NULL) ^ getpid()));
	open_dev(&d, devname, gid_index);
	if (!strcmp(case_name, "sge-outside"))
		case_sge_outside(&d);
	else if (!strcmp(case_name, "forged-rkey"))
		case_forged_rkey(&d);
	else if (!strcmp(case_name, "doorbell-mr"))
		case_doorbell_mr(&d);
	else if (!strcmp(case_name, "cq-overrun"))
		case_cq_overrun(&d);
	else if (!strcmp(case_name, "stream") && optind + 1 < argc)
		case_stream(&d, atoi(argv[optind + 1]));
	else
		usage();
	close_dev(&d);
	return finish();
}
