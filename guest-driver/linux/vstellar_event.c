// SPDX-License-Identifier: GPL-2.0
/*
 * vstellar: the event queue (spec §11). The driver keeps device-writable
 * 16-byte buffers posted; the device writes one event into each and
 * completes it. Events are dispatched from the queue's interrupt and the
 * buffer is posted again at once.
 */

#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/virtio.h>

#include "vstellar.h"

static int vstellar_post_event(struct vstellar_dev *dev,
			       struct vstellar_event *ev, gfp_t gfp)
{
	struct scatterlist sg;

	sg_init_one(&sg, ev, sizeof(*ev));
	return virtqueue_add_inbuf(dev->event_vq, &sg, 1, ev, gfp);
}

int vstellar_event_init(struct vstellar_dev *dev)
{
	unsigned int i;
	int ret;

	atomic_set(&dev->events_unknown, 0);
	dev->event_bufs = kcalloc(VSTELLAR_EVENT_BUFS, sizeof(*dev->event_bufs),
				  GFP_KERNEL);
	if (!dev->event_bufs)
		return -ENOMEM;
	if (!virtio_has_feature(dev->vdev, VSTELLAR_F_EVENT_QUEUE))
		return 0;

	spin_lock_irq(&dev->event_lock);
	for (i = 0; i < VSTELLAR_EVENT_BUFS; i++) {
		ret = vstellar_post_event(dev, &dev->event_bufs[i], GFP_ATOMIC);
		if (ret)
			break;
	}
	if (i)
		dev->events_on = true;
	spin_unlock_irq(&dev->event_lock);
	if (!i)
		return ret;
	virtqueue_kick(dev->event_vq);
	return 0;
}

/* After the device reset: the buffers are ours again. */
void vstellar_event_free(struct vstellar_dev *dev)
{
	kfree(dev->event_bufs);
	dev->event_bufs = NULL;
}

static void vstellar_dispatch(struct vstellar_dev *dev,
			      const struct vstellar_event *ev)
{
	u32 type = le32_to_cpu(ev->type);
	u32 handle = le32_to_cpu(ev->handle);
	u32 dropped = le32_to_cpu(ev->dropped);
	struct ib_event ibev = {};

	if (dropped)
		dev_warn_ratelimited(&dev->vdev->dev,
				     "device dropped %u events\n", dropped);

	switch (type) {
	case VSTELLAR_EVENT_CQ_COMP:
	case VSTELLAR_EVENT_CQ_ERR:
		vstellar_cq_event(dev, type, handle);
		break;
	case VSTELLAR_EVENT_QP_FATAL:
	case VSTELLAR_EVENT_QP_REQ_ERR:
	case VSTELLAR_EVENT_QP_ACCESS_ERR:
	case VSTELLAR_EVENT_SQ_DRAINED:
	case VSTELLAR_EVENT_QP_LAST_WQE:
		vstellar_qp_event(dev, type, handle);
		break;
	case VSTELLAR_EVENT_SRQ_LIMIT:
	case VSTELLAR_EVENT_SRQ_ERR:
		vstellar_srq_event(dev, type, handle);
		break;
	case VSTELLAR_EVENT_DEVICE_FATAL:
		dev_err_ratelimited(&dev->vdev->dev,
				    "device fatal error: the device must be reset (reload the driver)\n");
		ibev.device = &dev->ibdev;
		ibev.event = IB_EVENT_DEVICE_FATAL;
		ib_dispatch_event(&ibev);
		break;
	default:
		/* Port and GID events are never sent (spec §16). */
		dev_dbg_ratelimited(&dev->vdev->dev, "event %u (%u) ignored\n",
				    type, handle);
		break;
	}
}

void vstellar_event_done(struct virtqueue *vq)
{
	struct vstellar_dev *dev = vq->vdev->priv;
	struct vstellar_event *ev;
	unsigned long flags;
	bool posted = false;
	unsigned int len;
	int ret;

	spin_lock_irqsave(&dev->event_lock, flags);
	if (!dev->events_on)
		goto out;
	do {
		virtqueue_disable_cb(vq);
		while ((ev = virtqueue_get_buf(vq, &len))) {
			if (len == sizeof(*ev))
				vstellar_dispatch(dev, ev);
			else
				dev_warn_ratelimited(&dev->vdev->dev,
						     "%u-byte event dropped\n",
						     len);
			memset(ev, 0, sizeof(*ev));
			ret = vstellar_post_event(dev, ev, GFP_ATOMIC);
			if (ret)
				dev_warn_ratelimited(&dev->vdev->dev,
						     "re-posting an event buffer: %d\n",
						     ret);
			else
				posted = true;
		}
	} while (!virtqueue_enable_cb(vq));
	if (posted)
		virtqueue_kick(vq);
out:
	spin_unlock_irqrestore(&dev->event_lock, flags);
}
