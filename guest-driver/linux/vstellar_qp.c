// SPDX-License-Identifier: GPL-2.0
/*
 * vstellar: RC queue pairs. The send and receive rings are kernel memory
 * (one contiguous guest-physical range each, spec §9) mapped into user
 * space, where the provider writes WQEs and rings the QP's doorbell record.
 */

#include <linux/log2.h>
#include <rdma/ib_cache.h>
#include <rdma/uverbs_ioctl.h>

#include "vstellar.h"

/* Slot strides, spec §10.5 (abi.SendWQEStride, abi.RecvWQEStride). */
static u32 vstellar_sq_stride(u32 max_sge, u32 max_inline)
{
	return roundup_pow_of_two(VSTELLAR_SEND_WQE_HEADER_SIZE +
				  max(max_sge * VSTELLAR_SGE_SIZE, max_inline));
}

u32 vstellar_rq_stride(u32 max_sge)
{
	return roundup_pow_of_two(VSTELLAR_RECV_WQE_HEADER_SIZE +
				  max_sge * VSTELLAR_SGE_SIZE);
}

/*
 * Work out the rings from what the caller asked for; fills in qp. A QP on
 * an SRQ (srq) has no receive ring.
 */
static int vstellar_qp_size(struct vstellar_dev *dev, struct vstellar_qp *qp,
			    const struct ib_qp_cap *cap, bool srq)
{
	const struct vstellar_cfg *c = &dev->cfg;
	u32 max_inline = virtio_has_feature(dev->vdev, VSTELLAR_F_INLINE) ?
			 c->max_inline_data : 0;

	if (cap->max_send_wr > c->max_qp_wr || cap->max_recv_wr > c->max_qp_wr ||
	    cap->max_send_sge > c->max_sge || cap->max_recv_sge > c->max_sge ||
	    cap->max_inline_data > max_inline)
		return -EINVAL;
	qp->sq_size = roundup_pow_of_two(max(cap->max_send_wr, 1U));
	qp->rq_size = roundup_pow_of_two(max(cap->max_recv_wr, 1U));
	if (qp->sq_size > c->max_qp_wr || qp->rq_size > c->max_qp_wr)
		return -EINVAL;
	qp->sq_stride = vstellar_sq_stride(cap->max_send_sge,
					   cap->max_inline_data);
	qp->rq_stride = vstellar_rq_stride(cap->max_recv_sge);
	/* Whatever else fits in the slots, within the device's limits. */
	qp->max_send_sge = min(c->max_sge,
			       (qp->sq_stride - VSTELLAR_SEND_WQE_HEADER_SIZE) /
			       VSTELLAR_SGE_SIZE);
	qp->max_inline = min(max_inline,
			     qp->sq_stride - VSTELLAR_SEND_WQE_HEADER_SIZE);
	qp->max_recv_sge = min(c->max_sge,
			       (qp->rq_stride - VSTELLAR_RECV_WQE_HEADER_SIZE) /
			       VSTELLAR_SGE_SIZE);
	if (srq) {
		qp->rq_size = 0;
		qp->rq_stride = 0;
		qp->max_recv_sge = 0;
	}
	return 0;
}

static void vstellar_qp_release_rings(struct vstellar_dev *dev,
				      struct vstellar_qp *qp, bool bury)
{
	if (bury) {
		vstellar_bury(dev, qp->sq);
		if (qp->rq)
			vstellar_bury(dev, qp->rq);
	} else {
		vstellar_buf_put(qp->sq);
		if (qp->rq)
			vstellar_buf_put(qp->rq);
	}
	qp->sq = NULL;
	qp->rq = NULL;
}

static int vstellar_qp_map(struct vstellar_qp *qp, struct ib_udata *udata,
			   struct vstellar_create_qp_uresp *resp)
{
	struct vstellar_ucontext *uctx =
		rdma_udata_to_drv_context(udata, struct vstellar_ucontext,
					  ibuctx);
	int ret;

	qp->sq_entry = vstellar_insert_ring(&uctx->ibuctx, qp->sq,
					    &resp->sq_mmap_key);
	if (IS_ERR(qp->sq_entry))
		return PTR_ERR(qp->sq_entry);
	resp->sq_mmap_len = qp->sq->size;
	if (!qp->rq)
		return 0;
	qp->rq_entry = vstellar_insert_ring(&uctx->ibuctx, qp->rq,
					    &resp->rq_mmap_key);
	if (IS_ERR(qp->rq_entry)) {
		ret = PTR_ERR(qp->rq_entry);
		rdma_user_mmap_entry_remove(qp->sq_entry);
		return ret;
	}
	resp->rq_mmap_len = qp->rq->size;
	return 0;
}

static void vstellar_qp_unmap(struct vstellar_qp *qp)
{
	rdma_user_mmap_entry_remove(qp->sq_entry);
	if (qp->rq_entry)
		rdma_user_mmap_entry_remove(qp->rq_entry);
}

int vstellar_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init_attr,
		       struct ib_udata *udata)
{
	struct vstellar_dev *dev = to_vdev(ibqp->device);
	struct vstellar_qp *qp = to_vqp(ibqp);
	struct ib_qp_cap *cap = &init_attr->cap;
	struct vstellar_create_qp_uresp resp = {};
	struct vstellar_create_qp_req req = {};
	struct vstellar_create_qp_resp dresp;
	u32 qpn, index;
	int ret;

	/* No kernel data path: kernel QPs are not offered. */
	if (!udata || init_attr->qp_type != IB_QPT_RC)
		return -EOPNOTSUPP;
	if (init_attr->create_flags || init_attr->rwq_ind_tbl)
		return -EOPNOTSUPP;
	if (udata->outlen < sizeof(resp) ||
	    (udata->inlen && !ib_is_udata_cleared(udata, 0, udata->inlen)))
		return -EINVAL;
	ret = vstellar_qp_size(dev, qp, cap, init_attr->srq);
	if (ret)
		return ret;
	qp->sig_all = init_attr->sq_sig_type == IB_SIGNAL_ALL_WR;

	qp->sq = vstellar_buf_alloc((size_t)qp->sq_size * qp->sq_stride);
	if (IS_ERR(qp->sq))
		return PTR_ERR(qp->sq);
	qp->rq = NULL;
	if (!init_attr->srq) {
		qp->rq = vstellar_buf_alloc((size_t)qp->rq_size *
					    qp->rq_stride);
		if (IS_ERR(qp->rq)) {
			vstellar_buf_put(qp->sq);
			return PTR_ERR(qp->rq);
		}
	} else {
		req.srqn = cpu_to_le32(to_vsrq(init_attr->srq)->srqn);
	}

	req.pdn = cpu_to_le32(to_vpd(ibqp->pd)->pdn);
	req.qp_type = VSTELLAR_QP_TYPE_RC;
	req.sq_sig_all = qp->sig_all;
	req.send_cqn = cpu_to_le32(to_vcq(init_attr->send_cq)->cqn);
	req.recv_cqn = cpu_to_le32(to_vcq(init_attr->recv_cq)->cqn);
	req.sq_size = cpu_to_le32(qp->sq_size);
	req.rq_size = cpu_to_le32(qp->rq_size);
	req.max_send_sge = cpu_to_le32(qp->max_send_sge);
	req.max_recv_sge = cpu_to_le32(qp->max_recv_sge);
	req.max_inline_data = cpu_to_le32(qp->max_inline);
	req.sq_addr = cpu_to_le64(virt_to_phys(qp->sq->va));
	if (qp->rq)
		req.rq_addr = cpu_to_le64(virt_to_phys(qp->rq->va));
	ret = vstellar_cmd(dev, VSTELLAR_OP_CREATE_QP, &req, sizeof(req),
			   &dresp, sizeof(dresp));
	if (ret)
		goto err_rings;
	qpn = le32_to_cpu(dresp.qpn);
	index = le32_to_cpu(dresp.doorbell_index);
	qp->qpn = qpn;
	if (qpn < 2 || qpn > dev->cfg.max_qp + 1 || index != qpn - 2 ||
	    le32_to_cpu(dresp.sq_stride) != qp->sq_stride ||
	    le32_to_cpu(dresp.rq_stride) != qp->rq_stride) {
		dev_err_ratelimited(&dev->vdev->dev,
				    "CREATE_QP: QP %u, doorbell %u, strides %u/%u, want %u/%u\n",
				    qpn, index, le32_to_cpu(dresp.sq_stride),
				    le32_to_cpu(dresp.rq_stride),
				    qp->sq_stride, qp->rq_stride);
		ret = -EPROTO;
		goto err_destroy;
	}
	ibqp->qp_num = qpn;

	ret = xa_insert_irq(&dev->qps, qpn, qp, GFP_KERNEL);
	if (ret)
		goto err_destroy;
	ret = vstellar_qp_map(qp, udata, &resp);
	if (ret)
		goto err_xa;

	resp.qpn = qpn;
	resp.doorbell_index = index;
	resp.sq_size = qp->sq_size;
	resp.rq_size = qp->rq_size;
	resp.sq_stride = qp->sq_stride;
	resp.rq_stride = qp->rq_stride;
	resp.max_send_sge = qp->max_send_sge;
	resp.max_recv_sge = qp->max_recv_sge;
	resp.max_inline_data = qp->max_inline;
	ret = ib_copy_to_udata(udata, &resp, sizeof(resp));
	if (ret)
		goto err_entries;

	cap->max_send_wr = qp->sq_size;
	cap->max_recv_wr = qp->rq_size;
	cap->max_send_sge = qp->max_send_sge;
	cap->max_recv_sge = qp->max_recv_sge;
	cap->max_inline_data = qp->max_inline;
	return 0;

err_entries:
	vstellar_qp_unmap(qp);
err_xa:
	xa_erase_irq(&dev->qps, qpn);
err_destroy:
	if (vstellar_destroy_cmd(dev, VSTELLAR_OP_DESTROY_QP, qpn)) {
		vstellar_qp_release_rings(dev, qp, true);
		return ret;
	}
err_rings:
	vstellar_qp_release_rings(dev, qp, ret == -ETIMEDOUT);
	return ret;
}

static u32 vstellar_access_to_dev(int flags)
{
	u32 a = 0;

	if (flags & IB_ACCESS_LOCAL_WRITE)
		a |= VSTELLAR_ACCESS_LOCAL_WRITE;
	if (flags & IB_ACCESS_REMOTE_WRITE)
		a |= VSTELLAR_ACCESS_REMOTE_WRITE;
	if (flags & IB_ACCESS_REMOTE_READ)
		a |= VSTELLAR_ACCESS_REMOTE_READ;
	if (flags & IB_ACCESS_REMOTE_ATOMIC)
		a |= VSTELLAR_ACCESS_REMOTE_ATOMIC;
	return a;
}

static int vstellar_access_from_dev(u32 a)
{
	int flags = 0;

	if (a & VSTELLAR_ACCESS_LOCAL_WRITE)
		flags |= IB_ACCESS_LOCAL_WRITE;
	if (a & VSTELLAR_ACCESS_REMOTE_WRITE)
		flags |= IB_ACCESS_REMOTE_WRITE;
	if (a & VSTELLAR_ACCESS_REMOTE_READ)
		flags |= IB_ACCESS_REMOTE_READ;
	if (a & VSTELLAR_ACCESS_REMOTE_ATOMIC)
		flags |= IB_ACCESS_REMOTE_ATOMIC;
	return flags;
}

#define VSTELLAR_QP_ACCESS (IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | \
			    IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_ATOMIC)

int vstellar_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr,
		       int attr_mask, struct ib_udata *udata)
{
	struct vstellar_dev *dev = to_vdev(ibqp->device);
	struct vstellar_modify_qp_req req = {};
	struct vstellar_qp_attr *a = &req.attr;
	u32 mask = attr_mask;
	int ret;

	/* The IB_QP_* bits the device defines are the IB ones. */
	if (mask & ~VSTELLAR_QP_ATTR_ALL)
		return -EOPNOTSUPP;
	if (udata && udata->inlen &&
	    !ib_is_udata_cleared(udata, 0, udata->inlen))
		return -EINVAL;

	if (mask & IB_QP_STATE) {
		if (attr->qp_state > IB_QPS_ERR)
			return -EINVAL;
		a->qp_state = cpu_to_le32(attr->qp_state);
	}
	if (mask & IB_QP_CUR_STATE) {
		if (attr->cur_qp_state > IB_QPS_ERR)
			return -EINVAL;
		a->cur_qp_state = cpu_to_le32(attr->cur_qp_state);
	}
	/* The device has no field: the bit alone asks for SQ_DRAINED. */
	if ((mask & IB_QP_EN_SQD_ASYNC_NOTIFY) && !attr->en_sqd_async_notify)
		mask &= ~IB_QP_EN_SQD_ASYNC_NOTIFY;
	if (mask & IB_QP_ACCESS_FLAGS) {
		if (attr->qp_access_flags & ~VSTELLAR_QP_ACCESS)
			return -EOPNOTSUPP;
		a->qp_access_flags =
			cpu_to_le32(vstellar_access_to_dev(attr->qp_access_flags));
	}
	if (mask & IB_QP_PKEY_INDEX)
		a->pkey_index = cpu_to_le16(attr->pkey_index);
	if (mask & IB_QP_PORT) {
		if (attr->port_num > U8_MAX)
			return -EINVAL;
		a->port_num = attr->port_num;
	}
	if (mask & IB_QP_QKEY)
		a->qkey = cpu_to_le32(attr->qkey);
	if (mask & IB_QP_AV) {
		ret = vstellar_ah_attr_to_dev(dev, &attr->ah_attr, &a->ah_attr);
		if (ret) {
			if (!(rdma_ah_get_ah_flags(&attr->ah_attr) & IB_AH_GRH))
				dev_info_ratelimited(&dev->vdev->dev,
						     "QP %u: the device routes by GID: connect with a GRH (e.g. -g 0 or -x 0, the GID index)\n",
						     ibqp->qp_num);
			return ret;
		}
	}
	if (mask & IB_QP_PATH_MTU)
		a->path_mtu = cpu_to_le32(attr->path_mtu);
	if (mask & IB_QP_TIMEOUT)
		a->timeout = attr->timeout;
	if (mask & IB_QP_RETRY_CNT)
		a->retry_cnt = attr->retry_cnt;
	if (mask & IB_QP_RNR_RETRY)
		a->rnr_retry = attr->rnr_retry;
	if (mask & IB_QP_RQ_PSN)
		a->rq_psn = cpu_to_le32(attr->rq_psn);
	if (mask & IB_QP_MAX_QP_RD_ATOMIC)
		a->max_rd_atomic = attr->max_rd_atomic;
	if (mask & IB_QP_MIN_RNR_TIMER)
		a->min_rnr_timer = attr->min_rnr_timer;
	if (mask & IB_QP_SQ_PSN)
		a->sq_psn = cpu_to_le32(attr->sq_psn);
	if (mask & IB_QP_MAX_DEST_RD_ATOMIC)
		a->max_dest_rd_atomic = attr->max_dest_rd_atomic;
	if (mask & IB_QP_DEST_QPN)
		a->dest_qp_num = cpu_to_le32(attr->dest_qp_num);

	req.qpn = cpu_to_le32(to_vqp(ibqp)->qpn);
	req.attr_mask = cpu_to_le32(mask);
	return vstellar_cmd(dev, VSTELLAR_OP_MODIFY_QP, &req, sizeof(req),
			    NULL, 0);
}

int vstellar_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr,
		      int attr_mask, struct ib_qp_init_attr *init_attr)
{
	struct vstellar_dev *dev = to_vdev(ibqp->device);
	struct vstellar_qp *qp = to_vqp(ibqp);
	struct vstellar_handle_req req = { .handle = cpu_to_le32(qp->qpn) };
	struct vstellar_query_qp_resp r;
	const struct vstellar_qp_attr *a = &r.attr;
	const struct vstellar_ah_attr *av = &a->ah_attr;
	union ib_gid dgid;
	u32 state;
	int ret;

	ret = vstellar_cmd(dev, VSTELLAR_OP_QUERY_QP, &req, sizeof(req), &r,
			   sizeof(r));
	if (ret)
		return ret;
	state = le32_to_cpu(a->qp_state);
	if (state > IB_QPS_ERR) {
		dev_err_ratelimited(&dev->vdev->dev, "QUERY_QP: state %u\n",
				    state);
		return -EPROTO;
	}

	memset(attr, 0, sizeof(*attr));
	attr->qp_state = state;
	attr->cur_qp_state = state;
	attr->path_mtu = le32_to_cpu(a->path_mtu);
	attr->qp_access_flags =
		vstellar_access_from_dev(le32_to_cpu(a->qp_access_flags));
	attr->dest_qp_num = le32_to_cpu(a->dest_qp_num);
	attr->rq_psn = le32_to_cpu(a->rq_psn);
	attr->sq_psn = le32_to_cpu(a->sq_psn);
	attr->qkey = le32_to_cpu(a->qkey);
	attr->pkey_index = le16_to_cpu(a->pkey_index);
	attr->port_num = a->port_num;
	attr->max_rd_atomic = a->max_rd_atomic;
	attr->max_dest_rd_atomic = a->max_dest_rd_atomic;
	attr->min_rnr_timer = a->min_rnr_timer;
	attr->timeout = a->timeout;
	attr->retry_cnt = a->retry_cnt;
	attr->rnr_retry = a->rnr_retry;
	attr->sq_draining = a->sq_draining;

	memcpy(dgid.raw, av->dgid, sizeof(dgid.raw));
	attr->ah_attr.type = RDMA_AH_ATTR_TYPE_IB;
	if (!rdma_is_zero_gid(&dgid)) {
		rdma_ah_set_port_num(&attr->ah_attr, av->port ? av->port : 1);
		rdma_ah_set_sl(&attr->ah_attr, av->sl);
		rdma_ah_set_grh(&attr->ah_attr, &dgid,
				le32_to_cpu(av->flow_label), av->sgid_index,
				av->hop_limit, av->traffic_class);
	}

	attr->cap.max_send_wr = qp->sq_size;
	attr->cap.max_recv_wr = qp->rq_size;
	attr->cap.max_send_sge = qp->max_send_sge;
	attr->cap.max_recv_sge = qp->max_recv_sge;
	attr->cap.max_inline_data = qp->max_inline;

	memset(init_attr, 0, sizeof(*init_attr));
	init_attr->qp_type = IB_QPT_RC;
	init_attr->send_cq = ibqp->send_cq;
	init_attr->recv_cq = ibqp->recv_cq;
	init_attr->srq = ibqp->srq;
	init_attr->sq_sig_type = qp->sig_all ? IB_SIGNAL_ALL_WR :
			       IB_SIGNAL_REQ_WR;
	init_attr->cap = attr->cap;
	return 0;
}

int vstellar_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata)
{
	struct vstellar_dev *dev = to_vdev(ibqp->device);
	struct vstellar_qp *qp = to_vqp(ibqp);
	int ret;

	ret = vstellar_destroy_cmd(dev, VSTELLAR_OP_DESTROY_QP, qp->qpn);
	if (ret < 0)
		return ret;
	/* After this no event handler runs for the QP. */
	xa_erase_irq(&dev->qps, qp->qpn);
	vstellar_qp_unmap(qp);
	vstellar_qp_release_rings(dev, qp, ret);
	return 0;
}

/* From the event queue's interrupt. */
void vstellar_qp_event(struct vstellar_dev *dev, u32 type, u32 qpn)
{
	struct ib_event ev = {};
	struct vstellar_qp *qp;
	unsigned long flags;

	switch (type) {
	case VSTELLAR_EVENT_QP_FATAL:
		ev.event = IB_EVENT_QP_FATAL;
		break;
	case VSTELLAR_EVENT_QP_REQ_ERR:
		ev.event = IB_EVENT_QP_REQ_ERR;
		break;
	case VSTELLAR_EVENT_QP_ACCESS_ERR:
		ev.event = IB_EVENT_QP_ACCESS_ERR;
		break;
	case VSTELLAR_EVENT_QP_LAST_WQE:
		ev.event = IB_EVENT_QP_LAST_WQE_REACHED;
		break;
	default:
		ev.event = IB_EVENT_SQ_DRAINED;
		break;
	}

	/* Held across the handler, so destroy waits for it (xa_erase). */
	xa_lock_irqsave(&dev->qps, flags);
	qp = xa_load(&dev->qps, qpn);
	if (!qp) {
		xa_unlock_irqrestore(&dev->qps, flags);
		atomic_inc(&dev->events_unknown);
		dev_dbg_ratelimited(&dev->vdev->dev,
				    "event %u for unknown QP %u\n", type, qpn);
		return;
	}
	if (qp->ibqp.event_handler) {
		ev.device = &dev->ibdev;
		ev.element.qp = &qp->ibqp;
		qp->ibqp.event_handler(&ev, qp->ibqp.qp_context);
	}
	xa_unlock_irqrestore(&dev->qps, flags);
}
