// SPDX-License-Identifier: GPL-2.0
/*
 * vstellar: completion queues. The ring is kernel memory, one contiguous
 * guest-physical range as the device requires (spec §9), mapped into user
 * space; the provider polls it and arms the CQ in its doorbell record.
 * The kernel's part is the event: CQ_COMP and CQ_ERR.
 */

#include <linux/log2.h>
#include <rdma/uverbs_ioctl.h>

#include "vstellar.h"

int vstellar_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
		       struct uverbs_attr_bundle *attrs)
{
	struct ib_udata *udata = attrs ? &attrs->driver_udata : NULL;
	struct vstellar_dev *dev = to_vdev(ibcq->device);
	struct vstellar_cq *cq = to_vcq(ibcq);
	struct vstellar_ucontext *uctx;
	struct vstellar_create_cq_resp dresp;
	struct vstellar_create_cq_req req = {};
	struct vstellar_create_cq_uresp resp = {};
	u32 entries, cqn, index;
	int ret;

	/* No kernel data path: kernel CQs are not offered. */
	if (!udata)
		return -EOPNOTSUPP;
	if (attr->flags)
		return -EOPNOTSUPP;
	if (udata->outlen < sizeof(resp) ||
	    (udata->inlen && !ib_is_udata_cleared(udata, 0, udata->inlen)))
		return -EINVAL;
	if (attr->cqe > dev->cfg.max_cqe)
		return -EINVAL;
	entries = roundup_pow_of_two(max(attr->cqe, 1U));
	if (entries > dev->cfg.max_cqe)
		return -EINVAL;

	cq->ring = vstellar_buf_alloc((size_t)entries * VSTELLAR_CQE_SIZE);
	if (IS_ERR(cq->ring))
		return PTR_ERR(cq->ring);

	req.ring_addr = cpu_to_le64(virt_to_phys(cq->ring->va));
	req.entries = cpu_to_le32(entries);
	ret = vstellar_cmd(dev, VSTELLAR_OP_CREATE_CQ, &req, sizeof(req),
			   &dresp, sizeof(dresp));
	if (ret)
		goto err_ring;
	cqn = le32_to_cpu(dresp.cqn);
	index = le32_to_cpu(dresp.doorbell_index);
	cq->cqn = cqn;
	if (!cqn || cqn > dev->cfg.max_cq ||
	    index != dev->cfg.max_qp + cqn - 1) {
		dev_err_ratelimited(&dev->vdev->dev,
				    "CREATE_CQ: CQ %u with doorbell %u\n",
				    cqn, index);
		ret = -EPROTO;
		goto err_destroy;
	}
	cq->entries = entries;
	ibcq->cqe = entries;

	ret = xa_insert_irq(&dev->cqs, cqn, cq, GFP_KERNEL);
	if (ret)
		goto err_destroy;
	uctx = rdma_udata_to_drv_context(udata, struct vstellar_ucontext,
					 ibuctx);
	cq->ring_entry = vstellar_insert_ring(&uctx->ibuctx, cq->ring,
					      &resp.ring_mmap_key);
	if (IS_ERR(cq->ring_entry)) {
		ret = PTR_ERR(cq->ring_entry);
		cq->ring_entry = NULL;
		goto err_xa;
	}
	resp.cqn = cqn;
	resp.entries = entries;
	resp.doorbell_index = index;
	resp.ring_mmap_len = cq->ring->size;
	ret = ib_copy_to_udata(udata, &resp, sizeof(resp));
	if (ret)
		goto err_entry;
	return 0;

err_entry:
	rdma_user_mmap_entry_remove(cq->ring_entry);
err_xa:
	xa_erase_irq(&dev->cqs, cqn);
err_destroy:
	if (vstellar_destroy_cmd(dev, VSTELLAR_OP_DESTROY_CQ, cqn)) {
		vstellar_bury(dev, cq->ring);
		return ret;
	}
err_ring:
	if (ret == -ETIMEDOUT)
		vstellar_bury(dev, cq->ring);
	else
		vstellar_buf_put(cq->ring);
	return ret;
}

int vstellar_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata)
{
	struct vstellar_dev *dev = to_vdev(ibcq->device);
	struct vstellar_cq *cq = to_vcq(ibcq);
	int ret;

	ret = vstellar_destroy_cmd(dev, VSTELLAR_OP_DESTROY_CQ, cq->cqn);
	if (ret < 0)
		return ret;
	/* After this no event handler runs for the CQ. */
	xa_erase_irq(&dev->cqs, cq->cqn);
	rdma_user_mmap_entry_remove(cq->ring_entry);
	if (ret)
		vstellar_bury(dev, cq->ring);
	else
		vstellar_buf_put(cq->ring);
	return 0;
}

/* From the event queue's interrupt. */
void vstellar_cq_event(struct vstellar_dev *dev, u32 type, u32 cqn)
{
	struct ib_event ev = {};
	struct vstellar_cq *cq;
	unsigned long flags;

	/* Held across the handler, so destroy waits for it (xa_erase). */
	xa_lock_irqsave(&dev->cqs, flags);
	cq = xa_load(&dev->cqs, cqn);
	if (!cq) {
		xa_unlock_irqrestore(&dev->cqs, flags);
		atomic_inc(&dev->events_unknown);
		dev_dbg_ratelimited(&dev->vdev->dev,
				    "event %u for unknown CQ %u\n", type, cqn);
		return;
	}
	if (type == VSTELLAR_EVENT_CQ_COMP) {
		if (cq->ibcq.comp_handler)
			cq->ibcq.comp_handler(&cq->ibcq, cq->ibcq.cq_context);
	} else {
		dev_warn_ratelimited(&dev->vdev->dev,
				     "CQ %u in error (overflow or lost ring)\n",
				     cqn);
		if (cq->ibcq.event_handler) {
			ev.device = &dev->ibdev;
			ev.element.cq = &cq->ibcq;
			ev.event = IB_EVENT_CQ_ERR;
			cq->ibcq.event_handler(&ev, cq->ibcq.cq_context);
		}
	}
	xa_unlock_irqrestore(&dev->cqs, flags);
}
