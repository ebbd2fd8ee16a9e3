/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * What the guest test programs share: the failure count and its CHECK,
 * and bringing an RC QP of the device to RTS towards a QP of the same
 * device (the device routes by GID, so with a GRH to GID index 0).
 */
#ifndef VSTELLAR_TOOL_H
#define VSTELLAR_TOOL_H

#include <stdio.h>
#include <string.h>

#include <infiniband/verbs.h>

static int failures;

#define CHECK(cond, ...)                                                     \
	do {                                                                 \
		if (!(cond)) {                                               \
			printf("FAIL %s:%d: %s: ", __func__, __LINE__, #cond); \
			printf(__VA_ARGS__);                                 \
			printf("\n");                                        \
			failures++;                                          \
		}                                                            \
	} while (0)

/* RESET -> INIT -> RTR -> RTS, connected to QP dest at gid. */
static inline int vstellar_to_rts(struct ibv_qp *qp, uint32_t dest,
				  const union ibv_gid *gid, int access)
{
	struct ibv_qp_attr at = {
		.qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = access,
	};

	if (ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
				   IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
		return -1;
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTR;
	at.path_mtu = IBV_MTU_4096;
	at.dest_qp_num = dest;
	at.rq_psn = 1;
	at.max_dest_rd_atomic = 1;
	at.min_rnr_timer = 12;
	at.ah_attr.is_global = 1;
	at.ah_attr.grh.dgid = *gid;
	at.ah_attr.grh.sgid_index = 0;
	at.ah_attr.grh.hop_limit = 1;
	at.ah_attr.port_num = 1;
	if (ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				   IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				   IBV_QP_MAX_DEST_RD_ATOMIC |
				   IBV_QP_MIN_RNR_TIMER))
		return -1;
	memset(&at, 0, sizeof(at));
	at.qp_state = IBV_QPS_RTS;
	at.timeout = 14;
	at.retry_cnt = 7;
	at.rnr_retry = 7;
	at.sq_psn = 1;
	at.max_rd_atomic = 1;
	return ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_TIMEOUT |
				      IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
				      IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

#endif /* VSTELLAR_TOOL_H */
