// SPDX-License-Identifier: GPL-2.0
/*
 * vstellar: module, virtio driver and ib_device registration.
 */

#include <linux/iommu.h>
#include <linux/module.h>
#include <linux/pci.h>
#include <linux/sizes.h>
#include <linux/virtio.h>
#include <linux/virtio_config.h>

#include "vstellar.h"

static unsigned int virtio_id = VSTELLAR_DEVICE_ID;
module_param(virtio_id, uint, 0444);
MODULE_PARM_DESC(virtio_id,
		 "virtio device id to bind (default 42; a stand-in id for VMMs that cannot name 42)");

unsigned int vstellar_cmd_timeout_ms = 10000;
module_param_named(cmd_timeout_ms, vstellar_cmd_timeout_ms, uint, 0644);
MODULE_PARM_DESC(cmd_timeout_ms,
		 "control command timeout in ms; a command that times out disables the device");

/* Not const: virtio_id replaces the id before the driver registers. */
static struct virtio_device_id vstellar_id_table[] = {
	{ VSTELLAR_DEVICE_ID, VIRTIO_DEV_ANY_ID },
	{ 0 },
};
MODULE_DEVICE_TABLE(virtio, vstellar_id_table);

static unsigned int vstellar_features[] = {
	VSTELLAR_F_SHMEM_DOORBELL,
	VSTELLAR_F_EVENT_QUEUE,
	VSTELLAR_F_RC,
	VSTELLAR_F_ATOMIC,
	VSTELLAR_F_INLINE,
	VSTELLAR_F_IDLE_WAKEUP,
	VSTELLAR_F_CQ_NOTIFY,
};

/* What abi.Config.Validate checks (spec §5), and what the driver needs. */
static int vstellar_check_config(struct virtio_device *vdev,
				 const struct vstellar_cfg *c)
{
	const struct {
		const char *name;
		u64 v;
		u64 ceiling;
	} limits[] = {
		{ "max_qp", c->max_qp, VSTELLAR_CEILING_MAX_QP },
		{ "max_cq", c->max_cq, VSTELLAR_CEILING_MAX_CQ },
		{ "max_mr", c->max_mr, VSTELLAR_CEILING_MAX_MR },
		{ "max_pd", c->max_pd, VSTELLAR_CEILING_MAX_PD },
		{ "max_ah", c->max_ah, VSTELLAR_CEILING_MAX_AH },
		{ "max_qp_wr", c->max_qp_wr, VSTELLAR_CEILING_MAX_QP_WR },
		{ "max_cqe", c->max_cqe, VSTELLAR_CEILING_MAX_CQE },
		{ "max_sge", c->max_sge, VSTELLAR_CEILING_MAX_SGE },
		{ "max_inline_data", c->max_inline_data,
		  VSTELLAR_CEILING_MAX_INLINE_DATA },
		{ "max_qp_rd_atom", c->max_qp_rd_atom,
		  VSTELLAR_CEILING_MAX_QP_RD_ATOM },
		{ "max_gid", c->max_gid, VSTELLAR_CEILING_MAX_GID },
		{ "max_mr_size", c->max_mr_size, VSTELLAR_CEILING_MAX_MR_SIZE },
	};
	u64 ps = c->doorbell_page_size, rs = c->doorbell_record_size;
	u64 size = ps * c->doorbell_pages;
	unsigned int i;

	if (c->abi_version >> 16 != VSTELLAR_ABI_MAJOR) {
		dev_err(&vdev->dev, "device ABI %u.%u, driver speaks %u.x\n",
			c->abi_version >> 16, c->abi_version & 0xffff,
			VSTELLAR_ABI_MAJOR);
		return -ENODEV;
	}
	for (i = 0; i < ARRAY_SIZE(limits); i++) {
		if (limits[i].v && limits[i].v <= limits[i].ceiling)
			continue;
		dev_err(&vdev->dev, "config %s = %llu, want 1..%llu\n",
			limits[i].name, limits[i].v, limits[i].ceiling);
		return -ENODEV;
	}
	/* ABI 1.1 (SRQ); read as 0 from an older device. */
	if ((c->abi_version & 0xffff) >= 1 &&
	    (!c->max_srq || c->max_srq > VSTELLAR_CEILING_MAX_SRQ ||
	     !c->max_srq_wr || c->max_srq_wr > VSTELLAR_CEILING_MAX_SRQ_WR ||
	     !c->max_srq_sge || c->max_srq_sge > VSTELLAR_CEILING_MAX_SRQ_SGE)) {
		dev_err(&vdev->dev, "config: %u SRQs of %u WRs and %u SGEs\n",
			c->max_srq, c->max_srq_wr, c->max_srq_sge);
		return -ENODEV;
	}
	if (!(c->page_size_cap & SZ_4K)) {
		dev_err(&vdev->dev, "config page_size_cap %#llx lacks 4 KiB\n",
			c->page_size_cap);
		return -ENODEV;
	}
	if (!c->phys_port_cnt || c->doorbell_shmid != VSTELLAR_DOORBELL_SHM_ID) {
		dev_err(&vdev->dev, "config: %u ports, doorbells in shmid %u\n",
			c->phys_port_cnt, c->doorbell_shmid);
		return -ENODEV;
	}
	if (ps < VSTELLAR_DOORBELL_MIN_PAGE_SIZE || !is_power_of_2(ps) ||
	    rs < 8 || !is_power_of_2(rs) || rs > ps ||
	    !c->doorbell_pages || !is_power_of_2(c->doorbell_pages) ||
	    c->doorbell_records_offset < ps ||
	    c->doorbell_records_offset % rs ||
	    c->doorbell_records_offset + c->doorbell_records * rs > size ||
	    (u64)c->doorbell_records <
		    (u64)c->max_qp + c->max_cq + c->max_srq ||
	    size % PAGE_SIZE) {
		dev_err(&vdev->dev,
			"config: bad doorbell layout: %u pages of %u, %u records of %u at %u\n",
			c->doorbell_pages, c->doorbell_page_size,
			c->doorbell_records, c->doorbell_record_size,
			c->doorbell_records_offset);
		return -ENODEV;
	}
	return 0;
}

static int vstellar_read_config(struct virtio_device *vdev,
				struct vstellar_cfg *c)
{
	struct vstellar_config raw;

	virtio_cread_bytes(vdev, 0, &raw, sizeof(raw));
	c->abi_version = le32_to_cpu(raw.abi_version);
	c->status = le32_to_cpu(raw.status);
	c->node_guid = le64_to_cpu(raw.node_guid);
	c->max_mr_size = le64_to_cpu(raw.max_mr_size);
	c->page_size_cap = le64_to_cpu(raw.page_size_cap);
	c->max_qp = le32_to_cpu(raw.max_qp);
	c->max_cq = le32_to_cpu(raw.max_cq);
	c->max_mr = le32_to_cpu(raw.max_mr);
	c->max_pd = le32_to_cpu(raw.max_pd);
	c->max_ah = le32_to_cpu(raw.max_ah);
	c->max_qp_wr = le32_to_cpu(raw.max_qp_wr);
	c->max_cqe = le32_to_cpu(raw.max_cqe);
	c->max_sge = le32_to_cpu(raw.max_sge);
	c->max_inline_data = le32_to_cpu(raw.max_inline_data);
	c->max_qp_rd_atom = le32_to_cpu(raw.max_qp_rd_atom);
	c->max_gid = le32_to_cpu(raw.max_gid);
	if ((c->abi_version & 0xffff) >= 1) {
		c->max_srq = le32_to_cpu(raw.max_srq);
		c->max_srq_wr = le32_to_cpu(raw.max_srq_wr);
		c->max_srq_sge = le32_to_cpu(raw.max_srq_sge);
	}
	c->phys_port_cnt = raw.phys_port_cnt;
	c->doorbell_shmid = raw.doorbell_shmid;
	c->doorbell_record_size = le16_to_cpu(raw.doorbell_record_size);
	c->doorbell_page_size = le32_to_cpu(raw.doorbell_page_size);
	c->doorbell_pages = le32_to_cpu(raw.doorbell_pages);
	c->doorbell_records_offset = le32_to_cpu(raw.doorbell_records_offset);
	c->doorbell_records = le32_to_cpu(raw.doorbell_records);
	return vstellar_check_config(vdev, c);
}

static int vstellar_validate(struct virtio_device *vdev)
{
	struct device *parent = vdev->dev.parent;
	struct iommu_domain *domain;
	struct virtio_shm_region r;
	u32 pages, page_size;

	if (!virtio_has_feature(vdev, VIRTIO_F_VERSION_1)) {
		dev_err(&vdev->dev, "device is not virtio 1.x\n");
		return -ENODEV;
	}
	/* The device takes guest physical addresses, not DMA addresses. */
	if (virtio_has_feature(vdev, VIRTIO_F_ACCESS_PLATFORM)) {
		dev_err(&vdev->dev,
			"VIRTIO_F_ACCESS_PLATFORM: the device needs guest physical addresses\n");
		return -ENODEV;
	}
	domain = parent ? iommu_get_domain_for_dev(parent) : NULL;
	if (domain && domain->type != IOMMU_DOMAIN_IDENTITY) {
		dev_err(&vdev->dev,
			"behind a translating IOMMU: the device needs guest physical addresses\n");
		return -ENODEV;
	}

	virtio_cread_le(vdev, struct vstellar_config, doorbell_pages, &pages);
	virtio_cread_le(vdev, struct vstellar_config, doorbell_page_size,
			&page_size);
	if (!virtio_get_shm_region(vdev, &r, VSTELLAR_DOORBELL_SHM_ID) ||
	    r.len < (u64)pages * page_size)
		__virtio_clear_bit(vdev, VSTELLAR_F_SHMEM_DOORBELL);
	if (vstellar_find_notify(vdev, NULL, false))
		__virtio_clear_bit(vdev, VSTELLAR_F_IDLE_WAKEUP);
	/* User space kicks with a bare 16-bit queue index. */
	__virtio_clear_bit(vdev, VIRTIO_F_NOTIFICATION_DATA);
	return 0;
}

static const struct ib_device_ops vstellar_dev_ops = {
	.owner = THIS_MODULE,
	.driver_id = RDMA_DRIVER_UNKNOWN,
	.uverbs_abi_ver = VSTELLAR_UVERBS_ABI_VERSION,

	.alloc_pd = vstellar_alloc_pd,
	.alloc_ucontext = vstellar_alloc_ucontext,
	.create_ah = vstellar_create_ah,
#ifdef VSTELLAR_CREATE_USER_CQ
	.create_user_cq = vstellar_create_cq,
#else
	.create_cq = vstellar_create_cq,
#endif
	.create_qp = vstellar_create_qp,
	.create_srq = vstellar_create_srq,
	.dealloc_pd = vstellar_dealloc_pd,
	.dealloc_ucontext = vstellar_dealloc_ucontext,
	.dereg_mr = vstellar_dereg_mr,
	.destroy_ah = vstellar_destroy_ah,
	.destroy_cq = vstellar_destroy_cq,
	.destroy_qp = vstellar_destroy_qp,
	.destroy_srq = vstellar_destroy_srq,
	.disassociate_ucontext = vstellar_disassociate_ucontext,
	.get_dev_fw_str = vstellar_get_fw_str,
	.get_link_layer = vstellar_get_link_layer,
	.get_port_immutable = vstellar_get_port_immutable,
	.mmap = vstellar_mmap,
	.mmap_free = vstellar_mmap_free,
	.modify_qp = vstellar_modify_qp,
	.modify_srq = vstellar_modify_srq,
	.query_device = vstellar_query_device,
	.query_gid = vstellar_query_gid,
	.query_pkey = vstellar_query_pkey,
	.query_port = vstellar_query_port,
	.query_qp = vstellar_query_qp,
	.query_srq = vstellar_query_srq,
	.reg_user_mr = vstellar_reg_user_mr,

	INIT_RDMA_OBJ_SIZE(ib_ah, vstellar_ah, ibah),
	INIT_RDMA_OBJ_SIZE(ib_cq, vstellar_cq, ibcq),
	INIT_RDMA_OBJ_SIZE(ib_pd, vstellar_pd, ibpd),
	INIT_RDMA_OBJ_SIZE(ib_qp, vstellar_qp, ibqp),
	INIT_RDMA_OBJ_SIZE(ib_srq, vstellar_srq, ibsrq),
	INIT_RDMA_OBJ_SIZE(ib_ucontext, vstellar_ucontext, ibuctx),
};

static u8 vstellar_atomic_cap(struct vstellar_dev *dev, u8 cap)
{
	if (!virtio_has_feature(dev->vdev, VSTELLAR_F_ATOMIC))
		return IB_ATOMIC_NONE;
	switch (cap) {
	case VSTELLAR_ATOMIC_GLOB:
		return IB_ATOMIC_GLOB;
	case VSTELLAR_ATOMIC_HCA:
		return IB_ATOMIC_HCA;
	default:
		return IB_ATOMIC_NONE;
	}
}

static void vstellar_check_limits(struct vstellar_dev *dev,
				  const struct vstellar_device_attr *da)
{
	const struct vstellar_cfg *c = &dev->cfg;
	const struct {
		const char *name;
		u64 cfg;
		u64 qd;
	} l[] = {
		{ "max_qp", c->max_qp, le32_to_cpu(da->max_qp) },
		{ "max_qp_wr", c->max_qp_wr, le32_to_cpu(da->max_qp_wr) },
		{ "max_sge", c->max_sge, le32_to_cpu(da->max_sge) },
		{ "max_cq", c->max_cq, le32_to_cpu(da->max_cq) },
		{ "max_cqe", c->max_cqe, le32_to_cpu(da->max_cqe) },
		{ "max_mr", c->max_mr, le32_to_cpu(da->max_mr) },
		{ "max_pd", c->max_pd, le32_to_cpu(da->max_pd) },
		{ "max_ah", c->max_ah, le32_to_cpu(da->max_ah) },
		{ "max_qp_rd_atom", c->max_qp_rd_atom,
		  le32_to_cpu(da->max_qp_rd_atom) },
		{ "max_inline_data", c->max_inline_data,
		  le32_to_cpu(da->max_inline_data) },
		{ "max_mr_size", c->max_mr_size, le64_to_cpu(da->max_mr_size) },
	};
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(l); i++)
		if (l[i].cfg != l[i].qd)
			dev_warn(&dev->vdev->dev,
				 "QUERY_DEVICE %s %llu, config space %llu: using config space\n",
				 l[i].name, l[i].qd, l[i].cfg);
}

/* QUERY_DEVICE and QUERY_PORT once: nothing in them changes. */
static int vstellar_query_attrs(struct vstellar_dev *dev)
{
	struct vstellar_query_port_req preq = { .port = cpu_to_le32(1) };
	struct ib_device_attr *a = &dev->attr;
	struct vstellar_cfg *c = &dev->cfg;
	struct vstellar_device_attr da;
	u64 caps, guid;
	int ret;

	ret = vstellar_cmd(dev, VSTELLAR_OP_QUERY_DEVICE, NULL, 0, &da,
			   sizeof(da));
	if (ret) {
		dev_err(&dev->vdev->dev, "QUERY_DEVICE: %d\n", ret);
		return ret;
	}
	ret = vstellar_cmd(dev, VSTELLAR_OP_QUERY_PORT, &preq, sizeof(preq),
			   &dev->port, sizeof(dev->port));
	if (ret) {
		dev_err(&dev->vdev->dev, "QUERY_PORT: %d\n", ret);
		return ret;
	}

	/* The device's own address: asked for, never derived (spec §8.3). */
	ret = vstellar_query_gid(&dev->ibdev, 1, 0, &dev->gid0);
	if (ret) {
		dev_err(&dev->vdev->dev, "QUERY_GID 0: %d\n", ret);
		return ret;
	}

	/*
	 * Limits come from config space, validated; QUERY_DEVICE repeats them
	 * (spec §8.1) and gives the rest.
	 */
	vstellar_check_limits(dev, &da);
	a->fw_ver = le64_to_cpu(da.fw_version);
	a->sys_image_guid = cpu_to_be64(le64_to_cpu(da.sys_image_guid));
	a->max_mr_size = c->max_mr_size;
	a->page_size_cap = c->page_size_cap & (SZ_4K | SZ_2M | SZ_1G);
	a->vendor_id = le32_to_cpu(da.vendor_id);
	a->vendor_part_id = le32_to_cpu(da.vendor_part_id);
	a->hw_ver = le32_to_cpu(da.hw_ver);
	a->max_qp = c->max_qp;
	a->max_qp_wr = c->max_qp_wr;
	caps = le64_to_cpu(da.device_cap_flags);
	a->device_cap_flags = IB_DEVICE_CURR_QP_STATE_MOD |
			      IB_DEVICE_SYS_IMAGE_GUID;
	if (caps & VSTELLAR_DEV_CAP_RC_RNR_NAK_GEN)
		a->device_cap_flags |= IB_DEVICE_RC_RNR_NAK_GEN;
	if (caps & VSTELLAR_DEV_CAP_PORT_ACTIVE_EVENT)
		a->device_cap_flags |= IB_DEVICE_PORT_ACTIVE_EVENT;
	a->max_send_sge = c->max_sge;
	a->max_recv_sge = c->max_sge;
	a->max_sge_rd = c->max_sge;
	a->max_cq = c->max_cq;
	a->max_cqe = c->max_cqe;
	a->max_mr = c->max_mr;
	a->max_pd = c->max_pd;
	a->max_qp_rd_atom = c->max_qp_rd_atom;
	a->max_qp_init_rd_atom = c->max_qp_rd_atom;
	a->max_res_rd_atom = c->max_qp * c->max_qp_rd_atom;
	a->atomic_cap = vstellar_atomic_cap(dev, da.atomic_cap);
	a->max_ah = c->max_ah;
	a->max_srq = c->max_srq;
	a->max_srq_wr = c->max_srq_wr;
	a->max_srq_sge = c->max_srq_sge;
	a->max_pkeys = 1;
	a->local_ca_ack_delay = da.local_ca_ack_delay;

	/* Informational: tools on an IB port refuse LID 0. */
	guid = c->node_guid;
	dev->lid = 1 + (u16)((guid ^ (guid >> 16) ^ (guid >> 32) ^
			      (guid >> 48)) % 0xbfff);
	return 0;
}

static void vstellar_teardown(struct vstellar_dev *dev)
{
	struct virtio_device *vdev = dev->vdev;
	unsigned long flags;

	virtio_reset_device(vdev);
	spin_lock_irqsave(&dev->event_lock, flags);
	dev->events_on = false;
	spin_unlock_irqrestore(&dev->event_lock, flags);
	/* The device is reset: what it held is ours again. */
	while (virtqueue_detach_unused_buf(dev->ctrl_vq))
		;
	while (virtqueue_detach_unused_buf(dev->event_vq))
		;
	vdev->config->del_vqs(vdev);
	vstellar_free_graves(dev);
	vstellar_doorbell_free(dev);
	vstellar_event_free(dev);
	vstellar_cmd_free(dev);
}

static int vstellar_probe(struct virtio_device *vdev)
{
	struct virtqueue_info vqs_info[VSTELLAR_NUM_QUEUES] = {
		[VSTELLAR_QUEUE_CONTROL] = { "control", vstellar_ctrl_done },
		[VSTELLAR_QUEUE_EVENT] = { "event", vstellar_event_done },
		/* Only user space kicks it; nothing is ever posted. */
		[VSTELLAR_QUEUE_WAKEUP] = { "wakeup", NULL },
	};
	struct virtqueue *vqs[VSTELLAR_NUM_QUEUES];
	struct vstellar_dev *dev;
	struct ib_device *ibdev;
	int ret;

	if (!virtio_has_feature(vdev, VSTELLAR_F_RC)) {
		dev_err(&vdev->dev, "device offers no RC QPs\n");
		return -ENODEV;
	}

	dev = ib_alloc_device(vstellar_dev, ibdev);
	if (!dev)
		return -ENOMEM;
	dev->vdev = vdev;
	dev->dma_dev = vdev->dev.parent;
	vdev->priv = dev;
	xa_init_flags(&dev->cqs, XA_FLAGS_LOCK_IRQ);
	xa_init_flags(&dev->qps, XA_FLAGS_LOCK_IRQ);
	xa_init_flags(&dev->srqs, XA_FLAGS_LOCK_IRQ);
	spin_lock_init(&dev->grave_lock);
	spin_lock_init(&dev->event_lock);
	INIT_LIST_HEAD(&dev->grave_bufs);
	INIT_LIST_HEAD(&dev->grave_mrs);

	ret = vstellar_read_config(vdev, &dev->cfg);
	if (ret)
		goto err_dealloc;
	ret = vstellar_cmd_init(dev);
	if (ret)
		goto err_dealloc;
	ret = virtio_find_vqs(vdev, VSTELLAR_NUM_QUEUES, vqs, vqs_info, NULL);
	if (ret)
		goto err_cmd;
	dev->ctrl_vq = vqs[VSTELLAR_QUEUE_CONTROL];
	dev->event_vq = vqs[VSTELLAR_QUEUE_EVENT];

	/* Acked IDLE_WAKEUP: the device counts on user space's kicks. */
	if (virtio_has_feature(vdev, VSTELLAR_F_IDLE_WAKEUP)) {
		ret = vstellar_find_notify(vdev, &dev->notify, true);
		if (ret) {
			dev_err(&vdev->dev, "no wake-up register: %d\n", ret);
			goto err_vqs;
		}
		dev->wakeup = true;
	}

	virtio_device_ready(vdev);
	ret = vstellar_event_init(dev);
	if (ret)
		goto err_reset;

	/* Whatever a driver before a guest reboot created is dropped. */
	ret = vstellar_cmd(dev, VSTELLAR_OP_RESET_STATE, NULL, 0, NULL, 0);
	if (ret) {
		dev_err(&vdev->dev, "RESET_STATE: %d\n", ret);
		goto err_reset;
	}
	/* The device is live now: status says where the doorbells are. */
	ret = vstellar_read_config(vdev, &dev->cfg);
	if (ret)
		goto err_reset;
	ret = vstellar_doorbell_init(dev);
	if (ret)
		goto err_reset;
	ret = vstellar_query_attrs(dev);
	if (ret)
		goto err_reset;

	ibdev = &dev->ibdev;
	ibdev->node_type = RDMA_NODE_IB_CA;
	ibdev->phys_port_cnt = 1;
	ibdev->num_comp_vectors = 1;
	ibdev->node_guid = cpu_to_be64(dev->cfg.node_guid);
	ibdev->dev.parent = &vdev->dev;
	strscpy(ibdev->node_desc, "vStellar paravirtual RDMA",
		sizeof(ibdev->node_desc));
	ib_set_device_ops(ibdev, &vstellar_dev_ops);
	/* umem DMA addresses are the guest physical ones the device takes. */
	ret = ib_register_device(ibdev, "vstellar%d", dev->dma_dev);
	if (ret) {
		dev_err(&vdev->dev, "ib_register_device: %d\n", ret);
		goto err_reset;
	}
	dev_info(&vdev->dev,
		 "%s: GID %pI6, doorbells in %s, %s wake-up, %u QPs, %u CQs, %u MRs\n",
		 dev_name(&ibdev->dev), dev->gid0.raw,
		 dev->db_shmem ? "shared memory" : "guest RAM",
		 dev->wakeup ? "with" : "without", dev->cfg.max_qp,
		 dev->cfg.max_cq, dev->cfg.max_mr);
	return 0;

err_reset:
	vstellar_teardown(dev);
	goto err_dealloc;
err_vqs:
	virtio_reset_device(vdev);
	vdev->config->del_vqs(vdev);
err_cmd:
	vstellar_cmd_free(dev);
err_dealloc:
	xa_destroy(&dev->cqs);
	xa_destroy(&dev->qps);
	ib_dealloc_device(&dev->ibdev);
	return ret;
}

static void vstellar_remove(struct virtio_device *vdev)
{
	struct vstellar_dev *dev = vdev->priv;

	/* Destroys every user object and zaps the user mappings. */
	ib_unregister_device(&dev->ibdev);
	vstellar_teardown(dev);
	WARN_ON(!xa_empty(&dev->cqs) || !xa_empty(&dev->qps));
	xa_destroy(&dev->cqs);
	xa_destroy(&dev->qps);
	ib_dealloc_device(&dev->ibdev);
}

static struct virtio_driver vstellar_driver = {
	.driver.name = KBUILD_MODNAME,
	.id_table = vstellar_id_table,
	.feature_table = vstellar_features,
	.feature_table_size = ARRAY_SIZE(vstellar_features),
	.validate = vstellar_validate,
	.probe = vstellar_probe,
	.remove = vstellar_remove,
};

static int __init vstellar_init(void)
{
	if (!virtio_id || virtio_id == VIRTIO_DEV_ANY_ID)
		return -EINVAL;
	vstellar_id_table[0].device = virtio_id;
	return register_virtio_driver(&vstellar_driver);
}

static void __exit vstellar_exit(void)
{
	unregister_virtio_driver(&vstellar_driver);
}

module_init(vstellar_init);
module_exit(vstellar_exit);

MODULE_DESCRIPTION("vStellar paravirtual RDMA device driver");
MODULE_LICENSE("GPL");
