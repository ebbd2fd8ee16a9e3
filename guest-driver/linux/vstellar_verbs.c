// SPDX-License-Identifier: GPL-2.0
/*
 * vstellar: device and port queries, user contexts, mmap, PDs and AHs.
 */

#include <linux/mm.h>
#include <linux/slab.h>
#include <rdma/ib_cache.h>
#include <rdma/ib_mad.h>
#include <rdma/uverbs_ioctl.h>

#include "vstellar.h"

static bool vstellar_udata_in_ok(struct ib_udata *udata)
{
	return !udata || !udata->inlen ||
	       ib_is_udata_cleared(udata, 0, udata->inlen);
}

int vstellar_query_device(struct ib_device *ibdev,
			  struct ib_device_attr *props, struct ib_udata *udata)
{
	if (!vstellar_udata_in_ok(udata))
		return -EINVAL;
	*props = to_vdev(ibdev)->attr;
	return 0;
}

static enum ib_mtu vstellar_mtu(__le32 v)
{
	u32 mtu = le32_to_cpu(v);

	return mtu >= IB_MTU_256 && mtu <= IB_MTU_4096 ? mtu : IB_MTU_256;
}

int vstellar_query_port(struct ib_device *ibdev, u32 port,
			struct ib_port_attr *props)
{
	struct vstellar_dev *dev = to_vdev(ibdev);
	const struct vstellar_port_attr *p = &dev->port;
	u32 state = le32_to_cpu(p->state);

	if (port != 1)
		return -EINVAL;
	/* The caller zeroed props. */
	props->subnet_prefix = be64_to_cpu(dev->gid0.global.subnet_prefix);
	props->state = state >= IB_PORT_DOWN && state <= IB_PORT_ACTIVE ?
		       state : IB_PORT_DOWN;
	props->max_mtu = vstellar_mtu(p->max_mtu);
	props->active_mtu = vstellar_mtu(p->active_mtu);
	props->phys_mtu = ib_mtu_enum_to_int(props->max_mtu);
	props->gid_tbl_len = dev->cfg.max_gid;
	props->max_msg_sz = le32_to_cpu(p->max_msg_sz);
	props->pkey_tbl_len = 1;
	props->lid = dev->lid;
	props->max_vl_num = 1;
	props->active_width = p->active_width;
	props->active_speed = p->active_speed;
	props->phys_state = p->phys_state;
	return 0;
}

int vstellar_get_port_immutable(struct ib_device *ibdev, u32 port,
				struct ib_port_immutable *immutable)
{
	if (port != 1)
		return -EINVAL;
	immutable->pkey_tbl_len = 1;
	immutable->gid_tbl_len = to_vdev(ibdev)->cfg.max_gid;
	/*
	 * InfiniBand, not RoCE: the core fills a RoCE port's GID table from a
	 * netdev only, and user space must see the device's own GIDs. The
	 * device routes by GID alone, so the port requires a GRH: the core
	 * then refuses a LID-only address, and user space sees
	 * IBV_QPF_GRH_REQUIRED (UCX and NCCL address peers globally).
	 */
	immutable->core_cap_flags = RDMA_CORE_PORT_IBA_IB |
				    RDMA_CORE_CAP_IB_GRH_REQUIRED;
	immutable->max_mad_size = IB_MGMT_MAD_SIZE;
	return 0;
}

enum rdma_link_layer vstellar_get_link_layer(struct ib_device *ibdev,
					     u32 port)
{
	return IB_LINK_LAYER_INFINIBAND;
}

int vstellar_query_gid(struct ib_device *ibdev, u32 port, int index,
		       union ib_gid *gid)
{
	struct vstellar_dev *dev = to_vdev(ibdev);
	struct vstellar_gid_req req = {
		.port = cpu_to_le32(1),
		.index = cpu_to_le32(index),
	};
	struct vstellar_gid_entry e;
	int ret;

	if (port != 1 || index < 0 || index >= dev->cfg.max_gid)
		return -EINVAL;
	ret = vstellar_cmd(dev, VSTELLAR_OP_QUERY_GID, &req, sizeof(req), &e,
			   sizeof(e));
	if (ret)
		return ret;
	/* An empty entry reads as the zero GID, as on hardware. */
	if (le32_to_cpu(e.type) == VSTELLAR_GID_TYPE_NONE)
		memset(gid->raw, 0, sizeof(gid->raw));
	else
		memcpy(gid->raw, e.gid, sizeof(gid->raw));
	return 0;
}

int vstellar_query_pkey(struct ib_device *ibdev, u32 port, u16 index,
			u16 *pkey)
{
	if (port != 1 || index)
		return -EINVAL;
	*pkey = IB_DEFAULT_PKEY_FULL;
	return 0;
}

void vstellar_get_fw_str(struct ib_device *ibdev, char *str)
{
	u64 fw = to_vdev(ibdev)->attr.fw_ver;

	snprintf(str, IB_FW_VERSION_NAME_MAX, "%u.%u.%u", (u32)(fw >> 32),
		 (u32)(fw >> 16) & 0xffff, (u32)fw & 0xffff);
}

static struct rdma_user_mmap_entry *
vstellar_insert(struct ib_ucontext *uctx, enum vstellar_mmap_type type,
		phys_addr_t phys, size_t len, struct vstellar_buf *buf,
		u64 *key)
{
	struct vstellar_mmap_entry *entry;
	int ret;

	entry = kzalloc(sizeof(*entry), GFP_KERNEL);
	if (!entry)
		return ERR_PTR(-ENOMEM);
	entry->type = type;
	entry->phys = phys;
	if (buf) {
		kref_get(&buf->ref);
		entry->buf = buf;
	}
	ret = rdma_user_mmap_entry_insert(uctx, &entry->rdma_entry, len);
	if (ret) {
		vstellar_buf_put(entry->buf);
		kfree(entry);
		return ERR_PTR(ret);
	}
	*key = rdma_user_mmap_get_offset(&entry->rdma_entry);
	return &entry->rdma_entry;
}

/*
 * The entry takes a reference on the ring: the pages stay until the last
 * user mapping is gone, whenever the device lets go of them.
 */
struct rdma_user_mmap_entry *
vstellar_insert_ring(struct ib_ucontext *uctx, struct vstellar_buf *buf,
		     u64 *key)
{
	return vstellar_insert(uctx, VSTELLAR_MMAP_RING, virt_to_phys(buf->va),
			       buf->size, buf, key);
}

int vstellar_alloc_ucontext(struct ib_ucontext *ibuctx, struct ib_udata *udata)
{
	struct vstellar_dev *dev = to_vdev(ibuctx->device);
	struct vstellar_ucontext *uctx = to_vuctx(ibuctx);
	struct vstellar_alloc_ucontext_resp resp = {};
	struct rdma_user_mmap_entry *e;
	int ret;

	if (udata->outlen < sizeof(resp) || !vstellar_udata_in_ok(udata))
		return -EINVAL;
	if (dev->dead)
		return -EIO;

	e = vstellar_insert(ibuctx, dev->db_shmem ? VSTELLAR_MMAP_DB_SHMEM :
			    VSTELLAR_MMAP_DB_RAM, dev->db_phys, dev->db_size,
			    NULL, &resp.doorbell_mmap_key);
	if (IS_ERR(e))
		return PTR_ERR(e);
	uctx->db_entry = e;
	resp.doorbell_mmap_len = dev->db_size;

	if (dev->wakeup) {
		e = vstellar_insert(ibuctx, VSTELLAR_MMAP_NOTIFY,
				    dev->notify.page, PAGE_SIZE, NULL,
				    &resp.notify_mmap_key);
		if (IS_ERR(e)) {
			ret = PTR_ERR(e);
			goto err;
		}
		uctx->notify_entry = e;
		resp.flags |= VSTELLAR_UCTX_IDLE_WAKEUP;
		resp.notify_offset = dev->notify.offset;
		resp.notify_value = VSTELLAR_QUEUE_WAKEUP;
	}
	if (dev->db_shmem)
		resp.flags |= VSTELLAR_UCTX_DOORBELL_SHMEM;
	resp.abi_version = VSTELLAR_UVERBS_ABI_VERSION;
	resp.device_abi = dev->cfg.abi_version;
	resp.max_qp = dev->cfg.max_qp;
	resp.max_inline_data =
		virtio_has_feature(dev->vdev, VSTELLAR_F_INLINE) ?
		dev->cfg.max_inline_data : 0;
	resp.doorbell_page_size = dev->cfg.doorbell_page_size;
	resp.doorbell_record_size = dev->cfg.doorbell_record_size;
	resp.doorbell_records_offset = dev->cfg.doorbell_records_offset;
	resp.doorbell_records = dev->cfg.doorbell_records;

	ret = ib_copy_to_udata(udata, &resp, sizeof(resp));
	if (ret)
		goto err;
	return 0;

err:
	vstellar_dealloc_ucontext(ibuctx);
	return ret;
}

void vstellar_dealloc_ucontext(struct ib_ucontext *ibuctx)
{
	struct vstellar_ucontext *uctx = to_vuctx(ibuctx);

	rdma_user_mmap_entry_remove(uctx->notify_entry);
	rdma_user_mmap_entry_remove(uctx->db_entry);
	uctx->notify_entry = NULL;
	uctx->db_entry = NULL;
}

/*
 * Having it lets the device go while processes still hold contexts: the
 * core then destroys their objects and zaps their mappings.
 */
void vstellar_disassociate_ucontext(struct ib_ucontext *ibuctx)
{
}

int vstellar_mmap(struct ib_ucontext *ibuctx, struct vm_area_struct *vma)
{
	struct rdma_user_mmap_entry *rentry;
	struct vstellar_mmap_entry *entry;
	pgprot_t prot = vma->vm_page_prot;
	int ret;

	if (vma->vm_flags & VM_EXEC)
		return -EPERM;
	/* Also checks that the length is the entry's. */
	rentry = rdma_user_mmap_entry_get(ibuctx, vma);
	if (!rentry)
		return -EINVAL;
	entry = to_vmentry(rentry);
	vm_flags_clear(vma, VM_MAYEXEC);

	/*
	 * Doorbells and rings are memory the device polls, cacheable; the
	 * wake-up register is a device register.
	 */
	if (entry->type == VSTELLAR_MMAP_NOTIFY)
		prot = pgprot_noncached(prot);
	ret = rdma_user_mmap_io(ibuctx, vma, PHYS_PFN(entry->phys),
				vma->vm_end - vma->vm_start, prot, rentry);
	rdma_user_mmap_entry_put(rentry);
	return ret;
}

void vstellar_mmap_free(struct rdma_user_mmap_entry *rentry)
{
	struct vstellar_mmap_entry *entry = to_vmentry(rentry);

	vstellar_buf_put(entry->buf);
	kfree(entry);
}

int vstellar_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct vstellar_dev *dev = to_vdev(ibpd->device);
	struct vstellar_handle_resp resp;
	u32 pdn;
	int ret;

	if (!vstellar_udata_in_ok(udata))
		return -EINVAL;
	ret = vstellar_cmd(dev, VSTELLAR_OP_ALLOC_PD, NULL, 0, &resp,
			   sizeof(resp));
	if (ret)
		return ret;
	pdn = le32_to_cpu(resp.handle);
	if (!pdn || pdn > dev->cfg.max_pd) {
		dev_err_ratelimited(&dev->vdev->dev, "ALLOC_PD: PD %u\n", pdn);
		return -EPROTO;
	}
	to_vpd(ibpd)->pdn = pdn;
	return 0;
}

int vstellar_dealloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	int ret = vstellar_destroy_cmd(to_vdev(ibpd->device),
				       VSTELLAR_OP_DEALLOC_PD,
				       to_vpd(ibpd)->pdn);

	return ret < 0 ? ret : 0;
}

int vstellar_ah_attr_to_dev(struct vstellar_dev *dev,
			    const struct rdma_ah_attr *ah,
			    struct vstellar_ah_attr *out)
{
	const struct ib_global_route *grh;
	u32 port = rdma_ah_get_port_num(ah);

	/* The device routes by GID only. */
	if (!(rdma_ah_get_ah_flags(ah) & IB_AH_GRH))
		return -EINVAL;
	grh = rdma_ah_read_grh(ah);
	if (port > 1 || grh->sgid_index >= dev->cfg.max_gid)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	memcpy(out->dgid, grh->dgid.raw, sizeof(out->dgid));
	out->flow_label = cpu_to_le32(grh->flow_label);
	out->sgid_index = grh->sgid_index;
	out->hop_limit = grh->hop_limit;
	out->traffic_class = grh->traffic_class;
	out->sl = rdma_ah_get_sl(ah);
	out->port = port;
	return 0;
}

int vstellar_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init_attr,
		       struct ib_udata *udata)
{
	struct vstellar_dev *dev = to_vdev(ibah->device);
	struct vstellar_create_ah_req req = {};
	struct vstellar_handle_resp resp;
	u32 ahn;
	int ret;

	/* Only user AHs (UD is not in ABI 1.1): a command sleeps. */
	if (!udata || !(init_attr->flags & RDMA_CREATE_AH_SLEEPABLE))
		return -EOPNOTSUPP;
	if (!vstellar_udata_in_ok(udata))
		return -EINVAL;
	ret = vstellar_ah_attr_to_dev(dev, init_attr->ah_attr, &req.ah_attr);
	if (ret)
		return ret;
	req.pdn = cpu_to_le32(to_vpd(ibah->pd)->pdn);
	ret = vstellar_cmd(dev, VSTELLAR_OP_CREATE_AH, &req, sizeof(req),
			   &resp, sizeof(resp));
	if (ret)
		return ret;
	ahn = le32_to_cpu(resp.handle);
	if (!ahn || ahn > dev->cfg.max_ah) {
		dev_err_ratelimited(&dev->vdev->dev, "CREATE_AH: AH %u\n", ahn);
		return -EPROTO;
	}
	to_vah(ibah)->ahn = ahn;
	return 0;
}

int vstellar_destroy_ah(struct ib_ah *ibah, u32 flags)
{
	int ret;

	if (WARN_ON_ONCE(!(flags & RDMA_DESTROY_AH_SLEEPABLE)))
		return -EOPNOTSUPP;
	ret = vstellar_destroy_cmd(to_vdev(ibah->device),
				   VSTELLAR_OP_DESTROY_AH, to_vah(ibah)->ahn);
	return ret < 0 ? ret : 0;
}
