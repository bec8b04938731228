/*
 * resgrad_nn.h - layers and a GPT model built on resgrad's public API (resgrad.h).
 *
 * Nothing here reaches inside the library: every layer is a plain struct of parameter
 * handles (rg_nn_X), a function that makes them (rg_nn_X_init) and one that records the
 * layer's ops (rg_nn_X_forward), so whatever resgrad.h promises (recording, barriers,
 * errors, autograd, checkpoints) holds for these layers unchanged.
 *
 *   rg_nn_linear fc;
 *   if (rg_nn_linear_init(ctx, &fc, "fc1", 784, 256, 1, -1) != RG_OK) fail(rg_errmsg(ctx));
 *   rg_tensor h = rg_relu(ctx, rg_nn_linear_forward(ctx, &fc, x));
 *
 * Conventions (in addition to those of resgrad.h):
 *  - Parameters are made with rg_param in the persistent pool and named for checkpoints.
 *    Each *_init takes a name that is prepended verbatim, then '.', to the parameter's own
 *    name: rg_nn_linear_init(ctx, &l, "h.0.mlp.c_fc", ...) makes "h.0.mlp.c_fc.weight" and
 *    "h.0.mlp.c_fc.bias". A NULL or empty name gives just "weight"/"bias". Names must be
 *    unique in a context (rg_param's rule), so two models in one context need two prefixes.
 *  - Weights use PyTorch's layout [out, in], as torch.nn.Linear and nanoGPT, whose
 *    checkpoints map as they are (rg_gpt_new with prefix "transformer."; nanoGPT's
 *    lm_head.weight is the tied wte.weight). Hugging Face's GPT-2 stores attn.c_attn,
 *    attn.c_proj, mlp.c_fc and mlp.c_proj weights as Conv1D, [in, out]: rg_gpt_load_hf
 *    and rg_gpt_save_hf transpose those four.
 *  - Init functions return RG_OK, or an error with the sticky error set: MISUSE for a bad
 *    argument (NULL struct, non-positive size, dropout outside [0, 1)), else the status
 *    of the rg_param call that failed (a duplicate name is MISUSE, a full pool OOM).
 *    Parameters made before a failure stay in the context. Init calls nothing but
 *    rg_param, so it barriers exactly when rg_param does.
 *  - Forward functions record ops and return a pending handle, or RG_NONE with the sticky
 *    error set; given RG_NONE they return RG_NONE and keep the first error, like every
 *    op. Misuse detected here (a wrong rank, a sequence longer than the model's block) is
 *    RG_ERR_MISUSE with a message that names the function and says what to do. Where
 *    the misuse makes a real operation fail, the explanation travels as a label on the
 *    call that fails: "rg_slice [rg_gpt_forward: idx is [2, 12] but the model's block
 *    size is 8; ...]: [0, 12) is outside axis 0 of size 8"; otherwise it is raised with
 *    rg_raise.
 *  - Layer structs are plain values owned by the caller; copying one copies handles, not
 *    parameters. They stay valid until the persistent pool is reset or the context closed.
 *  - Dropout uses rg_dropout: identity when p == 0 or when rg_set_training(ctx, 0).
 *  - Thread-safety is that of the context: one thread at a time.
 */
#ifndef RESGRAD_NN_H
#define RESGRAD_NN_H

#include "resgrad.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- linear -------------------------------------------------------------------------- */

/* y = x w^T + b: w [out, in], b [out] or RG_NONE. */
typedef struct rg_nn_linear { rg_tensor w, b; } rg_nn_linear;
/* Makes "<name>.weight" [out, in] and, if bias != 0, "<name>.bias" [out]. Weight init:
   std > 0: N(0, std); std == 0: zeros; std < 0: torch.nn.Linear's default
   U(-1/sqrt(in), 1/sqrt(in)) (bias too). The bias is otherwise zero. */
RG_API rg_status rg_nn_linear_init(rg_ctx *ctx, rg_nn_linear *l, const char *name,
                                   int64_t in, int64_t out, int bias, float std);
/* x [..., in] -> [..., out]. */
RG_API rg_tensor rg_nn_linear_forward(rg_ctx *ctx, const rg_nn_linear *l, rg_tensor x);

/* ---- embedding ----------------------------------------------------------------------- */

typedef struct rg_nn_embedding { rg_tensor w; } rg_nn_embedding; /* [num, dim] */
/* Makes "<name>.weight" [num, dim] ~ N(0, std) (std == 0: zeros). */
RG_API rg_status rg_nn_embedding_init(rg_ctx *ctx, rg_nn_embedding *e, const char *name,
                                      int64_t num, int64_t dim, float std);
/* idx I32 of any shape -> [...idx..., dim]. An index outside [0, num) fails at the
   barrier (RG_ERR_MISUSE naming the value), as rg_embedding. */
RG_API rg_tensor rg_nn_embedding_forward(rg_ctx *ctx, const rg_nn_embedding *e,
                                         rg_tensor idx);

/* ---- layernorm ----------------------------------------------------------------------- */

typedef struct rg_nn_layernorm { rg_tensor w, b; float eps; } rg_nn_layernorm;
/* Makes "<name>.weight" [dim] (ones) and "<name>.bias" [dim] (zeros); eps <= 0 means
   1e-5 (PyTorch's and GPT-2's). */
RG_API rg_status rg_nn_layernorm_init(rg_ctx *ctx, rg_nn_layernorm *n, const char *name,
                                      int64_t dim, float eps);
/* Normalises the last axis. */
RG_API rg_tensor rg_nn_layernorm_forward(rg_ctx *ctx, const rg_nn_layernorm *n,
                                         rg_tensor x);

/* ---- MLP ----------------------------------------------------------------------------- */

/* c_proj(gelu(c_fc(x))), then dropout: GPT-2's feed-forward. */
typedef struct rg_nn_mlp { rg_nn_linear c_fc, c_proj; float dropout; } rg_nn_mlp;
/* Makes "<name>.c_fc.weight" [hidden, width], "<name>.c_fc.bias" [hidden],
   "<name>.c_proj.weight" [width, hidden] and "<name>.c_proj.bias" [width]; weights
   N(0, std) and N(0, proj_std) (std as rg_nn_linear_init), biases zero. dropout in
   [0, 1) else MISUSE. GPT-2's hidden is 4*width. */
RG_API rg_status rg_nn_mlp_init(rg_ctx *ctx, rg_nn_mlp *m, const char *name, int64_t width,
                                int64_t hidden, float std, float proj_std, float dropout);
/* x [..., width] -> [..., width]. */
RG_API rg_tensor rg_nn_mlp_forward(rg_ctx *ctx, const rg_nn_mlp *m, rg_tensor x);

/* ---- causal self-attention ----------------------------------------------------------- */

/* Multi-head causal self-attention with a fused qkv projection, as GPT-2:
   [q k v] = c_attn(x) split along the last axis into thirds; head h of each is columns
   [h*D, (h+1)*D) of its third (D = width/heads); y = c_proj(concat of heads of
   softmax(q k^T/sqrt(D) + causal mask) v), then dropout. The heads are computed in place
   by rg_attention_qkv on c_attn's output (no copies split them out). Dropout on the
   attention weights themselves is not applied (the attention is one fused op). */
typedef struct rg_nn_attention {
  rg_nn_linear c_attn, c_proj;
  int64_t heads;
  float dropout;
} rg_nn_attention;
/* Makes "<name>.c_attn.weight" [3*width, width], "<name>.c_attn.bias" [3*width],
   "<name>.c_proj.weight" [width, width] and "<name>.c_proj.bias" [width]; weights
   N(0, std) and N(0, proj_std), biases zero. width must be a positive multiple of heads
   and dropout in [0, 1), else MISUSE. */
RG_API rg_status rg_nn_attention_init(rg_ctx *ctx, rg_nn_attention *a, const char *name,
                                      int64_t width, int64_t heads, float std,
                                      float proj_std, float dropout);
/* x [B, T, width] -> [B, T, width]; position t attends to positions 0..t. */
RG_API rg_tensor rg_nn_attention_forward(rg_ctx *ctx, const rg_nn_attention *a,
                                         rg_tensor x);

/* ---- transformer block --------------------------------------------------------------- */

/* A pre-norm GPT-2 block: x += attn(ln_1(x)); x += mlp(ln_2(x)). MLP hidden = 4*width. */
typedef struct rg_nn_block {
  rg_nn_layernorm ln_1;
  rg_nn_attention attn;
  rg_nn_layernorm ln_2;
  rg_nn_mlp mlp;
} rg_nn_block;
/* Makes "<name>.ln_1.*", "<name>.attn.*", "<name>.ln_2.*", "<name>.mlp.*" (in that
   order) as the layers above; proj_std is used for attn.c_proj and mlp.c_proj. */
RG_API rg_status rg_nn_block_init(rg_ctx *ctx, rg_nn_block *b, const char *name,
                                  int64_t width, int64_t heads, float std, float proj_std,
                                  float dropout);
/* x [B, T, width] -> [B, T, width]. Records the attention half under the label "attn" and
   the MLP half under "mlp", so errors read e.g. "h.3/attn". */
RG_API rg_tensor rg_nn_block_forward(rg_ctx *ctx, const rg_nn_block *b, rg_tensor x);

/* ---- GPT ----------------------------------------------------------------------------- */

typedef struct rg_gpt_config {
  int64_t vocab;  /* V: token ids are in [0, V) */
  int64_t block;  /* T: the longest sequence (rows of wpe) */
  int64_t layers; /* L >= 0 */
  int64_t width;  /* C, a multiple of heads */
  int64_t heads;  /* H */
  float dropout;  /* p in [0, 1) after embeddings, attention and MLP; 0 = none */
  int checkpoint; /* 1: each block is an activation checkpoint region (rg_checkpoint_begin):
                     the forward keeps a block's output, rg_backward recomputes the rest;
                     and so is each chunk of the loss's head (head_chunk): its logits are
                     recomputed too. The same gradients bit for bit, for less memory and
                     more compute */
  int64_t head_chunk; /* the most logits (rows x vocab) rg_gpt_loss makes at once: above
                     it the head runs in row chunks of at least one row (see rg_gpt_loss);
                     0: 2^26 (at GPT-2's vocabulary, 1024 of B8 T1024's 8192 rows a
                     chunk), < 0: never */
} rg_gpt_config;

/* GPT-2 (structure and initialisation as the GPT of torch_ref.py, the PyTorch reference
   that bench/compare.py --torch-ref runs; names as GPT-2's and nanoGPT's state dicts):
   for idx [B, T],
     x = drop(wte[idx] + wpe[0..T))   h_i: x += attn(ln_1(x)); x += mlp(ln_2(x))
     logits = ln_f(x) wte^T           (the head is tied to wte: no separate parameter)
   Parameters, in creation order, each "<prefix>" + the name below:
     wte.weight [V, C]          wpe.weight [block, C]
     h.{i}.ln_1.weight [C]      h.{i}.ln_1.bias [C]
     h.{i}.attn.c_attn.weight [3C, C]   h.{i}.attn.c_attn.bias [3C]   (fused q, k, v)
     h.{i}.attn.c_proj.weight [C, C]    h.{i}.attn.c_proj.bias [C]
     h.{i}.ln_2.weight [C]      h.{i}.ln_2.bias [C]
     h.{i}.mlp.c_fc.weight [4C, C]      h.{i}.mlp.c_fc.bias [4C]
     h.{i}.mlp.c_proj.weight [C, 4C]    h.{i}.mlp.c_proj.bias [C]
     ln_f.weight [C]            ln_f.bias [C]
   for i in 0..L-1: V*C + T*C + L*(12*C*C + 13*C) + 2*C numbers in all.
   Initialisation (GPT-2): weights and embeddings N(0, 0.02), the residual projections
   attn.c_proj.weight and mlp.c_proj.weight N(0, 0.02/sqrt(2L)), biases 0, layernorm
   weight 1 and bias 0. Values come from the context's seed, so one seed gives one model.
   The prefix is prepended verbatim (e.g. "transformer." gives "transformer.wte.weight");
   NULL means "". */
typedef struct rg_gpt rg_gpt;

/* Makes the model's parameters. Returns NULL on error with the sticky error set: a bad
   config (MISUSE, saying which field), a name clash (MISUSE), OOM. The small rg_gpt
   struct itself is allocated with malloc (this module sits on the public API and cannot
   use the context's allocator); free it with rg_gpt_free. The parameters belong to the
   context, not to the struct. Not a barrier. */
RG_API rg_gpt *rg_gpt_new(rg_ctx *ctx, const rg_gpt_config *cfg, const char *prefix);
/* idx I32 [B, T] with 1 <= T <= block -> logits F32 [B, T, V]. Records; not a barrier.
   A T above the block size, a rank other than 2 or a dtype other than I32 gives RG_NONE
   and MISUSE, the message saying what to pass. Token ids outside [0, V) fail at the
   barrier (RG_ERR_FAILED for the values pending, the message naming the id). Work is
   recorded under the labels "wte" (embeddings), "h.{i}/attn", "h.{i}/mlp" and "head",
   all below "<prefix>" without its trailing '.' when there is a prefix, so an error
   reads e.g. "rg_attention [gpt0/h.3/attn]: ...". */
RG_API rg_tensor rg_gpt_forward(rg_gpt *gpt, rg_tensor idx);
/* Mean cross-entropy of rg_gpt_forward(idx) against targets I32 [B, T]: a scalar,
   recorded under the label "loss". The _ignore variant skips targets equal to
   ignore_index (mean over the rest; e.g. -1 for padding or prompt positions).
   When the logits (B T x vocab) would exceed cfg.head_chunk, the tied linear and the
   cross-entropy run on K chunks of rows (K the least power of two that brings a chunk
   under it, ceil(B T / K) rows each but the last) and the chunks' means are combined
   into the mean over every row that takes part (the same value but for float rounding):
   the whole logits never exist at once, and with cfg.checkpoint each chunk is a
   checkpoint region, so at most one chunk's logits and their gradient do. Chunking
   depends on the shapes and the config, never on cfg.checkpoint: a model's gradients
   with and without regions stay equal bit for bit. The _ignore variant chunks only
   when vocab and |ignore_index| are below 2^24 (its counts are taken in float).
   rg_gpt_forward never chunks: it returns the whole logits. */
RG_API rg_tensor rg_gpt_loss(rg_gpt *gpt, rg_tensor idx, rg_tensor targets);
RG_API rg_tensor rg_gpt_loss_ignore(rg_gpt *gpt, rg_tensor idx, rg_tensor targets,
                                    int ignore_index);
/* Number of parameter elements (the tied head counted once); -1 for NULL. Not a
   barrier. */
RG_API int64_t rg_gpt_param_count(const rg_gpt *gpt);
/* The config the model was made with (NULL for NULL). */
RG_API const rg_gpt_config *rg_gpt_config_of(const rg_gpt *gpt);
/* Frees the struct; the parameters stay in the context. NULL is fine. */
RG_API void rg_gpt_free(rg_gpt *gpt);

/* ---- Hugging Face GPT-2 checkpoints -------------------------------------------------- */

/* Makes a GPT from a GPT-2 checkpoint in Hugging Face's safetensors layout (the
   model.safetensors of a GPT2LMHeadModel or GPT2Model, e.g. save_pretrained's): tensor
   names with or without "transformer." ("transformer.h.0.attn.c_attn.weight" or
   "h.0.attn.c_attn.weight"), the four projection weights (attn.c_attn, attn.c_proj,
   mlp.c_fc, mlp.c_proj) in Conv1D's layout [in, out], which are transposed to resgrad's
   [out, in]; "lm_head.weight" absent or equal to wte (tied); the causal mask's buffers
   h.N.attn.bias and h.N.attn.masked_bias ignored. vocab, block (n_positions), layers
   and width (n_embd) come from the tensors' shapes. heads > 0 is n_head; heads == 0
   reads "n_head" from the config.json in the file's folder, which must also agree with
   the tensors (vocab_size, n_positions, n_layer, n_embd when present) and describe
   GPT-2's computation, which is rg_gpt's: activation_function "gelu_new" (or
   "gelu_pytorch_tanh", "gelu_fast": GELU's tanh approximation), layer_norm_epsilon
   1e-5, scale_attn_weights true, scale_attn_by_inverse_layer_idx false. Values may be
   F32, BF16 or F16 (converted to F32 exactly); the parameters are F32, named as
   rg_gpt_new names them after prefix, dropout 0. The checkpoint's logits are then
   rg_gpt_forward's (tests/test_hf.c compares them with the transformers package's).
   Returns NULL with the sticky error set: RG_ERR_IO naming the file and what is wrong
   when it is not a GPT-2 of this layout (not safetensors, a resgrad checkpoint, a tensor
   missing, of another shape or dtype, a tensor GPT-2 does not have, an untied head, a
   config.json that is missing when heads == 0, or disagrees), RG_ERR_NONFINITE for a NaN
   or Inf in a value, RG_ERR_MISUSE for heads < 0 or heads that do not divide n_embd
   (and rg_gpt_new's errors). Every name, shape and dtype is checked before any
   parameter is made; a read that fails or a NaN found after that leaves the parameters
   made so far in the context, as a failed rg_gpt_new does. Barriers (rg_write of each
   parameter). Free the struct with rg_gpt_free. */
RG_API rg_gpt *rg_gpt_load_hf(rg_ctx *ctx, const char *path, int64_t heads,
                              const char *prefix);
/* Writes gpt as a Hugging Face GPT-2 checkpoint: path gets the tensors (F32, named
   "transformer." + GPT-2's name, the four projections in Conv1D's layout, no
   "lm_head.weight": the head is tied, as save_pretrained writes it; "__metadata__"
   {"format": "pt"}) through rg_st_write (atomic; NaN and Inf refused), then the
   config.json in the same folder is replaced by a GPT2LMHeadModel's (model_type "gpt2",
   the sizes, "gelu_new", eps 1e-5, dropout, tied embeddings). A folder holding
   "model.safetensors" and that config.json loads with transformers'
   GPT2LMHeadModel.from_pretrained (add a tokenizer for text), and with rg_gpt_load_hf.
   Barrier (rg_read of each parameter). On a rank other than 0 of a distributed context
   it writes nothing and returns rg_sync's status, as rg_save; a dry-run context refuses
   it (RG_ERR_UNSUPPORTED, from rg_st_write). Errors: RG_ERR_MISUSE
   (NULL gpt, empty path), RG_ERR_IO (either file cannot be written; when only
   config.json fails, the tensors' file is already in place), RG_ERR_OOM, and rg_read's
   and rg_st_write's. */
RG_API rg_status rg_gpt_save_hf(const rg_gpt *gpt, const char *path);

/* ---- generation ---------------------------------------------------------------------- */

/* How rg_gpt_generate picks each token (rg_sample's rules, as Hugging Face's temperature,
   top-k and top-p warpers in that order). A zeroed struct is greedy without a stop token
   but for top_p: set it to 1. */
typedef struct rg_sample_config {
  float temperature; /* 0: greedy, the most likely token; else > 0, finite */
  int64_t top_k;     /* keep the top_k most likely tokens; 0: off */
  float top_p;       /* keep the smallest set of the most likely tokens whose probability
                        reaches top_p; in (0, 1], 1: off */
  uint64_t seed;     /* the draws are a function of (seed, position, batch row) */
  int32_t stop;      /* a token id that ends a row (it is written, then -1s); -1: none */
} rg_sample_config;

/* Generates up to max_new tokens after each of batch prompts, with a KV cache on the
   device. prompts is [batch, prompt_len] row-major: row b holds its prompt's lens[b]
   token ids first, the rest ignored (right padding; lens NULL: every prompt is
   prompt_len long), each in [1, prompt_len]. out [batch, max_new] gets row b's new
   tokens in order; a row that produced cfg->stop has it written, then -1 to its end.
   cfg NULL: greedy, no stop token.
   How: K and V of every layer are rg_state_new tensors [batch, heads, S, head size], S =
   the longest prompt + max_new - 1, freed on return. One pass over the first min(lens)
   positions of every prompt fills the cache (prefill); then one decode step per
   position feeds one token per row: the prompt's own token while the row's prompt
   lasts (so prompts of different lengths share one position, with no padding in
   attention), the token drawn at the previous step after it. Each step uploads the
   tokens and the position (8 batch bytes), records the same nodes (rg_kv_write,
   rg_attention_cached, rg_sample with the positions as its counter), and downloads the
   batch's ids (4 batch bytes): on CUDA one graph replay per step from the third step
   on (rg_stats). It stops when every row has its max_new tokens or its stop token.
   The logits are rg_gpt_forward's of the sequence so far at its last position (in
   other kernels: equal to float rounding), so greedy generation gives the tokens that
   argmax over rg_gpt_forward of the growing sequence gives; no dropout is applied.
   Calls rg_step_begin at every step: pass-pool handles become stale (queued work runs
   first). Errors, with nothing generated, the sticky error set and its status returned:
   RG_ERR_MISUSE for NULL arguments, batch, prompt_len or max_new < 1, a length outside
   [1, prompt_len], a token id outside [0, vocab), a prompt longer than the model's block
   size, a longest prompt + max_new - 1 over the block size (each message says what fits),
   bad cfg values (naming the field); RG_ERR_OOM when the cache does not fit; a failed
   drain's status. */
RG_API rg_status rg_gpt_generate(rg_gpt *gpt, const int32_t *prompts, const int64_t *lens,
                                 int64_t batch, int64_t prompt_len, int64_t max_new,
                                 const rg_sample_config *cfg, int32_t *out);

#ifdef __cplusplus
}
#endif
#endif /* RESGRAD_NN_H */
