// SPDX-License-Identifier: GPL-2.0
/*
 * vstellar: shared receive queues (device ABI 1.1, spec §10.7). The ring
 * is kernel memory, one contiguous guest-physical range, mapped into user
 * space, where the provider writes receive WQEs and stores the SRQ's
 * producer index; the device takes them for every QP on the SRQ. The
 * kernel's part is the ring, the limit and the events.
 */

#include <linux/log2.h>
#include <rdma/uverbs_ioctl.h>

#include "vstellar.h"

static void vstellar_srq_release_ring(struct vstellar_dev *dev,
				      struct vstellar_srq *srq, bool bury)
{
	if (bury)
		vstellar_bury(dev, srq->ring);
	else
		vstellar_buf_put(srq->ring);
	srq->ring = NULL;
}

int vstellar_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init,
			struct ib_udata *udata)
{
	struct vstellar_dev *dev = to_vdev(ibsrq->device);
	struct vstellar_srq *srq = to_vsrq(ibsrq);
	const struct vstellar_cfg *c = &dev->cfg;
	struct ib_srq_attr *attr = &init->attr;
	struct vstellar_create_srq_uresp resp = {};
	struct vstellar_create_srq_req req = {};
	struct vstellar_create_srq_resp dresp;
	struct vstellar_ucontext *uctx;
	u32 srqn, index;
	int ret;

	/* No kernel data path: kernel SRQs are not offered. */
	if (!udata || !c->max_srq)
		return -EOPNOTSUPP;
	if (init->srq_type != IB_SRQT_BASIC)
		return -EOPNOTSUPP;
	if (udata->outlen < sizeof(resp) ||
	    (udata->inlen && !ib_is_udata_cleared(udata, 0, udata->inlen)))
		return -EINVAL;
	if (attr->max_wr > c->max_srq_wr || attr->max_sge > c->max_srq_sge)
		return -EINVAL;
	srq->size = roundup_pow_of_two(max(attr->max_wr, 1U));
	if (srq->size > c->max_srq_wr || attr->srq_limit >= srq->size)
		return -EINVAL;
	srq->stride = vstellar_rq_stride(attr->max_sge);
	srq->max_sge = min(c->max_srq_sge,
			   (srq->stride - VSTELLAR_RECV_WQE_HEADER_SIZE) /
			   VSTELLAR_SGE_SIZE);

	srq->ring = vstellar_buf_alloc((size_t)srq->size * srq->stride);
	if (IS_ERR(srq->ring))
		return PTR_ERR(srq->ring);

	req.pdn = cpu_to_le32(to_vpd(ibsrq->pd)->pdn);
	req.size = cpu_to_le32(srq->size);
	req.max_sge = cpu_to_le32(srq->max_sge);
	req.limit = cpu_to_le32(attr->srq_limit);
	req.ring_addr = cpu_to_le64(virt_to_phys(srq->ring->va));
	ret = vstellar_cmd(dev, VSTELLAR_OP_CREATE_SRQ, &req, sizeof(req),
			   &dresp, sizeof(dresp));
	if (ret)
		goto err_ring;
	srqn = le32_to_cpu(dresp.srqn);
	index = le32_to_cpu(dresp.doorbell_index);
	srq->srqn = srqn;
	if (!srqn || srqn > c->max_srq ||
	    index != c->max_qp + c->max_cq + srqn - 1 ||
	    le32_to_cpu(dresp.stride) != srq->stride) {
		dev_err_ratelimited(&dev->vdev->dev,
				    "CREATE_SRQ: SRQ %u, doorbell %u, stride %u, want %u\n",
				    srqn, index, le32_to_cpu(dresp.stride),
				    srq->stride);
		ret = -EPROTO;
		goto err_destroy;
	}

	ret = xa_insert_irq(&dev->srqs, srqn, srq, GFP_KERNEL);
	if (ret)
		goto err_destroy;
	uctx = rdma_udata_to_drv_context(udata, struct vstellar_ucontext,
					 ibuctx);
	srq->ring_entry = vstellar_insert_ring(&uctx->ibuctx, srq->ring,
					       &resp.ring_mmap_key);
	if (IS_ERR(srq->ring_entry)) {
		ret = PTR_ERR(srq->ring_entry);
		srq->ring_entry = NULL;
		goto err_xa;
	}
	resp.srqn = srqn;
	resp.doorbell_index = index;
	resp.size = srq->size;
	resp.stride = srq->stride;
	resp.max_sge = srq->max_sge;
	resp.ring_mmap_len = srq->ring->size;
	ret = ib_copy_to_udata(udata, &resp, sizeof(resp));
	if (ret)
		goto err_entry;

	attr->max_wr = srq->size;
	attr->max_sge = srq->max_sge;
	return 0;

err_entry:
	rdma_user_mmap_entry_remove(srq->ring_entry);
err_xa:
	xa_erase_irq(&dev->srqs, srqn);
err_destroy:
	if (vstellar_destroy_cmd(dev, VSTELLAR_OP_DESTROY_SRQ, srqn)) {
		vstellar_srq_release_ring(dev, srq, true);
		return ret;
	}
err_ring:
	vstellar_srq_release_ring(dev, srq, ret == -ETIMEDOUT);
	return ret;
}

int vstellar_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
			enum ib_srq_attr_mask mask, struct ib_udata *udata)
{
	struct vstellar_dev *dev = to_vdev(ibsrq->device);
	struct vstellar_srq *srq = to_vsrq(ibsrq);
	struct vstellar_modify_srq_req req = {};

	/* The device does not resize SRQs (spec §16). */
	if (mask & ~IB_SRQ_LIMIT)
		return -EOPNOTSUPP;
	if (udata && udata->inlen &&
	    !ib_is_udata_cleared(udata, 0, udata->inlen))
		return -EINVAL;
	if (attr->srq_limit >= srq->size)
		return -EINVAL;
	req.srqn = cpu_to_le32(srq->srqn);
	req.attr_mask = cpu_to_le32(VSTELLAR_SRQ_ATTR_LIMIT);
	req.limit = cpu_to_le32(attr->srq_limit);
	return vstellar_cmd(dev, VSTELLAR_OP_MODIFY_SRQ, &req, sizeof(req),
			    NULL, 0);
}

int vstellar_query_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr)
{
	struct vstellar_dev *dev = to_vdev(ibsrq->device);
	struct vstellar_srq *srq = to_vsrq(ibsrq);
	struct vstellar_handle_req req = { .handle = cpu_to_le32(srq->srqn) };
	struct vstellar_srq_attr r;
	int ret;

	ret = vstellar_cmd(dev, VSTELLAR_OP_QUERY_SRQ, &req, sizeof(req), &r,
			   sizeof(r));
	if (ret)
		return ret;
	attr->max_wr = le32_to_cpu(r.max_wr);
	attr->max_sge = le32_to_cpu(r.max_sge);
	attr->srq_limit = le32_to_cpu(r.limit);
	return 0;
}

int vstellar_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata)
{
	struct vstellar_dev *dev = to_vdev(ibsrq->device);
	struct vstellar_srq *srq = to_vsrq(ibsrq);
	int ret;

	ret = vstellar_destroy_cmd(dev, VSTELLAR_OP_DESTROY_SRQ, srq->srqn);
	if (ret < 0)
		return ret;
	/* After this no event handler runs for the SRQ. */
	xa_erase_irq(&dev->srqs, srq->srqn);
	rdma_user_mmap_entry_remove(srq->ring_entry);
	vstellar_srq_release_ring(dev, srq, ret);
	return 0;
}

/* From the event queue's interrupt. */
void vstellar_srq_event(struct vstellar_dev *dev, u32 type, u32 srqn)
{
	struct ib_event ev = {};
	struct vstellar_srq *srq;
	unsigned long flags;

	ev.event = type == VSTELLAR_EVENT_SRQ_LIMIT ?
		   IB_EVENT_SRQ_LIMIT_REACHED : IB_EVENT_SRQ_ERR;
	/* Held across the handler, so destroy waits for it (xa_erase). */
	xa_lock_irqsave(&dev->srqs, flags);
	srq = xa_load(&dev->srqs, srqn);
	if (!srq) {
		xa_unlock_irqrestore(&dev->srqs, flags);
		atomic_inc(&dev->events_unknown);
		dev_dbg_ratelimited(&dev->vdev->dev,
				    "event %u for unknown SRQ %u\n", type, srqn);
		return;
	}
	if (ev.event == IB_EVENT_SRQ_ERR)
		dev_warn_ratelimited(&dev->vdev->dev,
				     "SRQ %u in error (runaway producer index or lost ring)\n",
				     srqn);
	if (srq->ibsrq.event_handler) {
		ev.device = &dev->ibdev;
		ev.element.srq = &srq->ibsrq;
		srq->ibsrq.event_handler(&ev, srq->ibsrq.srq_context);
	}
	xa_unlock_irqrestore(&dev->srqs, flags);
}
