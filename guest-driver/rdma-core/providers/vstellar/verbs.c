// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * libvstellar: the verbs that are plain commands to the kernel driver
 * (device and port queries, PDs, MRs, AHs).
 */
#include <config.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "vstellar.h"

int vstellar_query_device(struct ibv_context *context,
			  const struct ibv_query_device_ex_input *input,
			  struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ib_uverbs_ex_query_device_resp resp;
	size_t resp_size = sizeof(resp);
	uint64_t fw;
	int err;

	err = ibv_cmd_query_device_any(context, input, attr, attr_size, &resp,
				       &resp_size);
	if (err)
		return err;

	/* The device's fw_version is major << 32 | minor << 16 | patch. */
	fw = resp.base.fw_ver;
	snprintf(attr->orig_attr.fw_ver, sizeof(attr->orig_attr.fw_ver),
		 "%u.%u.%u", (unsigned int)(fw >> 32) & 0xffff,
		 (unsigned int)(fw >> 16) & 0xffff, (unsigned int)fw & 0xffff);
	return 0;
}

int vstellar_query_port(struct ibv_context *context, uint8_t port,
			struct ibv_port_attr *attr)
{
	struct ibv_query_port cmd;

	return ibv_cmd_query_port(context, port, attr, &cmd, sizeof(cmd));
}

struct ibv_pd *vstellar_alloc_pd(struct ibv_context *context)
{
	struct ib_uverbs_alloc_pd_resp resp;
	struct ibv_alloc_pd cmd;
	struct ibv_pd *pd;
	int err;

	pd = calloc(1, sizeof(*pd));
	if (!pd)
		return NULL;
	err = ibv_cmd_alloc_pd(context, pd, &cmd, sizeof(cmd), &resp,
			       sizeof(resp));
	if (err) {
		free(pd);
		errno = err;
		return NULL;
	}
	return pd;
}

int vstellar_dealloc_pd(struct ibv_pd *pd)
{
	int err;

	err = ibv_cmd_dealloc_pd(pd);
	if (err)
		return err;
	free(pd);
	return 0;
}

struct ibv_mr *vstellar_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
			       uint64_t hca_va, int access)
{
	struct ib_uverbs_reg_mr_resp resp;
	struct ibv_reg_mr cmd;
	struct verbs_mr *vmr;
	int err;

	vmr = calloc(1, sizeof(*vmr));
	if (!vmr)
		return NULL;
	err = ibv_cmd_reg_mr(pd, addr, length, hca_va, access, vmr, &cmd,
			     sizeof(cmd), &resp, sizeof(resp));
	if (err) {
		free(vmr);
		errno = err;
		return NULL;
	}
	return &vmr->ibv_mr;
}

int vstellar_dereg_mr(struct verbs_mr *vmr)
{
	int err;

	err = ibv_cmd_dereg_mr(vmr);
	if (err)
		return err;
	free(vmr);
	return 0;
}

struct ibv_ah *vstellar_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct ib_uverbs_create_ah_resp resp;
	struct ibv_ah *ah;
	int err;

	ah = calloc(1, sizeof(*ah));
	if (!ah)
		return NULL;
	err = ibv_cmd_create_ah(pd, ah, attr, &resp, sizeof(resp));
	if (err) {
		free(ah);
		errno = err;
		return NULL;
	}
	return ah;
}

int vstellar_destroy_ah(struct ibv_ah *ah)
{
	int err;

	err = ibv_cmd_destroy_ah(ah);
	if (err)
		return err;
	free(ah);
	return 0;
}
