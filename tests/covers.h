/*
 * covers.h - the ops a test case is there for. A gradient-check case of tests/test_ops.c
 * and a CUDA-vs-CPU parity case of tests/test_cuda.c name them in an RG_COVERS(...) list
 * beside the case; the case checks, when it runs, that its tapes hold every op of its
 * list, and tests/test_optable.c reads the lists from the source text to find an op that
 * no case covers. So each file names ops (RG_OP_*) in RG_COVERS lists only.
 */
#ifndef RG_TESTS_COVERS_H
#define RG_TESTS_COVERS_H

#include "core/internal.h"

/* A list of ops, ended by RG_OP_COUNT. */
#define RG_COVERS(...) ((const rg_op[]){__VA_ARGS__, RG_OP_COUNT})

/* Marks seen[op] for the op of every node of ctx's tape from index first on. */
static inline void covers_note(const rg_ctx *ctx, size_t first, unsigned char *seen) {
  for (size_t k = first; k < ctx->n_nodes; k++) seen[ctx->nodes[k].op] = 1;
}

/* The first op of list (NULL: none) that seen does not mark, or RG_OP_COUNT. */
static inline rg_op covers_missing(const rg_op *list, const unsigned char *seen) {
  while (list && *list != RG_OP_COUNT && seen[*list]) list++;
  return list ? *list : RG_OP_COUNT;
}

#endif /* RG_TESTS_COVERS_H */
