// SPDX-License-Identifier: GPL-2.0
/*
 * vstellar: user memory regions. REG_MR takes a list of guest-physical
 * pages (spec §8.15); the device translates every SGE through it.
 */

#include <linux/slab.h>
#include <linux/sizes.h>
#include <rdma/ib_umem.h>
#include <rdma/iter.h>

#include "vstellar.h"

#ifdef VSTELLAR_UMEM_GET_VA
#define vstellar_umem_get ib_umem_get_va
#else
#define vstellar_umem_get ib_umem_get
#endif

#define VSTELLAR_MR_ACCESS (IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | \
			    IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_ATOMIC)

static u32 vstellar_mr_access(int access)
{
	u32 a = 0;

	if (access & IB_ACCESS_LOCAL_WRITE)
		a |= VSTELLAR_ACCESS_LOCAL_WRITE;
	if (access & IB_ACCESS_REMOTE_WRITE)
		a |= VSTELLAR_ACCESS_REMOTE_WRITE;
	if (access & IB_ACCESS_REMOTE_READ)
		a |= VSTELLAR_ACCESS_REMOTE_READ;
	if (access & IB_ACCESS_REMOTE_ATOMIC)
		a |= VSTELLAR_ACCESS_REMOTE_ATOMIC;
	return a;
}

void vstellar_free_mr(struct vstellar_mr *mr)
{
	ib_umem_release(mr->umem);
	kfree(mr);
}

/* The device may still use the MR's pages: keep them until it is reset. */
static void vstellar_bury_mr(struct vstellar_dev *dev, struct vstellar_mr *mr)
{
	unsigned long flags;

	spin_lock_irqsave(&dev->grave_lock, flags);
	list_add_tail(&mr->grave, &dev->grave_mrs);
	spin_unlock_irqrestore(&dev->grave_lock, flags);
}

#ifdef VSTELLAR_REG_MR_DMAH
struct ib_mr *vstellar_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length,
				   u64 virt_addr, int access,
				   struct ib_dmah *dmah,
				   struct ib_udata *udata)
#else
struct ib_mr *vstellar_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length,
				   u64 virt_addr, int access,
				   struct ib_udata *udata)
#endif
{
	struct vstellar_dev *dev = to_vdev(ibpd->device);
	struct vstellar_reg_mr_req req = {};
	struct vstellar_reg_mr_resp resp;
	struct ib_block_iter biter;
	struct vstellar_buf *list;
	struct vstellar_mr *mr;
	unsigned long pgsz;
	size_t npages, i = 0;
	__le64 *pages;
	u32 lkey;
	int ret;

#ifdef VSTELLAR_REG_MR_DMAH
	if (dmah)
		return ERR_PTR(-EOPNOTSUPP);
#endif
	/* Optional flags may be ignored; anything else must be honoured. */
	if (access & ~(VSTELLAR_MR_ACCESS | IB_ACCESS_OPTIONAL))
		return ERR_PTR(-EOPNOTSUPP);
	if (!length || length > dev->cfg.max_mr_size ||
	    virt_addr + length < virt_addr)
		return ERR_PTR(-EINVAL);
	if (udata->inlen && !ib_is_udata_cleared(udata, 0, udata->inlen))
		return ERR_PTR(-EINVAL);

	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	INIT_LIST_HEAD(&mr->grave);
	mr->umem = vstellar_umem_get(ibpd->device, start, length, access);
	if (IS_ERR(mr->umem)) {
		ret = PTR_ERR(mr->umem);
		goto err_free;
	}
	/* DMA addresses are guest physical: no translating IOMMU (validate). */
	pgsz = ib_umem_find_best_pgsz(mr->umem, dev->attr.page_size_cap,
				      virt_addr);
	if (!pgsz) {
		ret = -EINVAL;
		goto err_umem;
	}
	npages = ib_umem_num_dma_blocks(mr->umem, pgsz);
	if (!npages || npages > VSTELLAR_MAX_MR_PAGES) {
		ret = -EINVAL;
		goto err_umem;
	}
	list = vstellar_buf_alloc(npages * sizeof(*pages));
	if (IS_ERR(list)) {
		ret = PTR_ERR(list);
		goto err_umem;
	}
	pages = list->va;
	rdma_umem_for_each_dma_block(mr->umem, &biter, pgsz)
		pages[i++] = cpu_to_le64(rdma_block_iter_dma_address(&biter));

	req.pdn = cpu_to_le32(to_vpd(ibpd)->pdn);
	req.access = cpu_to_le32(vstellar_mr_access(access));
	req.iova = cpu_to_le64(virt_addr);
	req.length = cpu_to_le64(length);
	req.addr = cpu_to_le64(virt_to_phys(pages));
	req.page_shift = cpu_to_le32(__ffs(pgsz));
	req.npages = cpu_to_le32(npages);
	ret = vstellar_cmd(dev, VSTELLAR_OP_REG_MR, &req, sizeof(req), &resp,
			   sizeof(resp));
	if (ret == -ETIMEDOUT) {
		/* It may yet read the list and register the pages. */
		vstellar_bury(dev, list);
		vstellar_bury_mr(dev, mr);
		return ERR_PTR(ret);
	}
	vstellar_buf_put(list);
	if (ret)
		goto err_umem;

	lkey = le32_to_cpu(resp.lkey);
	if (!lkey || lkey != le32_to_cpu(resp.rkey)) {
		dev_err_ratelimited(&dev->vdev->dev,
				    "REG_MR: lkey %#x, rkey %#x\n", lkey,
				    le32_to_cpu(resp.rkey));
		ret = -EPROTO;
		if (lkey && vstellar_destroy_cmd(dev, VSTELLAR_OP_DEREG_MR,
						 lkey)) {
			vstellar_bury_mr(dev, mr);
			return ERR_PTR(ret);
		}
		goto err_umem;
	}
	mr->ibmr.lkey = lkey;
	mr->ibmr.rkey = lkey;
	return &mr->ibmr;

err_umem:
	ib_umem_release(mr->umem);
err_free:
	kfree(mr);
	return ERR_PTR(ret);
}

int vstellar_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata)
{
	struct vstellar_dev *dev = to_vdev(ibmr->device);
	struct vstellar_mr *mr = to_vmr(ibmr);
	int ret;

	ret = vstellar_destroy_cmd(dev, VSTELLAR_OP_DEREG_MR, ibmr->lkey);
	if (ret < 0)
		return ret;
	if (ret)
		vstellar_bury_mr(dev, mr);
	else
		vstellar_free_mr(mr);
	return 0;
}
