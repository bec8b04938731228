/*
 * ops.h - the op table's spine: one row per op, in one list.
 *
 * X(ENUM, name, "public name", nin, nout, flags): the enum RG_OP_<ENUM>; the op's own
 * name, which names its kernels rg_cpu_<name> and rg_cuda_<name>; the call that records
 * it, for messages (several ops may share one; a backward op's is its forward's, primed);
 * the number of input and output refs of its node; and the facts below, which the core,
 * the backends and the tests read from the table (rg_optab, internal.h) rather than from
 * lists of ops of their own. The kernel tables are built from this list, so a row
 * without an rg_cpu_<name> fails the link; tests/test_optable.c fails for a row whose
 * backward rule, gradient check or CUDA parity case is missing.
 *
 * Flags:
 *  RG_F_DIFF    rg_backward passes gradients through it: autograd.c has its rule. An op
 *               without one, reached by rg_backward on a path to the loss, fails it, naming
 *               the op.
 *  RG_F_BWD     recorded only by rg_backward, which differentiates none of its own nodes:
 *               it is checked by the gradient checks of the ops whose rules record it.
 *  RG_F_BF16    its kernels take BF16 tensors as stored (element moves, casts, optimizer
 *               steps); a backend whose kernels compute in F32 runs every other op that has
 *               a BF16 tensor on widened copies (the CPU's, backend.c).
 *  RG_F_PRODUCT a matrix product whose rule hands its factors the result's gradient in
 *               their dtype (BF16 factors: rounded), so rg_backward has that gradient made
 *               BF16 in the first place (autograd.c's bf16_grad).
 *  RG_F_ACC     adds its result into in[0], a gradient, with ACCUM's float add.
 *  RG_F_FOLDS   a norm's backward, laid out as LAYERNORM_BWD (below): it adds out[1] and
 *               out[2] into in[3] and in[4] and in[5] into out[0] where those are given,
 *               so rg_backward folds gradient adds into it (autograd.c).
 *  RG_F_LIST    aux is an rg_list of the tensors it reads and writes in place.
 *  RG_F_OPTIM   aux is an rg_optim: the parameters, gradients and moments it updates.
 *  RG_F_COMM    exchanges the tensors of its aux with the other ranks (ctx->dist); a backend
 *               may run it beside the rest of the drain, and then a node that touches
 *               tensors through its aux (RG_F_LIST, RG_F_OPTIM) waits for it first.
 * An op with nout = 0 changes tensors in place and makes none.
 *
 * Node fields per op (n->i[], n->f[] are the baked scalars; inputs in order; "opt" means
 * the input ref may be 0 = absent). Shapes are validated at record time; kernels trust
 * them. All float tensors are F32 unless the row says otherwise; the core records BF16
 * only where a row allows it (the CPU's kernels compute in F32: its backend runs a node
 * with BF16 tensors on widened copies unless the op is RG_F_BF16, backend.c).
 *
 *  UPLOAD    0 in, out: copy i[1] bytes from aux (host staging) into out at byte i[0].
 *  FILL      0 in, out: every element = f[0].
 *  ADD..DIV  a, b broadcast (numpy, right-aligned) to out's shape; a and b each F32 or
 *            BF16 (read widened), out F32.
 *  SCALE     out = x*f[0].     POW: x^f[0].    CLAMP: min(max(x,f[0]),f[1]).
 *  unary     NEG EXP LOG SQRT RELU GELU(tanh approx) SILU SIGMOID TANH.
 *  SUM MEAN MAX ARGMAX   x; i[0] = axis in [0,ndim) or -1 for all axes; i[1] = keepdim.
 *            ARGMAX out is I32; first maximum wins (also for MAX's backward).
 *  SUM_TO    x reduced by summation to out's shape (out broadcasts to x's shape;
 *            out may have fewer axes): the gradient of a broadcast operand. x F32 or
 *            BF16 (a bias's gradient), out F32.
 *  EXPAND    x broadcast to out's shape (numpy rules).
 *  SOFTMAX LOG_SOFTMAX  over the last axis, max subtracted.
 *  MATMUL    a [..,M,K] (or [..,K,M] if i[0]), b [..,K,N] (or [..,N,K] if i[1]);
 *            batch axes broadcast to out [..,M,N]. a and b both F32 or both BF16 (exact
 *            products, F32 sums); out F32, or BF16 (rounded once: bf16 activations).
 *  LINEAR    x [..,in], w [out,in], b [out] (opt) -> [..,out]. x and w as MATMUL's a
 *            and b; b F32, or BF16 with BF16 factors (autocast rounds it, as PyTorch's);
 *            out as MATMUL's (bias added in F32, then rounded).
 *  LINEAR_ACT as LINEAR, then an activation: i[0] = RG_ACT_RELU or RG_ACT_GELU; out[0] =
 *            act(x w^T + b); out[1] = x w^T + b, made only for GELU (its backward needs
 *            the input; ReLU's reads out[0], positive exactly where its input is); out[1]
 *            has out[0]'s dtype, the activation is applied in F32 before rounding.
 *  LAYERNORM x [..,C], gamma [C] (opt), beta [C] (opt); f[0] = eps; biased variance;
 *            out F32 or BF16 (F32 statistics, rounded once).
 *  RMSNORM   x [..,C], gamma [C] (opt); f[0] = eps; out as LAYERNORM's.
 *  ADD_LAYERNORM a, b (same shape, each F32 or BF16), gamma, beta (opt) -> s = a + b
 *            (F32), y = LAYERNORM(s): an ADD whose sum feeds a layernorm right after
 *            (a residual stream), one node, the sum read once (rg_layernorm turns the
 *            queued ADD node into it, ops.c); f[0] = eps.
 *  EMBEDDING table [V,C], idx I32 [...] -> [...,C]. Index outside [0,V): fail, naming it.
 *  ATTENTION q [B,H,T,D], k [B,H,S,D], v [B,H,S,D], key padding (opt), bias (opt) ->
 *            o [B,H,T,D], lse [B,H,T]; i[0] causal (key s masked when s > t); score =
 *            scale q.k + bias, scale 1/sqrt(D); lse = log sum_s exp(score) over the keys
 *            a row sees (0 when it sees none: then o = 0 and no gradient), kept for the
 *            backward. Key padding I32 [B,S]: nonzero masks key s of batch b from every
 *            query. Bias F32, 1 to 4 axes broadcast (numpy, right-aligned) to [B,H,T,S];
 *            -inf masks (rg__attn_bias_strides, internal.h, addresses it). q, k, v all F32
 *            or all BF16; o their dtype (BF16: bf16 products on CUDA, f32 on the CPU),
 *            lse F32.
 *  ATTENTION_QKV qkv [B,T,3C] -> o [B,T,C], lse [B,H,T]: ATTENTION on heads read in place,
 *            i[0] causal, i[1] = H heads of D = C/H. Head h's q, k, v
 *            are columns h D + [0,D) of the thirds [0,C), [C,2C), [2C,3C) of each row; its
 *            output is columns h D + [0,D). Dtypes as ATTENTION's.
 *  CROSS_ENTROPY logits [N..,C], targets I32 [N..] -> scalar mean, stats F32 [N+1, 2]
 *            (N = the targets' count); logits F32 or BF16; i[0] = has ignore, i[1] =
 *            ignore_index. Target outside [0,C) (and not ignored): fail, naming it.
 *            stats row r < N: the row's max logit and log sum exp(x - max) ((0, 0)
 *            for a row that takes no part); row N: (count of rows taking part, 0). The
 *            backward reads them, so it reads the logits once. Optional in[2] g (scalar)
 *            and out[2] dlogits: the node also computes CROSS_ENTROPY_BWD's dlogits
 *            (rg_backward fuses the two: autograd.c).
 *  MSE       pred, target same shape -> scalar mean((p-t)^2).
 *  COPY      out = x (same element count; used by reshape and detach).
 *  PERMUTE   out axis j = x axis i[j] (i[0..ndim-1]).
 *  SLICE     x; i[0] axis, i[1] start, i[2] len.
 *  CONCAT    a, b; i[0] axis.
 *  DROPOUT   x, step (I32[2] holding the 64-bit step, written by an UPLOAD each step so a
 *            replayed graph reads the new one; if absent, i[1]); f[0] = p; i[0] = seed,
 *            i[2] = counter base. Element e is kept iff rg_philox_uniform(seed, step,
 *            base + e) >= p; kept values scaled 1/(1-p).
 *  CAST      x -> out's dtype (F32<->BF16 round-nearest-even, F32<->I32 truncation).
 *            out may be a parameter's persistent BF16 shadow, written in place (the cast
 *            autocast records when the shadow is stale, shadow.c).
 * Backward ops (recorded only by rg_backward):
 * Gradients are F32 (the forward tensors a backward op reads keep their dtype), but for
 * the outputs marked "or BF16" below: the gradient of a BF16 product's result, which
 * rg_backward has written BF16 since the product rounds it anyway (autograd.c).
 *  RELU_BWD GELU_BWD SILU_BWD (x, g)       SIGMOID_BWD TANH_BWD (y, g)   y = forward out;
 *            x of RELU_BWD and GELU_BWD F32 or BF16 (LINEAR_ACT's outputs), their out F32
 *            or BF16
 *  MATMUL_DGELU (a, b, u; i[0], i[1] as MATMUL) -> GELU_BWD(u, op(a) op(b)), 2-D factors
 *            and out, u of out's element count: a GELU's input gradient made by the GEMM
 *            of the dx of the linear layer that is its output's one reader (rg_backward
 *            fuses the two, autograd.c). F32, or BF16 with BF16 factors and u (the
 *            product is multiplied in F32, then rounded once).
 *  CLAMP_BWD (x, g; f[0], f[1])            MAX_BWD (x, g; i[0], i[1] as MAX) -> dx
 *  SOFTMAX_BWD LOG_SOFTMAX_BWD (y, g)      -> dx
 *  LAYERNORM_BWD (x, gamma opt, g, acc_gamma opt, acc_beta opt, dx_in opt; f[0]) -> dx,
 *            dgamma [C], dbeta [C]. With acc_gamma (F32 [C]) the node adds dgamma into it
 *            (the float add ACCUM does) instead of writing out[1], then absent; acc_beta
 *            and out[2] likewise: rg_backward folds a parameter's ACCUM into the node this
 *            way. With dx_in (F32, x's shape) dx is the computed one + dx_in, rounded as
 *            an ADD of the two: rg_backward folds the sum of x's gradients (a residual
 *            stream's) into the node so. out[3] (opt, BF16) is dx rounded as well: the
 *            gradient of a bf16 product's result that the residual add hands dx on to
 *            (rg_backward asks for it in place of a CAST of dx).
 *  RMSNORM_BWD   (x, gamma opt, g, acc_gamma opt, unused, dx_in opt; f[0]) -> dx, dgamma
 *            [C], as above.
 *  EMBEDDING_BWD (idx, g) -> dtable [V,C] (zeroed, then scatter-added)
 *  ATTENTION_BWD (q, k, v, o, g, lse, key padding opt, bias opt; i[] as ATTENTION) ->
 *            dq, dk, dv (q, k, v, o F32 or BF16 as the forward's; each of dq, dk, dv F32
 *            or BF16; the masks as the forward's, which give the bias no gradient)
 *  ATTENTION_QKV_BWD (qkv, o, g, lse; i[] as ATTENTION_QKV) -> dqkv [B,T,3C] (F32 or
 *            BF16)
 *  CROSS_ENTROPY_BWD (logits, targets, g scalar, stats; i[0], i[1]) -> dlogits =
 *            (exp(x - max - lse) - onehot) g / count; zero rows where ignored; logits
 *            and dlogits each F32 or BF16
 *  SLICE_BWD (g; i[0..2] as SLICE) -> out of the full shape, zero outside the slice
 * In-place ops (no out; in[0] is modified; they run in program order like any node):
 *  ACCUM     in[0] += in[1] (same shape).
 *  MATMUL_ACC in[0] += op(in[1]) op(in[2]), 2-D, i[0] i[1] as MATMUL (in[0] F32, the
 *            factors F32 or BF16): rg_backward turns a weight gradient's MATMUL and
 *            the ACCUM after it into this one node. Optional in[3] (i[0] = 1): a linear
 *            layer's bias gradient, += in[1] summed over its rows as SUM_TO_ACC sums
 *            (the bias's SUM_TO_ACC, after the product, in this node).
 *  SUM_TO_ACC in[0] += in[1] summed to in[0]'s shape as SUM_TO sums (in[0] F32, in[1]
 *            F32 or BF16):
 *            rg_backward turns a bias gradient's SUM_TO and its ACCUM into this node.
 *  ZERO_LIST aux = rg_list of tensors to zero.
 *  CLIP      aux = rg_list of gradients, in[0] = state F32[2]; f[0] = max_norm.
 *            state[0] = norm; state[1] = 1 if non-finite (then gradients untouched) else
 *            0 and gradients scaled by min(1, max_norm/(norm+1e-6)).
 *  ADAMW     aux = rg_optim (its params, grads, moments and BF16 shadows: the step rounds
 *            each updated parameter into its shadow); in[0] = clip state or 0; i[0] = 1:
 *            then zero the gradients (rg_zero_grad right after the step folds its
 *            ZERO_LIST in), also when the update is skipped for a non-finite norm, not
 *            after a failure. SGD likewise.
 *  LR_SCHEDULE in[0] = an optimizer's hyper (F32[8]), in[1] its step count (I32[1]),
 *            in[2] = clip state or 0; i[] = kind, warmup, total, step_size; f[] = lr,
 *            min_lr, start_lr, gamma (rg_schedule). hyper[RG_H_LR] = rg__sched_rate of the
 *            step count, unless the clip state says the update that follows is skipped.
 *            Recorded by rg_optim_step before the update, so a replayed graph computes
 *            each step's rate on the device.
 *  CLIP_VALUE aux = rg_list of gradients; f[0] = max_abs. Each element clamped to
 *            [-max_abs, max_abs]; a NaN stays NaN.
 *  ALLREDUCE aux = rg_list of parameter gradients (F32), replaced by their average over
 *            the ranks of ctx->dist (dist.c); i[0] = bucket index within its backward,
 *            i[1] = its bytes. Recorded by rg_backward only when there is more than one
 *            rank.
 * Ring buffers (ring.c): a ring is a persistent tensor [capacity, rows] and its state, a
 * persistent I32 [4]: head (the slot the next entry goes to), count (entries held, at
 * most capacity), and the 64-bit count of RING_SAMPLE nodes run (low word, high word).
 * Entries are addressed oldest first: entry e in [0, count) is slot (head - count + e)
 * mod capacity. Only these nodes read or change the state, so a replayed graph sees the
 * ring as it is on the device.
 *  RING_PUSH in[0] ring, in[1] state, in[2] entries [k, rows] of the ring's dtype, 1 <= k
 *            <= capacity (no out): entry j goes to slot (head + j) mod capacity; then head
 *            += k (mod capacity), count = min(count + k, capacity).
 *  RING_GATHER ring, state, idx I32 [...] -> [..., rows] of the ring's dtype: entry idx[p]
 *            of the ring. An index outside [0, count): fail, naming it and count.
 *  RING_SAMPLE state -> I32 [n]: n entries drawn uniformly from [0, count), element e =
 *            (r * count) >> 32 for r the first word of rg_philox(i[0], draws, e), i[0]
 *            the context seed xor RG_RING_SALT (a stream apart from dropout's); then
 *            draws += 1. An empty ring (count 0): fail.
 * Autoregressive decoding (decode.c): a KV cache is two persistent F32 tensors K, V
 * [B,H,S,D] (rg_state_new); each batch's position lives in an I32 [B] tensor on the
 * device, so a decode step's nodes, and its captured graph, are the same every step.
 *  KV_WRITE  in[0] K, in[1] V, in[2] qkv [B,T,3C] (C = H D, F32), in[3] pos I32 [B]
 *            (no out): row t's k (columns h D + [0,D) of the second third) and v (of the
 *            third) go to K[b,h,pos[b]+t] and V[b,h,pos[b]+t]. pos[b] outside [0, S-T]:
 *            fail, naming it (nothing written).
 *  ATTENTION_CACHED qkv [B,T,3C], K, V, pos -> o [B,T,C] F32: query row t of head h (its
 *            first third's columns h D + [0,D)) attends to the rows s in [0, pos[b]+t]
 *            of K and V of batch b, head h (the causal prefix of an absolute position),
 *            score scale 1/sqrt(D); o's columns h D + [0,D). pos[b] outside [0, S-T]:
 *            fail, naming it.
 *  SAMPLE    logits [N,V] F32, counter I32 [N] (opt: 0 for every row) -> I32 [N]; f[0]
 *            temperature t, f[1] top_p, i[0] top_k, i[1] seed. t == 0: the first maximum
 *            of the row (argmax). Else, with x the row: keep every x_i >= the top_k-th
 *            largest (top_k in [1, V); ties with it kept), then every kept x_i whose key
 *            is >= the largest key c for which the kept weights w_j = exp((x_j - max)/t)
 *            with key >= c sum to at least top_p of the kept total (top_p < 1), the key
 *            being rg_sample_key (internal.h), x's order as integers; the result is the
 *            kept i of the largest x_i/t + g_i, g_i = rg_sample_gumbel(seed, counter,
 *            row, i) (Gumbel noise from Philox, internal.h): an exact draw from softmax
 *            of the kept x/t, the same on every backend (up to the last bit of exp and
 *            log).
 */
#ifndef RG_OPS_H
#define RG_OPS_H

/* The flags column (see the top). */
enum {
  RG_F_DIFF = 1 << 0,
  RG_F_BWD = 1 << 1,
  RG_F_BF16 = 1 << 2,
  RG_F_PRODUCT = 1 << 3,
  RG_F_ACC = 1 << 4,
  RG_F_LIST = 1 << 5,
  RG_F_OPTIM = 1 << 6,
  RG_F_COMM = 1 << 7,
  RG_F_FOLDS = 1 << 8
};

#define RG_OPS(X)                                                               \
  X(UPLOAD, upload, "rg_input", 0, 1,                RG_F_BF16)                 \
  X(FILL, fill, "rg_fill", 0, 1,                     RG_F_BWD | RG_F_BF16)      \
  X(ADD, add, "rg_add", 2, 1,                        RG_F_DIFF)                 \
  X(SUB, sub, "rg_sub", 2, 1,                        RG_F_DIFF)                 \
  X(MUL, mul, "rg_mul", 2, 1,                        RG_F_DIFF)                 \
  X(DIV, div, "rg_div", 2, 1,                        RG_F_DIFF)                 \
  X(SCALE, scale, "rg_scale", 1, 1,                  RG_F_DIFF)                 \
  X(POW, pow, "rg_pow", 1, 1,                        RG_F_DIFF)                 \
  X(CLAMP, clamp, "rg_clamp", 1, 1,                  RG_F_DIFF)                 \
  X(NEG, neg, "rg_neg", 1, 1,                        RG_F_DIFF)                 \
  X(EXP, exp, "rg_exp", 1, 1,                        RG_F_DIFF)                 \
  X(LOG, log, "rg_log", 1, 1,                        RG_F_DIFF)                 \
  X(SQRT, sqrt, "rg_sqrt", 1, 1,                     RG_F_DIFF)                 \
  X(RELU, relu, "rg_relu", 1, 1,                     RG_F_DIFF)                 \
  X(GELU, gelu, "rg_gelu", 1, 1,                     RG_F_DIFF)                 \
  X(SILU, silu, "rg_silu", 1, 1,                     RG_F_DIFF)                 \
  X(SIGMOID, sigmoid, "rg_sigmoid", 1, 1,            RG_F_DIFF)                 \
  X(TANH, tanh, "rg_tanh", 1, 1,                     RG_F_DIFF)                 \
  X(SUM, sum, "rg_sum", 1, 1,                        RG_F_DIFF)                 \
  X(MEAN, mean, "rg_mean", 1, 1,                     RG_F_DIFF)                 \
  X(MAX, max, "rg_max", 1, 1,                        RG_F_DIFF)                 \
  X(ARGMAX, argmax, "rg_argmax", 1, 1,               0)                         \
  X(SUM_TO, sum_to, "rg_sum_to", 1, 1,               RG_F_DIFF | RG_F_BWD)      \
  X(EXPAND, expand, "rg_expand", 1, 1,               RG_F_DIFF | RG_F_BWD)      \
  X(SOFTMAX, softmax, "rg_softmax", 1, 1,            RG_F_DIFF)                 \
  X(LOG_SOFTMAX, log_softmax, "rg_log_softmax", 1, 1, RG_F_DIFF)                \
  X(MATMUL, matmul, "rg_matmul", 2, 1,               RG_F_DIFF | RG_F_PRODUCT)  \
  X(LINEAR, linear, "rg_linear", 3, 1,               RG_F_DIFF | RG_F_PRODUCT)  \
  X(LINEAR_ACT, linear_act, "rg_linear_act", 3, 2,   RG_F_DIFF | RG_F_PRODUCT)  \
  X(LAYERNORM, layernorm, "rg_layernorm", 3, 1,      RG_F_DIFF)                 \
  X(ADD_LAYERNORM, add_layernorm, "rg_layernorm", 4, 2, RG_F_DIFF)              \
  X(RMSNORM, rmsnorm, "rg_rmsnorm", 2, 1,            RG_F_DIFF)                 \
  X(EMBEDDING, embedding, "rg_embedding", 2, 1,      RG_F_DIFF)                 \
  X(ATTENTION, attention, "rg_attention", 5, 2,      RG_F_DIFF)                 \
  X(ATTENTION_QKV, attention_qkv, "rg_attention_qkv", 1, 2, RG_F_DIFF)          \
  X(CROSS_ENTROPY, cross_entropy, "rg_cross_entropy", 3, 3, RG_F_DIFF)          \
  X(MSE, mse, "rg_mse", 2, 1,                        RG_F_DIFF)                 \
  X(COPY, copy, "rg_copy", 1, 1,                     RG_F_DIFF | RG_F_BF16)     \
  X(PERMUTE, permute, "rg_permute", 1, 1,            RG_F_DIFF | RG_F_BF16)     \
  X(SLICE, slice, "rg_slice", 1, 1,                  RG_F_DIFF | RG_F_BF16)     \
  X(CONCAT, concat, "rg_concat", 2, 1,               RG_F_DIFF | RG_F_BF16)     \
  X(DROPOUT, dropout, "rg_dropout", 2, 1,            RG_F_DIFF)                 \
  X(CAST, cast, "rg_cast", 1, 1,                     RG_F_DIFF | RG_F_BF16)     \
  X(RELU_BWD, relu_bwd, "rg_relu'", 2, 1,            RG_F_BWD)                  \
  X(GELU_BWD, gelu_bwd, "rg_gelu'", 2, 1,            RG_F_BWD)                  \
  X(MATMUL_DGELU, matmul_dgelu, "rg_gelu'", 3, 1,    RG_F_BWD)                  \
  X(SILU_BWD, silu_bwd, "rg_silu'", 2, 1,            RG_F_BWD)                  \
  X(SIGMOID_BWD, sigmoid_bwd, "rg_sigmoid'", 2, 1,   RG_F_BWD)                  \
  X(TANH_BWD, tanh_bwd, "rg_tanh'", 2, 1,            RG_F_BWD)                  \
  X(CLAMP_BWD, clamp_bwd, "rg_clamp'", 2, 1,         RG_F_BWD)                  \
  X(MAX_BWD, max_bwd, "rg_max'", 2, 1,               RG_F_BWD)                  \
  X(SOFTMAX_BWD, softmax_bwd, "rg_softmax'", 2, 1,   RG_F_BWD)                  \
  X(LOG_SOFTMAX_BWD, log_softmax_bwd, "rg_log_softmax'", 2, 1, RG_F_BWD)        \
  X(LAYERNORM_BWD, layernorm_bwd, "rg_layernorm'", 6, 4, RG_F_BWD | RG_F_FOLDS) \
  X(RMSNORM_BWD, rmsnorm_bwd, "rg_rmsnorm'", 6, 2,   RG_F_BWD | RG_F_FOLDS)     \
  X(EMBEDDING_BWD, embedding_bwd, "rg_embedding'", 2, 1, RG_F_BWD)              \
  X(ATTENTION_BWD, attention_bwd, "rg_attention'", 8, 3, RG_F_BWD)              \
  X(ATTENTION_QKV_BWD, attention_qkv_bwd, "rg_attention_qkv'", 4, 1, RG_F_BWD)  \
  X(CROSS_ENTROPY_BWD, cross_entropy_bwd, "rg_cross_entropy'", 4, 1, RG_F_BWD)  \
  X(SLICE_BWD, slice_bwd, "rg_slice'", 1, 1,         RG_F_BWD | RG_F_BF16)      \
  X(ACCUM, accum, "rg_backward", 2, 0,               RG_F_BWD | RG_F_ACC)       \
  X(MATMUL_ACC, matmul_acc, "rg_backward", 4, 0,     RG_F_BWD | RG_F_ACC)       \
  X(SUM_TO_ACC, sum_to_acc, "rg_backward", 2, 0,     RG_F_BWD | RG_F_ACC)       \
  X(ZERO_LIST, zero_list, "rg_zero_grad", 0, 0,      RG_F_BF16 | RG_F_LIST)     \
  X(CLIP, clip, "rg_clip_grad_norm", 1, 0,           RG_F_BF16 | RG_F_LIST)     \
  X(ADAMW, adamw, "rg_optim_step", 1, 0,             RG_F_BF16 | RG_F_OPTIM)    \
  X(SGD, sgd, "rg_optim_step", 1, 0,                 RG_F_BF16 | RG_F_OPTIM)    \
  X(LR_SCHEDULE, lr_schedule, "rg_optim_step", 3, 0, 0)                        \
  X(CLIP_VALUE, clip_value, "rg_clip_grad_value", 0, 0, RG_F_BF16 | RG_F_LIST)  \
  X(ALLREDUCE, allreduce, "rg_dist_allreduce", 0, 0, RG_F_BWD | RG_F_BF16 | RG_F_LIST | RG_F_COMM) \
  X(RING_PUSH, ring_push, "rg_ring_push", 3, 0,      RG_F_BF16)                 \
  X(RING_GATHER, ring_gather, "rg_ring_gather", 3, 1, RG_F_BF16)                \
  X(RING_SAMPLE, ring_sample, "rg_ring_sample", 1, 1, 0)                       \
  X(KV_WRITE, kv_write, "rg_kv_write", 4, 0,         0)                         \
  X(ATTENTION_CACHED, attention_cached, "rg_attention_cached", 4, 1, 0)         \
  X(SAMPLE, sample, "rg_sample", 2, 1,               0)

typedef enum rg_op {
#define RG_OP_ENUM(E, ...) RG_OP_##E,
  RG_OPS(RG_OP_ENUM)
#undef RG_OP_ENUM
  RG_OP_COUNT
} rg_op;

#endif
