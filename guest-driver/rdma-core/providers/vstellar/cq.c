// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * libvstellar: completion queues. The ring and the CQ's doorbell record are
 * mapped; polling and arming are memory accesses (spec 6.5, 10.6, 11.3).
 */
#include <config.h>

#include <endian.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "vstellar.h"

/* The device's values are the verbs ones; the compiler checks it. */
static_assert(VSTELLAR_WC_SUCCESS == IBV_WC_SUCCESS &&
	      VSTELLAR_WC_LOC_LEN_ERR == IBV_WC_LOC_LEN_ERR &&
	      VSTELLAR_WC_LOC_QP_OP_ERR == IBV_WC_LOC_QP_OP_ERR &&
	      VSTELLAR_WC_LOC_PROT_ERR == IBV_WC_LOC_PROT_ERR &&
	      VSTELLAR_WC_WR_FLUSH_ERR == IBV_WC_WR_FLUSH_ERR &&
	      VSTELLAR_WC_BAD_RESP_ERR == IBV_WC_BAD_RESP_ERR &&
	      VSTELLAR_WC_LOC_ACCESS_ERR == IBV_WC_LOC_ACCESS_ERR &&
	      VSTELLAR_WC_REM_INV_REQ_ERR == IBV_WC_REM_INV_REQ_ERR &&
	      VSTELLAR_WC_REM_ACCESS_ERR == IBV_WC_REM_ACCESS_ERR &&
	      VSTELLAR_WC_REM_OP_ERR == IBV_WC_REM_OP_ERR &&
	      VSTELLAR_WC_RETRY_EXC_ERR == IBV_WC_RETRY_EXC_ERR &&
	      VSTELLAR_WC_RNR_RETRY_EXC_ERR == IBV_WC_RNR_RETRY_EXC_ERR &&
	      VSTELLAR_WC_FATAL_ERR == IBV_WC_FATAL_ERR &&
	      VSTELLAR_WC_GENERAL_ERR == IBV_WC_GENERAL_ERR,
	      "CQE status values differ from IBV_WC_*");
static_assert(VSTELLAR_WC_SEND == IBV_WC_SEND &&
	      VSTELLAR_WC_RDMA_WRITE == IBV_WC_RDMA_WRITE &&
	      VSTELLAR_WC_RDMA_READ == IBV_WC_RDMA_READ &&
	      VSTELLAR_WC_COMP_SWAP == IBV_WC_COMP_SWAP &&
	      VSTELLAR_WC_FETCH_ADD == IBV_WC_FETCH_ADD &&
	      VSTELLAR_WC_RECV == IBV_WC_RECV &&
	      VSTELLAR_WC_RECV_RDMA_WITH_IMM == IBV_WC_RECV_RDMA_WITH_IMM,
	      "CQE opcode values differ from IBV_WC_*");
static_assert(VSTELLAR_WC_WITH_IMM == IBV_WC_WITH_IMM,
	      "CQE flag values differ from IBV_WC_*");
static_assert(sizeof(struct vstellar_cqe) == VSTELLAR_CQE_SIZE, "CQE size");

/* The statuses the device may write (spec 13.1); anything else is its bug. */
static bool vstellar_wc_status_ok(uint8_t s)
{
	switch (s) {
	case VSTELLAR_WC_SUCCESS:
	case VSTELLAR_WC_LOC_LEN_ERR:
	case VSTELLAR_WC_LOC_QP_OP_ERR:
	case VSTELLAR_WC_LOC_PROT_ERR:
	case VSTELLAR_WC_WR_FLUSH_ERR:
	case VSTELLAR_WC_BAD_RESP_ERR:
	case VSTELLAR_WC_LOC_ACCESS_ERR:
	case VSTELLAR_WC_REM_INV_REQ_ERR:
	case VSTELLAR_WC_REM_ACCESS_ERR:
	case VSTELLAR_WC_REM_OP_ERR:
	case VSTELLAR_WC_RETRY_EXC_ERR:
	case VSTELLAR_WC_RNR_RETRY_EXC_ERR:
	case VSTELLAR_WC_FATAL_ERR:
	case VSTELLAR_WC_GENERAL_ERR:
		return true;
	}
	return false;
}

static bool vstellar_wc_opcode_ok(uint8_t op)
{
	switch (op) {
	case VSTELLAR_WC_SEND:
	case VSTELLAR_WC_RDMA_WRITE:
	case VSTELLAR_WC_RDMA_READ:
	case VSTELLAR_WC_COMP_SWAP:
	case VSTELLAR_WC_FETCH_ADD:
	case VSTELLAR_WC_RECV:
	case VSTELLAR_WC_RECV_RDMA_WITH_IMM:
		return true;
	}
	return false;
}

static void vstellar_cqe_to_wc(const struct vstellar_cqe *cqe,
			       struct ibv_wc *wc)
{
	uint16_t flags = le16toh(cqe->wc_flags);
	uint8_t status = cqe->status;
	uint8_t opcode = cqe->opcode;

	wc->wr_id = le64toh(cqe->wr_id);
	wc->vendor_err = le32toh(cqe->vendor_err);
	if (!vstellar_wc_status_ok(status) || !vstellar_wc_opcode_ok(opcode)) {
		/* Keep what the device wrote where the caller can see it. */
		wc->status = IBV_WC_GENERAL_ERR;
		wc->vendor_err = (uint32_t)status << 8 | opcode;
		opcode = VSTELLAR_WC_SEND;
		flags = 0;
	} else {
		wc->status = status;
	}
	wc->opcode = opcode;
	wc->byte_len = le32toh(cqe->byte_len);
	wc->qp_num = le32toh(cqe->qp_num);
	wc->src_qp = le32toh(cqe->src_qp);
	if (flags & VSTELLAR_WC_WITH_IMM) {
		/*
		 * The device carries imm_data as the requester wrote it; the
		 * requester wrote the host-order value of the __be32.
		 */
		wc->imm_data = htobe32(le32toh(cqe->imm_data));
		wc->wc_flags = IBV_WC_WITH_IMM;
	} else {
		wc->imm_data = 0;
		wc->wc_flags = 0;
	}
	wc->pkey_index = 0;
	wc->slid = 0;
	wc->sl = 0;
	wc->dlid_path_bits = 0;
}

int vstellar_poll_cq(struct ibv_cq *ibcq, int ne, struct ibv_wc *wc)
{
	struct vstellar_cq *cq = to_vcq(ibcq);
	uint32_t prod, avail, mask, i;
	int ret;

	if (ne <= 0)
		return 0;

	pthread_spin_lock(&cq->lock);
	if (cq->broken) {
		ret = -EIO;
		goto out;
	}
	/* Acquire: every CQE below prod is complete. */
	prod = vstellar_load_acquire(&cq->rec->prod);
	avail = prod - cq->cons;
	if (avail > cq->entries) {
		/*
		 * More than a ring ahead (or behind): the device overwrote
		 * CQEs not consumed yet, or the index is garbage; nothing in
		 * the ring can be trusted any more.
		 */
		cq->broken = true;
		verbs_err(verbs_get_ctx(ibcq->context),
			  "vstellar: CQ %u: producer %u, consumer %u, %u entries: CQ unusable\n",
			  cq->cqn, prod, cq->cons, cq->entries);
		ret = -EIO;
		goto out;
	}
	if (avail > (uint32_t)ne)
		avail = ne;
	mask = cq->entries - 1;
	for (i = 0; i < avail; i++)
		vstellar_cqe_to_wc(&cq->ring[(cq->cons + i) & mask], &wc[i]);
	if (avail) {
		cq->cons += avail;
		/* Release: the CQEs are read before the device may reuse them. */
		vstellar_store_release(&cq->rec->cons, cq->cons);
	}
	ret = avail;
out:
	pthread_spin_unlock(&cq->lock);
	return ret;
}

int vstellar_req_notify_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct vstellar_cq *cq = to_vcq(ibcq);
	uint32_t sn;

	pthread_spin_lock(&cq->lock);
	/* A new sequence number is what arms (spec 11.3); 0 is never used. */
	sn = (cq->arm_sn + 1) & VSTELLAR_CQ_ARM_SN_MASK;
	if (!sn)
		sn = 1;
	cq->arm_sn = sn;
	vstellar_store_release(&cq->rec->arm,
			       vstellar_cq_arm_word(sn, solicited_only ?
						    VSTELLAR_CQ_ARM_SOLICITED :
						    VSTELLAR_CQ_ARM_NEXT_COMP));
	/*
	 * The caller polls once more after arming. The device stores prod
	 * and then loads arm; without store->load ordering here both sides
	 * could miss the other's store and the completion would neither be
	 * polled nor notified.
	 */
	atomic_thread_fence(memory_order_seq_cst);
	pthread_spin_unlock(&cq->lock);
	return 0;
}

static int vstellar_check_cq_resp(struct vstellar_context *ctx, int cqe,
				  const struct vstellar_create_cq_uresp *r)
{
	if (!r->entries || r->entries & (r->entries - 1) ||
	    r->entries > VSTELLAR_CEILING_MAX_CQE ||
	    (cqe > 0 && r->entries < (uint32_t)cqe) ||
	    r->ring_mmap_len < (uint64_t)r->entries * sizeof(struct vstellar_cqe) ||
	    r->ring_mmap_len > SIZE_MAX || r->ring_mmap_key > INT64_MAX ||
	    !vstellar_db_record(ctx, r->doorbell_index)) {
		verbs_err(&ctx->ibv_ctx,
			  "vstellar: CQ %u: bad response: %u entries for %d, ring mapping of %llu bytes, doorbell %u of %u\n",
			  r->cqn, r->entries, cqe,
			  (unsigned long long)r->ring_mmap_len,
			  r->doorbell_index, ctx->db_records);
		return EPROTO;
	}
	return 0;
}

struct ibv_cq *vstellar_create_cq(struct ibv_context *context, int cqe,
				  struct ibv_comp_channel *channel,
				  int comp_vector)
{
	struct vstellar_context *ctx = to_vctx(context);
	struct uvstellar_create_cq_resp resp = {};
	struct uvstellar_create_cq cmd = {};
	const struct vstellar_create_cq_uresp *r = &resp.drv_payload;
	struct vstellar_cq *cq;
	void *ring;
	int err;

	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return NULL;

	err = ibv_cmd_create_cq(context, cqe, channel, comp_vector, &cq->ibv_cq,
				&cmd.ibv_cmd, sizeof(cmd), &resp.ibv_resp,
				sizeof(resp));
	if (err)
		goto err_free;

	err = vstellar_check_cq_resp(ctx, cqe, r);
	if (err)
		goto err_destroy;

	/* Read-only: the device writes the CQEs, the library only reads. */
	ring = mmap(NULL, r->ring_mmap_len, PROT_READ, MAP_SHARED,
		    context->cmd_fd, r->ring_mmap_key);
	if (ring == MAP_FAILED) {
		err = errno;
		verbs_err(&ctx->ibv_ctx, "vstellar: CQ %u: mapping the ring: %s\n",
			  r->cqn, strerror(err));
		goto err_destroy;
	}

	cq->cqn = r->cqn;
	cq->ring = ring;
	cq->ring_len = r->ring_mmap_len;
	cq->entries = r->entries;
	cq->rec = vstellar_db_record(ctx, r->doorbell_index);
	/*
	 * CREATE_CQ zeroes the record; start from what it says all the same,
	 * so that the consumer index never runs behind the device's.
	 */
	cq->cons = vstellar_load_acquire(&cq->rec->prod);
	vstellar_store_release(&cq->rec->cons, cq->cons);
	cq->arm_sn = vstellar_load_acquire(&cq->rec->arm) >>
		     VSTELLAR_CQ_ARM_SN_SHIFT;
	pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);
	return &cq->ibv_cq;

err_destroy:
	ibv_cmd_destroy_cq(&cq->ibv_cq);
err_free:
	free(cq);
	errno = err;
	return NULL;
}

int vstellar_destroy_cq(struct ibv_cq *ibcq)
{
	struct vstellar_cq *cq = to_vcq(ibcq);
	int err;

	err = ibv_cmd_destroy_cq(ibcq);
	if (err)
		return err;
	munmap((void *)cq->ring, cq->ring_len);
	pthread_spin_destroy(&cq->lock);
	free(cq);
	return 0;
}
