// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * libvstellar: shared receive queues (device ABI 1.1, spec 10.7). Receive
 * WQEs go straight into the mapped ring and the producer index into the
 * SRQ's doorbell record; the device takes them for every QP on the SRQ as
 * messages arrive, so posting needs no wake-up.
 */
#include <config.h>

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "vstellar.h"

/* Checks what the kernel says about the SRQ it created for attr. */
static int vstellar_check_srq_resp(struct vstellar_context *ctx,
				   const struct ibv_srq_attr *attr,
				   const struct vstellar_create_srq_uresp *r)
{
	if (!r->size || (r->size & (r->size - 1)) ||
	    r->size > VSTELLAR_CEILING_MAX_SRQ_WR || r->size < attr->max_wr ||
	    r->max_sge > VSTELLAR_CEILING_MAX_SRQ_SGE ||
	    r->max_sge < attr->max_sge ||
	    r->stride != vstellar_recv_stride(r->max_sge) ||
	    r->ring_mmap_len < (uint64_t)r->size * r->stride ||
	    r->ring_mmap_len > SIZE_MAX || r->ring_mmap_key > INT64_MAX ||
	    !vstellar_db_record(ctx, r->doorbell_index)) {
		verbs_err(&ctx->ibv_ctx,
			  "vstellar: SRQ %u: bad response: %u x %u (%u SGEs), doorbell %u of %u\n",
			  r->srqn, r->size, r->stride, r->max_sge,
			  r->doorbell_index, ctx->db_records);
		return EPROTO;
	}
	return 0;
}

struct ibv_srq *vstellar_create_srq(struct ibv_pd *pd,
				    struct ibv_srq_init_attr *attr)
{
	struct vstellar_context *ctx = to_vctx(pd->context);
	struct uvstellar_create_srq_resp resp = {};
	struct uvstellar_create_srq cmd = {};
	const struct vstellar_create_srq_uresp *r = &resp.drv_payload;
	struct ibv_srq_attr want = attr->attr;
	struct vstellar_srq *srq;
	int err;

	srq = calloc(1, sizeof(*srq));
	if (!srq) {
		errno = ENOMEM;
		return NULL;
	}
	err = ibv_cmd_create_srq(pd, &srq->vsrq.srq, attr, &cmd.ibv_cmd,
				 sizeof(cmd), &resp.ibv_resp, sizeof(resp));
	if (err)
		goto err_free;
	err = vstellar_check_srq_resp(ctx, &want, r);
	if (err)
		goto err_destroy;
	err = vstellar_map_wq(ctx, &srq->wq, r->size, r->stride, r->max_sge,
			      r->ring_mmap_len, r->ring_mmap_key);
	if (err) {
		verbs_err(&ctx->ibv_ctx,
			  "vstellar: SRQ %u: mapping the ring: %s\n", r->srqn,
			  strerror(err));
		goto err_destroy;
	}
	srq->srqn = r->srqn;
	srq->rec = vstellar_db_record(ctx, r->doorbell_index);
	srq->wq.prod_db = &srq->rec->prod;
	srq->wq.cons_db = &srq->rec->cons;
	/* CREATE_SRQ zeroed the record; the counters start where it says. */
	srq->wq.cons = srq->wq.prod = vstellar_load_acquire(srq->wq.cons_db);
	attr->attr.max_wr = r->size;
	attr->attr.max_sge = r->max_sge;
	return &srq->vsrq.srq;

err_destroy:
	ibv_cmd_destroy_srq(&srq->vsrq.srq);
err_free:
	free(srq);
	errno = err;
	return NULL;
}

int vstellar_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr,
			int attr_mask)
{
	struct ibv_modify_srq cmd = {};

	/* The device arms the limit; it does not resize SRQs (spec 16). */
	if (attr_mask & ~IBV_SRQ_LIMIT)
		return EOPNOTSUPP;
	return ibv_cmd_modify_srq(srq, attr, attr_mask, &cmd, sizeof(cmd));
}

int vstellar_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	struct ibv_query_srq cmd = {};

	return ibv_cmd_query_srq(srq, attr, &cmd, sizeof(cmd));
}

int vstellar_destroy_srq(struct ibv_srq *ibsrq)
{
	struct vstellar_srq *srq = to_vsrq(ibsrq);
	int err;

	err = ibv_cmd_destroy_srq(ibsrq);
	if (err)
		return err;
	vstellar_unmap_wq(&srq->wq);
	free(srq);
	return 0;
}

int vstellar_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
			   struct ibv_recv_wr **bad_wr)
{
	return vstellar_wq_post_recv(&to_vsrq(ibsrq)->wq, wr, bad_wr);
}
