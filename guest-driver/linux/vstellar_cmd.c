// SPDX-License-Identifier: GPL-2.0
/*
 * vstellar: the control queue (spec §7) and memory the device may touch.
 *
 * Commands go one at a time: the request and response buffers are the
 * device's own, allocated once. A command that times out leaves the device
 * holding them (and whatever the request pointed at), so the device is
 * declared dead: later commands fail with -EIO without being sent, and
 * nothing it may still touch is freed before the virtqueues are reset.
 */

#include <linux/jiffies.h>
#include <linux/scatterlist.h>
#include <linux/slab.h>
#include <linux/virtio.h>

#include "vstellar.h"

/* The largest request payload is MODIFY_QP's, the largest response DeviceAttr. */
#define VSTELLAR_CMD_REQ_MAX 128
#define VSTELLAR_CMD_RESP_MAX 192
#define VSTELLAR_CMD_REQ_BUF (VSTELLAR_REQUEST_HEADER_SIZE + VSTELLAR_CMD_REQ_MAX)
#define VSTELLAR_CMD_RESP_BUF \
	(VSTELLAR_RESPONSE_HEADER_SIZE + VSTELLAR_CMD_RESP_MAX)

int vstellar_cmd_init(struct vstellar_dev *dev)
{
	mutex_init(&dev->cmd_lock);
	init_completion(&dev->cmd_done);
	dev->cmd_req = kzalloc(VSTELLAR_CMD_REQ_BUF, GFP_KERNEL);
	dev->cmd_resp = kzalloc(VSTELLAR_CMD_RESP_BUF, GFP_KERNEL);
	if (!dev->cmd_req || !dev->cmd_resp) {
		vstellar_cmd_free(dev);
		return -ENOMEM;
	}
	return 0;
}

/* Only once the virtqueues are reset (or were never used). */
void vstellar_cmd_free(struct vstellar_dev *dev)
{
	kfree(dev->cmd_req);
	kfree(dev->cmd_resp);
	dev->cmd_req = NULL;
	dev->cmd_resp = NULL;
}

void vstellar_ctrl_done(struct virtqueue *vq)
{
	struct vstellar_dev *dev = vq->vdev->priv;

	complete(&dev->cmd_done);
}

static int vstellar_status_errno(struct vstellar_dev *dev, u32 op, u32 status)
{
	switch (status) {
	case VSTELLAR_STATUS_OK:
		return 0;
	case VSTELLAR_STATUS_INVALID_ARGUMENT:
	case VSTELLAR_STATUS_BAD_STATE:
		return -EINVAL;
	case VSTELLAR_STATUS_NOT_SUPPORTED:
		return -EOPNOTSUPP;
	case VSTELLAR_STATUS_NO_RESOURCES:
		return -ENOMEM;
	case VSTELLAR_STATUS_NOT_FOUND:
		return -ENOENT;
	case VSTELLAR_STATUS_BUSY:
		return -EBUSY;
	case VSTELLAR_STATUS_PERMISSION:
		return -EPERM;
	case VSTELLAR_STATUS_BAD_ADDRESS:
		return -EFAULT;
	case VSTELLAR_STATUS_DEVICE_ERROR:
		return -EIO;
	}
	dev_err_ratelimited(&dev->vdev->dev, "command %u: status %u\n", op,
			    status);
	return -EPROTO;
}

/* Called with cmd_lock held: wait for the one command in flight. */
static int vstellar_cmd_wait(struct vstellar_dev *dev, u32 op,
			     unsigned int *len)
{
	unsigned long left = msecs_to_jiffies(vstellar_cmd_timeout_ms);
	void *token;

	for (;;) {
		token = virtqueue_get_buf(dev->ctrl_vq, len);
		if (token)
			break;
		if (virtqueue_is_broken(dev->ctrl_vq))
			return -EIO;
		if (!left)
			return -ETIMEDOUT;
		left = wait_for_completion_timeout(&dev->cmd_done, left);
	}
	if (token != dev->cmd_req) {
		dev_err(&dev->vdev->dev, "command %u: unknown buffer completed\n",
			op);
		return -EPROTO;
	}
	return 0;
}

/**
 * vstellar_cmd - run one control command
 * @dev: the device
 * @op: VSTELLAR_OP_*
 * @req: request payload (@req_len bytes, may be NULL when 0)
 * @req_len: request payload size, exactly the opcode's
 * @resp: response payload (@resp_len bytes, may be NULL when 0)
 * @resp_len: response payload size, exactly the opcode's
 *
 * Return: 0, the device status as an errno, -EPROTO for a malformed
 * response, -ETIMEDOUT for the command that timed out (the device may
 * still use anything the request pointed at) or -EIO once the device is
 * dead (the command was not sent).
 */
int vstellar_cmd(struct vstellar_dev *dev, u32 op, const void *req,
		 size_t req_len, void *resp, size_t resp_len)
{
	struct vstellar_request_header *rh = dev->cmd_req;
	struct vstellar_response_header *sh = dev->cmd_resp;
	struct scatterlist out, in, *sgs[2] = { &out, &in };
	unsigned int len = 0;
	u32 status;
	int ret;

	if (WARN_ON(req_len > VSTELLAR_CMD_REQ_MAX ||
		    resp_len > VSTELLAR_CMD_RESP_MAX))
		return -EINVAL;

	mutex_lock(&dev->cmd_lock);
	if (dev->dead) {
		ret = -EIO;
		goto out;
	}
	rh->opcode = cpu_to_le32(op);
	rh->flags = 0;
	if (req_len)
		memcpy(rh + 1, req, req_len);
	memset(sh, 0, sizeof(*sh) + resp_len);
	sg_init_one(&out, rh, sizeof(*rh) + req_len);
	sg_init_one(&in, sh, sizeof(*sh) + resp_len);

	reinit_completion(&dev->cmd_done);
	ret = virtqueue_add_sgs(dev->ctrl_vq, sgs, 1, 1, rh, GFP_KERNEL);
	if (ret) {
		dev_err_ratelimited(&dev->vdev->dev,
				    "command %u: control queue: %d\n", op, ret);
		goto out;
	}
	if (!virtqueue_kick(dev->ctrl_vq)) {
		ret = -EIO;
		goto dead;
	}
	ret = vstellar_cmd_wait(dev, op, &len);
	if (ret == -ETIMEDOUT) {
		dev_err(&dev->vdev->dev,
			"command %u timed out after %u ms; device disabled\n",
			op, vstellar_cmd_timeout_ms);
		goto dead;
	}
	if (ret)
		goto dead;

	if (len < sizeof(*sh) || len > sizeof(*sh) + resp_len) {
		dev_err_ratelimited(&dev->vdev->dev,
				    "command %u: %u-byte response\n", op, len);
		ret = -EPROTO;
		goto out;
	}
	status = le32_to_cpu(sh->status);
	ret = vstellar_status_errno(dev, op, status);
	if (ret)
		goto out;
	if (len != sizeof(*sh) + resp_len) {
		dev_err_ratelimited(&dev->vdev->dev,
				    "command %u: %u-byte response, want %zu\n",
				    op, len, sizeof(*sh) + resp_len);
		ret = -EPROTO;
		goto out;
	}
	if (resp_len)
		memcpy(resp, sh + 1, resp_len);
	goto out;

dead:
	/* The device keeps the buffers: never reuse or free them. */
	dev->dead = true;
out:
	mutex_unlock(&dev->cmd_lock);
	return ret;
}

/**
 * vstellar_destroy_cmd - destroy an object at the device
 * @dev: the device
 * @op: a destroy opcode taking a handle
 * @handle: the object's number
 *
 * An object the device no longer knows (the daemon dropped its state) is
 * gone as asked.
 *
 * Return: 0 when the device is done with the object, 1 when the device
 * stopped answering (it may still use the object's memory: bury it), or a
 * negative errno (the object is unchanged).
 */
int vstellar_destroy_cmd(struct vstellar_dev *dev, u32 op, u32 handle)
{
	struct vstellar_handle_req req = { .handle = cpu_to_le32(handle) };
	int ret;

	ret = vstellar_cmd(dev, op, &req, sizeof(req), NULL, 0);
	switch (ret) {
	case 0:
	case -ENOENT:
		return 0;
	case -ETIMEDOUT:
	case -EIO:
		if (dev->dead)
			return 1;
		fallthrough;
	default:
		dev_warn_ratelimited(&dev->vdev->dev,
				     "destroying object %u (command %u): %d\n",
				     handle, op, ret);
		return ret;
	}
}

static void vstellar_buf_release(struct kref *ref)
{
	struct vstellar_buf *buf = container_of(ref, struct vstellar_buf, ref);

	free_pages_exact(buf->va, buf->size);
	kfree(buf);
}

/*
 * Guest-physically contiguous, zeroed, page aligned (so aligned to any ring
 * stride): what the device requires of a ring (spec §9).
 */
struct vstellar_buf *vstellar_buf_alloc(size_t size)
{
	struct vstellar_buf *buf;

	size = PAGE_ALIGN(size);
	if (!size || size > VSTELLAR_MAX_RING_SIZE)
		return ERR_PTR(-ENOMEM);
	buf = kzalloc(sizeof(*buf), GFP_KERNEL);
	if (!buf)
		return ERR_PTR(-ENOMEM);
	buf->va = alloc_pages_exact(size, GFP_KERNEL | __GFP_ZERO |
				    __GFP_NOWARN);
	if (!buf->va) {
		kfree(buf);
		return ERR_PTR(-ENOMEM);
	}
	buf->size = size;
	kref_init(&buf->ref);
	INIT_LIST_HEAD(&buf->grave);
	return buf;
}

void vstellar_buf_put(struct vstellar_buf *buf)
{
	if (buf)
		kref_put(&buf->ref, vstellar_buf_release);
}

/* Keep the caller's reference on @buf until the device has been reset. */
void vstellar_bury(struct vstellar_dev *dev, struct vstellar_buf *buf)
{
	unsigned long flags;

	if (!buf)
		return;
	spin_lock_irqsave(&dev->grave_lock, flags);
	list_add_tail(&buf->grave, &dev->grave_bufs);
	spin_unlock_irqrestore(&dev->grave_lock, flags);
}

/* After the device reset: nothing is in the device's hands any more. */
void vstellar_free_graves(struct vstellar_dev *dev)
{
	struct vstellar_buf *buf, *nbuf;
	struct vstellar_mr *mr, *nmr;
	LIST_HEAD(bufs);
	LIST_HEAD(mrs);

	spin_lock_irq(&dev->grave_lock);
	list_splice_init(&dev->grave_bufs, &bufs);
	list_splice_init(&dev->grave_mrs, &mrs);
	spin_unlock_irq(&dev->grave_lock);

	list_for_each_entry_safe(buf, nbuf, &bufs, grave) {
		list_del(&buf->grave);
		vstellar_buf_put(buf);
	}
	list_for_each_entry_safe(mr, nmr, &mrs, grave) {
		list_del(&mr->grave);
		vstellar_free_mr(mr);
	}
}
