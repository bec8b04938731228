# layers.R - the layers of resgrad_nn.h and the GPT model.

.rg_layer <- function(kind, fields, forward) {
  l <- new.env(parent = emptyenv())
  for (n in names(fields)) assign(n, fields[[n]], envir = l)
  l$forward <- forward
  class(l) <- c(paste0("ag_layer_", kind), "ag_layer")
  l
}

#' @export
print.ag_layer <- function(x, ...) {
  cat("<", class(x)[1], ">\n", sep = "")
  invisible(x)
}

#' Layers
#'
#' Each layer makes its parameters (named \code{"<name>.weight"},
#' \code{"<name>.bias"} for checkpoints) and returns an object whose
#' \code{$forward(x)} records the layer's ops; its parameters are its fields
#' (\code{$weight}, \code{$bias}).
#' \itemize{
#'   \item \code{ag_layer_linear(in_features, out_features)}: \code{x [..., in]}
#'     to \code{[..., out]}, weight \code{[out, in]} (PyTorch's layout);
#'     \code{std < 0} is PyTorch's default uniform initialisation, \code{std > 0}
#'     normal, 0 zeros.
#'   \item \code{ag_layer_embedding(num, dim)}: I32 indices (from 0) to rows of
#'     a \code{[num, dim]} table.
#'   \item \code{ag_layer_norm(dim)}: layer normalisation of the last axis.
#' }
#'
#' @param in_features,out_features sizes of the linear map.
#' @param bias \code{TRUE}: a bias.
#' @param std initialisation (see above).
#' @param num,dim embedding rows and width; \code{dim} also the normalised width.
#' @param eps layer norm's epsilon.
#' @param name the parameters' name prefix; \code{NULL} gives a unique one.
#' @param ctx a context; the default one if \code{NULL}.
#' @return An \code{ag_layer}.
#' @examples
#' ag_device("cpu")
#' fc <- ag_layer_linear(4, 2)
#' y <- fc$forward(ag_tensor(matrix(rnorm(12), 3, 4)))
#' dim(y)
#' @export
ag_layer_linear <- function(in_features, out_features, bias = TRUE, std = -1, name = NULL,
                            ctx = NULL) {
  r <- .Call(C_rgr_nn_linear, .rg_ctx(ctx), .rg_layer_name(name, "linear"), in_features,
             out_features, bias, std)
  w <- r[[1]]
  b <- r[[2]]
  .rg_layer("linear", list(weight = w, bias = b), function(x) ag_linear(x, w, b))
}

#' @rdname ag_layer_linear
#' @export
ag_layer_embedding <- function(num, dim, std = 0.02, name = NULL, ctx = NULL) {
  w <- .Call(C_rgr_nn_embedding, .rg_ctx(ctx), .rg_layer_name(name, "embedding"), num, dim,
             std)
  .rg_layer("embedding", list(weight = w), function(idx) ag_embedding(w, idx))
}

#' @rdname ag_layer_linear
#' @export
ag_layer_norm <- function(dim, eps = 1e-5, name = NULL, ctx = NULL) {
  r <- .Call(C_rgr_nn_layernorm, .rg_ctx(ctx), .rg_layer_name(name, "layernorm"), dim, eps)
  w <- r[[1]]
  b <- r[[2]]
  e <- r[[3]]
  .rg_layer("norm", list(weight = w, bias = b), function(x) ag_layernorm(x, w, b, e))
}

.rg_layer_name <- function(name, kind) {
  if (!is.null(name)) return(as.character(name))
  .rg_state$nlayer <- (if (is.null(.rg_state$nlayer)) 0L else .rg_state$nlayer) + 1L
  paste0(kind, ".", .rg_state$nlayer)
}

#' A GPT model
#'
#' GPT-2 (pre-norm blocks, fused attention, tied head) made by the library's
#' \code{rg_gpt_new}: parameters named as GPT-2's and nanoGPT's state dicts
#' (with \code{prefix}), initialised as GPT-2 from the context's seed.
#' \code{$forward(idx)} takes I32 token ids \code{[B, T]} (from 0; an R integer
#' matrix of B rows) and returns logits \code{[B, T, vocab]};
#' \code{$loss(idx, targets, ignore_index = NULL)} the mean cross-entropy;
#' \code{$param_count()} the number of parameter elements.
#'
#' @param vocab,block,layers,width,heads vocabulary size, longest sequence,
#'   blocks, width (a multiple of heads) and heads.
#' @param dropout dropout after embeddings, attention and MLP.
#' @param prefix the parameters' name prefix.
#' @param checkpoint \code{TRUE}: each block is an activation checkpoint region
#'   (its inner activations are recomputed by \code{backward}: less memory, the
#'   same gradients bit for bit).
#' @param ctx a context; the default one if \code{NULL}.
#' @return An \code{ag_gpt}; its \code{$config} holds the sizes.
#' @seealso \code{\link{ag_gpt_load_hf}}, \code{\link{ag_data_open}}
#' @examples
#' ag_device("cpu", seed = 1)
#' gpt <- ag_gpt(vocab = 16, block = 8, layers = 1, width = 16, heads = 2)
#' idx <- matrix(sample(0:15, 16, TRUE), 2, 8)
#' as.numeric(gpt$loss(idx, idx))
#' @export
ag_gpt <- function(vocab, block, layers, width, heads, dropout = 0, prefix = "",
                   checkpoint = FALSE, ctx = NULL) {
  .rg_gpt(.Call(C_rgr_gpt_new, .rg_ctx(ctx),
                as.numeric(c(vocab, block, layers, width, heads, dropout,
                             isTRUE(checkpoint))), prefix))
}

#' Hugging Face GPT-2 checkpoints
#'
#' \code{ag_gpt_load_hf} makes an \code{ag_gpt} from a GPT-2 checkpoint in
#' Hugging Face's safetensors layout (the \code{model.safetensors} of a
#' \code{GPT2LMHeadModel} or \code{GPT2Model}, as \code{save_pretrained}
#' writes it): the sizes come from the tensors' shapes, the heads from
#' \code{heads} or, when it is 0, from the \code{config.json} in the same
#' folder, which must also agree with the tensors and describe GPT-2's
#' computation. Values may be F32, BF16 or F16; the parameters are F32, named as
#' \code{ag_gpt} names them after \code{prefix}, with dropout 0. Its logits are
#' the checkpoint's (the package's tests compare them with those of Hugging
#' Face's transformers). Every name, shape and dtype is checked before any
#' parameter is made: a file that is not such a GPT-2 signals
#' \code{resgrad_io} naming what is wrong. Barriers.
#'
#' \code{ag_gpt_save_hf} writes a model as such a checkpoint (F32, the head
#' tied) and replaces the \code{config.json} beside it with a GPT-2's: a folder
#' holding \code{model.safetensors} and that \code{config.json} loads with
#' transformers' \code{GPT2LMHeadModel.from_pretrained} and with
#' \code{ag_gpt_load_hf}. A barrier; atomic; NaN and Inf are refused.
#'
#' @param path the \code{.safetensors} file.
#' @param heads the number of heads; 0 reads \code{n_head} from
#'   \code{config.json}.
#' @param prefix the parameters' name prefix.
#' @param ctx a context; the default one if \code{NULL}.
#' @param gpt an \code{ag_gpt}.
#' @return \code{ag_gpt_load_hf}: an \code{ag_gpt}; \code{ag_gpt_save_hf}:
#'   \code{path}, invisibly.
#' @examples
#' ag_device("cpu", seed = 1)
#' gpt <- ag_gpt(vocab = 16, block = 8, layers = 1, width = 16, heads = 2)
#' dir <- tempfile()
#' dir.create(dir)
#' f <- file.path(dir, "model.safetensors")
#' ag_gpt_save_hf(gpt, f)
#' again <- ag_gpt_load_hf(f, prefix = "copy.")
#' again$config
#' @export
ag_gpt_load_hf <- function(path, heads = 0, prefix = "", ctx = NULL) {
  .rg_gpt(.Call(C_rgr_gpt_load_hf, .rg_ctx(ctx), enc2native(path.expand(path)), heads,
                prefix))
}

#' @rdname ag_gpt_load_hf
#' @export
ag_gpt_save_hf <- function(gpt, path) {
  if (!inherits(gpt, "ag_gpt")) stop("ag_gpt_save_hf: gpt must be an ag_gpt")
  .Call(C_rgr_gpt_save_hf, gpt$ptr, enc2native(path.expand(path)))
  invisible(path)
}

# The R object of a GPT's external pointer.
.rg_gpt <- function(ptr) {
  g <- new.env(parent = emptyenv())
  g$ptr <- ptr
  cfg <- as.list(.Call(C_rgr_gpt_config, ptr))
  cfg$dropout <- signif(cfg$dropout, 7) # an F32 value
  cfg$checkpoint <- cfg$checkpoint != 0
  g$config <- cfg
  g$forward <- function(idx) .Call(C_rgr_gpt_forward, ptr, .rg_ids(idx))
  g$loss <- function(idx, targets, ignore_index = NULL)
    .Call(C_rgr_gpt_loss, ptr, .rg_ids(idx), .rg_ids(targets), ignore_index)
  g$param_count <- function() .Call(C_rgr_gpt_param_count, ptr)
  class(g) <- "ag_gpt"
  g
}

# Token ids as I32: R doubles holding whole numbers are taken as ids too.
.rg_ids <- function(x) {
  if (inherits(x, "ag_tensor") || is.integer(x)) return(x)
  storage.mode(x) <- "integer"
  x
}

#' @export
print.ag_gpt <- function(x, ...) {
  c <- x$config
  cat(sprintf("<ag_gpt> vocab %g, block %g, %g layers, width %g, %g heads: %g parameters\n",
              c$vocab, c$block, c$layers, c$width, c$heads, x$param_count()))
  invisible(x)
}
