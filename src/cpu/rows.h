/*
 * rows.h - what the CPU's row kernels share (softmax.c, norms.c, embedding.c,
 * attention.c, losses.c).
 *
 * Invariants of every row kernel:
 *  - A tensor [..., C] is R = n / C contiguous rows of C; each row is handled by one
 *    thread, and every reduction across rows runs in an order fixed by the shapes, so
 *    results are identical for any thread count.
 *  - Softmax-like rows subtract the row maximum before exp. Row sums accumulate in double
 *    (a norm's in blocks of 4 vectors summed in float first, vec.h);
 *    normalisation takes the mean first and the variance of the centred values, so rows
 *    offset by 1e4 keep their precision. A norm's backward sums dgamma and dbeta per
 *    chunk of rows (chunks fixed by R), then the chunks in order.
 *  - Index and target checks finish before any output is written: a bad id fails the
 *    kernel with nothing written.
 *  - Zero-size tensors are legal: an empty last axis (C == 0) means there is nothing to
 *    compute, and a cross-entropy over no counted rows is 0.
 */
#ifndef RG_CPU_ROWS_H
#define RG_CPU_ROWS_H

#include "cpu.h"

/* Below this many input elements a kernel runs on one thread. */
#define PAR_MIN 32768
/* Column block for reductions across rows (dgamma, dtable): one double per column. */
#define CB 256
/* Cross-row sums split into at most this many fixed chunks (partials on the stack). */
#define MAX_CHUNKS 64

static inline int64_t last_dim(const rg_tv *x) { return x->ndim ? x->dims[x->ndim - 1] : 1; }

#endif
