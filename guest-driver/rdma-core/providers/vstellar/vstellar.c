// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * libvstellar: driver registration, device matching and the user context
 * (the doorbell region and the wake-up register).
 */
#include <config.h>

#include <endian.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vstellar.h"

/* The kernel driver's name, as the parent device's driver link shows it. */
#define VSTELLAR_KERNEL_DRIVER "vstellar"

static void vstellar_free_context(struct ibv_context *ibctx);

static const struct verbs_context_ops vstellar_ctx_ops = {
	.alloc_pd = vstellar_alloc_pd,
	.create_ah = vstellar_create_ah,
	.create_cq = vstellar_create_cq,
	.create_qp = vstellar_create_qp,
	.create_qp_ex = vstellar_create_qp_ex,
	.create_srq = vstellar_create_srq,
	.dealloc_pd = vstellar_dealloc_pd,
	.dereg_mr = vstellar_dereg_mr,
	.destroy_ah = vstellar_destroy_ah,
	.destroy_cq = vstellar_destroy_cq,
	.destroy_qp = vstellar_destroy_qp,
	.destroy_srq = vstellar_destroy_srq,
	.free_context = vstellar_free_context,
	.modify_qp = vstellar_modify_qp,
	.modify_srq = vstellar_modify_srq,
	.poll_cq = vstellar_poll_cq,
	.post_recv = vstellar_post_recv,
	.post_send = vstellar_post_send,
	.post_srq_recv = vstellar_post_srq_recv,
	.query_device_ex = vstellar_query_device,
	.query_port = vstellar_query_port,
	.query_qp = vstellar_query_qp,
	.query_srq = vstellar_query_srq,
	.reg_mr = vstellar_reg_mr,
	.req_notify_cq = vstellar_req_notify_cq,
};

void *vstellar_db_record(struct vstellar_context *ctx, uint32_t index)
{
	if (index >= ctx->db_records)
		return NULL;
	return ctx->db + ctx->db_records_offset +
	       (size_t)index * ctx->db_record_size;
}

static bool is_pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

/* Checks the doorbell geometry the kernel passed on from config space. */
static int vstellar_check_ucontext(struct vstellar_context *ctx,
				   const struct vstellar_alloc_ucontext_resp *r)
{
	uint64_t records_end;
	long page = sysconf(_SC_PAGESIZE);

	if (r->abi_version != VSTELLAR_UVERBS_ABI_VERSION) {
		verbs_err(&ctx->ibv_ctx,
			  "vstellar: kernel driver data ABI %u, library speaks %u\n",
			  r->abi_version, VSTELLAR_UVERBS_ABI_VERSION);
		return EPROTO;
	}
	if (r->device_abi >> 16 != VSTELLAR_ABI_MAJOR) {
		verbs_err(&ctx->ibv_ctx,
			  "vstellar: device ABI %u.%u, library speaks %u.x\n",
			  r->device_abi >> 16, r->device_abi & 0xffff,
			  VSTELLAR_ABI_MAJOR);
		return EPROTO;
	}

	records_end = (uint64_t)r->doorbell_records_offset +
		      (uint64_t)r->doorbell_records * r->doorbell_record_size;
	if (!is_pow2(r->doorbell_page_size) ||
	    r->doorbell_page_size < VSTELLAR_DOORBELL_MIN_PAGE_SIZE ||
	    !is_pow2(r->doorbell_record_size) ||
	    r->doorbell_record_size < sizeof(struct vstellar_qp_doorbell) ||
	    r->doorbell_record_size < sizeof(struct vstellar_cq_doorbell) ||
	    r->doorbell_records_offset < r->doorbell_page_size ||
	    r->doorbell_records_offset % r->doorbell_record_size ||
	    r->doorbell_records < r->max_qp ||
	    !r->doorbell_mmap_len || r->doorbell_mmap_len > SIZE_MAX ||
	    r->doorbell_mmap_len % page || records_end > r->doorbell_mmap_len ||
	    r->doorbell_mmap_key > INT64_MAX) {
		verbs_err(&ctx->ibv_ctx,
			  "vstellar: bad doorbell geometry: page %u, records %u x %u at %u, mapping of %llu bytes\n",
			  r->doorbell_page_size, r->doorbell_records,
			  r->doorbell_record_size, r->doorbell_records_offset,
			  (unsigned long long)r->doorbell_mmap_len);
		return EPROTO;
	}
	if ((r->flags & VSTELLAR_UCTX_IDLE_WAKEUP) &&
	    ((uint64_t)r->notify_offset + sizeof(__le16) > (uint64_t)page ||
	     r->notify_offset % sizeof(__le16) ||
	     r->notify_mmap_key > INT64_MAX)) {
		verbs_err(&ctx->ibv_ctx,
			  "vstellar: wake-up register at offset %u of a %ld-byte page\n",
			  r->notify_offset, page);
		return EPROTO;
	}
	return 0;
}

static int vstellar_map_context(struct vstellar_context *ctx, int cmd_fd,
				const struct vstellar_alloc_ucontext_resp *r)
{
	void *p;

	ctx->flags = r->flags;
	ctx->max_inline_data = r->max_inline_data;
	ctx->db_records_offset = r->doorbell_records_offset;
	ctx->db_record_size = r->doorbell_record_size;
	ctx->db_records = r->doorbell_records;
	ctx->db_len = r->doorbell_mmap_len;

	p = mmap(NULL, ctx->db_len, PROT_READ | PROT_WRITE, MAP_SHARED, cmd_fd,
		 r->doorbell_mmap_key);
	if (p == MAP_FAILED) {
		verbs_err(&ctx->ibv_ctx,
			  "vstellar: mapping the doorbell region: %s\n",
			  strerror(errno));
		return errno;
	}
	ctx->db = p;
	ctx->engine_flags =
		(const __le32 *)(ctx->db +
				 offsetof(struct vstellar_device_page,
					  engine_flags));

	if (!(r->flags & VSTELLAR_UCTX_IDLE_WAKEUP))
		return 0;
	ctx->notify_len = sysconf(_SC_PAGESIZE);
	p = mmap(NULL, ctx->notify_len, PROT_WRITE, MAP_SHARED, cmd_fd,
		 r->notify_mmap_key);
	if (p == MAP_FAILED) {
		/*
		 * The kernel acked IDLE_WAKEUP for us: without the register a
		 * doorbell rung while the engine sleeps would never be seen.
		 */
		verbs_err(&ctx->ibv_ctx,
			  "vstellar: mapping the wake-up register: %s\n",
			  strerror(errno));
		munmap(ctx->db, ctx->db_len);
		ctx->db = NULL;
		return errno;
	}
	ctx->notify_page = p;
	ctx->notify_reg = (uint8_t *)p + r->notify_offset;
	ctx->notify_value = r->notify_value;
	return 0;
}

static struct verbs_context *vstellar_alloc_context(struct ibv_device *ibdev,
						    int cmd_fd,
						    void *private_data)
{
	struct uvstellar_alloc_ucontext_resp resp = {};
	struct vstellar_context *ctx;
	struct ibv_get_context cmd;
	int err;

	ctx = verbs_init_and_alloc_context(ibdev, cmd_fd, ctx, ibv_ctx,
					   RDMA_DRIVER_UNKNOWN);
	if (!ctx)
		return NULL;

	err = ibv_cmd_get_context(&ctx->ibv_ctx, &cmd, sizeof(cmd), NULL,
				  &resp.ibv_resp, sizeof(resp));
	if (err)
		goto err_free;

	err = vstellar_check_ucontext(ctx, &resp.drv_payload);
	if (err)
		goto err_free;
	err = vstellar_map_context(ctx, cmd_fd, &resp.drv_payload);
	if (err)
		goto err_free;

	verbs_set_ops(&ctx->ibv_ctx, &vstellar_ctx_ops);
	return &ctx->ibv_ctx;

err_free:
	verbs_uninit_context(&ctx->ibv_ctx);
	free(ctx);
	errno = err;
	return NULL;
}

static void vstellar_free_context(struct ibv_context *ibctx)
{
	struct vstellar_context *ctx = to_vctx(ibctx);

	if (ctx->notify_page)
		munmap(ctx->notify_page, ctx->notify_len);
	munmap(ctx->db, ctx->db_len);
	verbs_uninit_context(&ctx->ibv_ctx);
	free(ctx);
}

static struct verbs_device *
vstellar_device_alloc(struct verbs_sysfs_dev *sysfs_dev)
{
	struct vstellar_device *dev;

	dev = calloc(1, sizeof(*dev));
	if (!dev)
		return NULL;
	return &dev->ibv_dev;
}

static void vstellar_uninit_device(struct verbs_device *verbs_device)
{
	free(container_of(verbs_device, struct vstellar_device, ibv_dev));
}

/*
 * The kernel module is out of tree, so it has no RDMA_DRIVER_* id: match the
 * kernel's device name (vstellar%d), or, for a device udev has renamed, the
 * name of the kernel driver bound to its parent device.
 */
static bool vstellar_match_device(struct verbs_sysfs_dev *sysfs_dev)
{
	char path[IBV_SYSFS_PATH_MAX + sizeof("/device/driver")];
	char link[PATH_MAX];
	const char *name;
	ssize_t n;

	if (sysfs_dev->match)
		return true;
	if (!check_snprintf(path, sizeof(path), "%s/device/driver",
			    sysfs_dev->ibdev_path))
		return false;
	n = readlink(path, link, sizeof(link) - 1);
	if (n <= 0)
		return false;
	link[n] = '\0';
	name = strrchr(link, '/');
	name = name ? name + 1 : link;
	return strcmp(name, VSTELLAR_KERNEL_DRIVER) == 0;
}

static const struct verbs_match_ent vstellar_match_table[] = {
	VERBS_NAME_MATCH("vstellar", NULL),
	{},
};

static const struct verbs_device_ops vstellar_dev_ops = {
	.name = "vstellar",
	.match_min_abi_version = VSTELLAR_UVERBS_ABI_VERSION,
	.match_max_abi_version = VSTELLAR_UVERBS_ABI_VERSION,
	.match_table = vstellar_match_table,
	.match_device = vstellar_match_device,
	.alloc_device = vstellar_device_alloc,
	.uninit_device = vstellar_uninit_device,
	.alloc_context = vstellar_alloc_context,
};
PROVIDER_DRIVER(vstellar, vstellar_dev_ops);
