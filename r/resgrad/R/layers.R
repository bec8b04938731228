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
#' @param ctx a context; the default one if \code{NULL}.
#' @return An \code{ag_gpt}.
#' @examples
#' ag_device("cpu", seed = 1)
#' gpt <- ag_gpt(vocab = 16, block = 8, layers = 1, width = 16, heads = 2)
#' idx <- matrix(sample(0:15, 16, TRUE), 2, 8)
#' as.numeric(gpt$loss(idx, idx))
#' @export
ag_gpt <- function(vocab, block, layers, width, heads, dropout = 0, prefix = "", ctx = NULL) {
  ptr <- .Call(C_rgr_gpt_new, .rg_ctx(ctx),
               as.numeric(c(vocab, block, layers, width, heads, dropout)), prefix)
  g <- new.env(parent = emptyenv())
  g$ptr <- ptr
  g$config <- list(vocab = vocab, block = block, layers = layers, width = width,
                   heads = heads, dropout = dropout)
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
