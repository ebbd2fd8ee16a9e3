// SPDX-License-Identifier: GPL-2.0
/*
 * vstellar: the doorbell region (spec §6) and the wake-up register.
 *
 * The region is shared-memory region 0 of the device when the device says
 * so in config status; otherwise the driver gives it an area of guest RAM
 * (SET_DOORBELL_AREA). Either way user space maps it whole.
 *
 * The wake-up register is queue 2's notification address in the virtio PCI
 * notify capability. User space writes it to wake an idle engine without a
 * system call, so its physical address is worked out here from the PCI
 * capabilities (the virtio PCI transport does not export it).
 */

#include <linux/io.h>
#include <linux/pci.h>
#include <linux/virtio_config.h>
#include <linux/virtio_pci.h>

#include "vstellar.h"

struct vstellar_pci_cap {
	u8 cfg_type;
	u8 bar;
	u32 offset;
	u32 length;
};

/* The virtio_pci_cap at config space offset @pos. */
static void vstellar_pci_read_cap(struct pci_dev *pdev, int pos,
				  struct vstellar_pci_cap *cap)
{
	pci_read_config_byte(pdev, pos +
			     offsetof(struct virtio_pci_cap, cfg_type),
			     &cap->cfg_type);
	pci_read_config_byte(pdev, pos + offsetof(struct virtio_pci_cap, bar),
			     &cap->bar);
	pci_read_config_dword(pdev, pos +
			      offsetof(struct virtio_pci_cap, offset),
			      &cap->offset);
	pci_read_config_dword(pdev, pos +
			      offsetof(struct virtio_pci_cap, length),
			      &cap->length);
}

/* What the virtio PCI transport does: the first usable one of a type. */
static int vstellar_pci_find_cap(struct pci_dev *pdev, u8 type,
				 struct vstellar_pci_cap *cap)
{
	int pos;

	for (pos = pci_find_capability(pdev, PCI_CAP_ID_VNDR); pos > 0;
	     pos = pci_find_next_capability(pdev, pos, PCI_CAP_ID_VNDR)) {
		vstellar_pci_read_cap(pdev, pos, cap);
		if (cap->cfg_type != type || cap->bar >= PCI_STD_NUM_BARS)
			continue;
		if (!pci_resource_len(pdev, cap->bar) ||
		    !(pci_resource_flags(pdev, cap->bar) & IORESOURCE_MEM))
			continue;
		if ((u64)cap->offset + cap->length >
		    pci_resource_len(pdev, cap->bar))
			return -EINVAL;
		return pos;
	}
	return -ENOENT;
}

static bool vstellar_overlaps(u64 a, u64 alen, u64 b, u64 blen)
{
	return a < b + blen && b < a + alen;
}

/*
 * The page mapped into user space must hold notification registers only:
 * no other virtio structure and no MSI-X table or PBA. Other queues'
 * registers in it only allow spurious kicks, which the device ignores
 * (spec §4, §6.6).
 */
static bool vstellar_notify_page_safe(struct pci_dev *pdev, u8 bar,
				      u64 page_off)
{
	struct vstellar_pci_cap cap;
	u32 tbl;
	int pos;

	for (pos = pci_find_capability(pdev, PCI_CAP_ID_VNDR); pos > 0;
	     pos = pci_find_next_capability(pdev, pos, PCI_CAP_ID_VNDR)) {
		vstellar_pci_read_cap(pdev, pos, &cap);
		/* PCI_CFG is a window in config space, not in a BAR. */
		if (cap.cfg_type == VIRTIO_PCI_CAP_NOTIFY_CFG ||
		    cap.cfg_type == VIRTIO_PCI_CAP_PCI_CFG || cap.bar != bar)
			continue;
		if (vstellar_overlaps(cap.offset, cap.length, page_off,
				      PAGE_SIZE))
			return false;
	}
	if (pdev->msix_cap) {
		u16 ctrl;
		u64 n;

		pci_read_config_word(pdev, pdev->msix_cap + PCI_MSIX_FLAGS,
				     &ctrl);
		n = (ctrl & PCI_MSIX_FLAGS_QSIZE) + 1;
		pci_read_config_dword(pdev, pdev->msix_cap + PCI_MSIX_TABLE,
				      &tbl);
		if ((tbl & PCI_MSIX_TABLE_BIR) == bar &&
		    vstellar_overlaps(tbl & PCI_MSIX_TABLE_OFFSET,
				      n * PCI_MSIX_ENTRY_SIZE, page_off,
				      PAGE_SIZE))
			return false;
		pci_read_config_dword(pdev, pdev->msix_cap + PCI_MSIX_PBA,
				      &tbl);
		if ((tbl & PCI_MSIX_PBA_BIR) == bar &&
		    vstellar_overlaps(tbl & PCI_MSIX_PBA_OFFSET,
				      DIV_ROUND_UP(n, 64) * 8, page_off,
				      PAGE_SIZE))
			return false;
	}
	return true;
}

/**
 * vstellar_find_notify - find the wake-up queue's notification register
 * @vdev: the virtio device
 * @out: its page and offset, when @probing
 * @probing: read queue 2's queue_notify_off from the common configuration
 *
 * Without @probing (from .validate, before the features are settled) this
 * only checks that the capabilities are there. With it (from probe, after
 * the queues are set up and before the device is in use) it selects queue 2
 * in the common configuration and reads its notification offset. The
 * transport writes queue_select itself only while setting queues up.
 *
 * Return: 0 or a negative errno when there is no usable register.
 */
int vstellar_find_notify(struct virtio_device *vdev,
			 struct vstellar_notify *out, bool probing)
{
	struct vstellar_pci_cap common, notify;
	struct pci_dev *pdev;
	void __iomem *cfg;
	u64 reg, page_off;
	u32 mult;
	u16 off;
	int pos;

	if (!vdev->dev.parent || !dev_is_pci(vdev->dev.parent))
		return -ENODEV;
	pdev = to_pci_dev(vdev->dev.parent);

	if (vstellar_pci_find_cap(pdev, VIRTIO_PCI_CAP_COMMON_CFG,
				  &common) < 0 ||
	    common.length < sizeof(struct virtio_pci_common_cfg))
		return -ENODEV;
	pos = vstellar_pci_find_cap(pdev, VIRTIO_PCI_CAP_NOTIFY_CFG, &notify);
	if (pos < 0)
		return -ENODEV;
	pci_read_config_dword(pdev, pos +
			      offsetof(struct virtio_pci_notify_cap,
				       notify_off_multiplier), &mult);
	if (!probing)
		return 0;

	cfg = pci_iomap_range(pdev, common.bar, common.offset,
			      sizeof(struct virtio_pci_common_cfg));
	if (!cfg)
		return -ENOMEM;
	iowrite16(VSTELLAR_QUEUE_WAKEUP,
		  cfg + offsetof(struct virtio_pci_common_cfg, queue_select));
	off = ioread16(cfg + offsetof(struct virtio_pci_common_cfg,
				      queue_notify_off));
	pci_iounmap(pdev, cfg);

	reg = (u64)off * mult;
	if (reg + sizeof(__le16) > notify.length) {
		dev_warn(&vdev->dev,
			 "wake-up register at %llu outside the %u-byte notify area\n",
			 reg, notify.length);
		return -EINVAL;
	}
	reg += notify.offset;
	page_off = round_down(reg, PAGE_SIZE);
	if (page_off + PAGE_SIZE > pci_resource_len(pdev, notify.bar) ||
	    !vstellar_notify_page_safe(pdev, notify.bar, page_off)) {
		dev_warn(&vdev->dev,
			 "wake-up register's page holds more than notifications\n");
		return -EINVAL;
	}
	out->page = pci_resource_start(pdev, notify.bar) + page_off;
	out->offset = reg - page_off;
	return 0;
}

/*
 * Decide where the doorbells are, after RESET_STATE (config status says it
 * once the device is live, spec §5).
 */
int vstellar_doorbell_init(struct vstellar_dev *dev)
{
	struct vstellar_cfg *cfg = &dev->cfg;
	struct vstellar_set_doorbell_area_req req = {};
	struct virtio_shm_region r;
	size_t size;
	int ret;

	size = (size_t)cfg->doorbell_pages * cfg->doorbell_page_size;
	dev->db_size = size;

	if (cfg->status & VSTELLAR_CONFIG_STATUS_DOORBELL_SHMEM) {
		if (!virtio_get_shm_region(dev->vdev, &r,
					   cfg->doorbell_shmid) ||
		    r.len < size || !PAGE_ALIGNED(r.addr)) {
			dev_err(&dev->vdev->dev,
				"doorbells in shared memory, but no region %u of %zu bytes\n",
				cfg->doorbell_shmid, size);
			return -ENODEV;
		}
		dev->db_shmem = true;
		dev->db_phys = r.addr;
		return 0;
	}
	if (!(cfg->status & VSTELLAR_CONFIG_STATUS_DOORBELL_GUEST_RAM)) {
		dev_err(&dev->vdev->dev, "device not live (status %#x)\n",
			cfg->status);
		return -ENODEV;
	}

	/*
	 * A power of two of at least doorbell_page_size bytes: the allocation
	 * is naturally aligned to its size, so to the page size too.
	 */
	if (!is_power_of_2(size) || get_order(size) > MAX_PAGE_ORDER) {
		dev_err(&dev->vdev->dev,
			"doorbell area of %zu bytes cannot be allocated\n",
			size);
		return -ENOMEM;
	}
	dev->db_area = alloc_pages_exact(size, GFP_KERNEL | __GFP_ZERO);
	if (!dev->db_area)
		return -ENOMEM;
	dev->db_phys = virt_to_phys(dev->db_area);

	req.addr = cpu_to_le64(dev->db_phys);
	req.length = cpu_to_le64(size);
	ret = vstellar_cmd(dev, VSTELLAR_OP_SET_DOORBELL_AREA, &req,
			   sizeof(req), NULL, 0);
	if (ret) {
		dev_err(&dev->vdev->dev, "SET_DOORBELL_AREA: %d\n", ret);
		/* Freed in remove, after the reset, if the device may hold it. */
		if (!dev->dead)
			vstellar_doorbell_free(dev);
		return ret;
	}
	return 0;
}

/* Only once the device can no longer use the area. */
void vstellar_doorbell_free(struct vstellar_dev *dev)
{
	if (dev->db_area)
		free_pages_exact(dev->db_area, dev->db_size);
	dev->db_area = NULL;
}
