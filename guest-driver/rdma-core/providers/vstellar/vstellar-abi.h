/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/* The uverbs commands with the vstellar driver data (rdma/vstellar-abi.h). */
#ifndef __VSTELLAR_PROVIDER_ABI_H__
#define __VSTELLAR_PROVIDER_ABI_H__

#include <infiniband/kern-abi.h>
#include <rdma/vstellar-abi.h>
#include <kernel-abi/vstellar-abi.h>

DECLARE_DRV_CMD(uvstellar_alloc_ucontext, IB_USER_VERBS_CMD_GET_CONTEXT,
		empty, vstellar_alloc_ucontext_resp);
DECLARE_DRV_CMD(uvstellar_create_cq, IB_USER_VERBS_CMD_CREATE_CQ,
		empty, vstellar_create_cq_uresp);
DECLARE_DRV_CMD(uvstellar_create_qp, IB_USER_VERBS_CMD_CREATE_QP,
		empty, vstellar_create_qp_uresp);
DECLARE_DRV_CMD(uvstellar_create_srq, IB_USER_VERBS_CMD_CREATE_SRQ,
		empty, vstellar_create_srq_uresp);

#endif /* __VSTELLAR_PROVIDER_ABI_H__ */
