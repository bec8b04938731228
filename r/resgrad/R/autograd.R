# autograd.R - backward passes, gradients and the gradient check.

#' Backward pass and gradients
#'
#' \code{backward(loss)} records the backward pass of a one-element loss
#' (nothing runs until a barrier): every parameter's gradient accumulates into
#' its persistent buffer until \code{ag_zero_grad} (or an optimizer's
#' \code{zero_grad}). \code{ag_grad(x)} is that gradient for a parameter; for
#' another tensor it exists only if \code{ag_retain_grad(x)} was called before
#' \code{backward}.
#'
#' @param loss a one-element \code{ag_tensor}.
#' @param x an \code{ag_tensor}.
#' @param ctx a context; the default one if \code{NULL}.
#' @return \code{backward}: \code{loss}, invisibly; \code{ag_grad}: an
#'   \code{ag_tensor}.
#' @examples
#' ag_device("cpu")
#' w <- ag_param(c(1, 2, 3), name = "w_bw")
#' backward(ag_sum(w * w))
#' as.numeric(ag_grad(w))
#' @export
backward <- function(loss) {
  .Call(C_rgr_backward, loss)
  invisible(loss)
}

#' @rdname backward
#' @export
ag_grad <- function(x) .Call(C_rgr_grad, x)

#' @rdname backward
#' @export
ag_retain_grad <- function(x) invisible(.Call(C_rgr_retain_grad, x))

#' @rdname backward
#' @export
ag_zero_grad <- function(ctx = NULL) invisible(.Call(C_rgr_zero_grad, .rg_ctx(ctx)))

#' Check gradients against finite differences
#'
#' Compares the gradients \code{backward} computes with central differences
#' (accumulated in double) for every element of every F32 parameter of the
#' context (at most \code{max_elems} a parameter, 0: all). \code{loss_fn} is
#' called many times with no arguments and returns the scalar loss from the
#' context's parameters and persistent tensors. Parameters are restored and
#' gradients zeroed afterwards.
#'
#' @param loss_fn a function of no arguments returning a one-element tensor.
#' @param eps the step of the differences.
#' @param max_elems elements checked a parameter (0: all).
#' @param ctx a context; the default one if \code{NULL}.
#' @return A named vector: \code{max_abs_err}, \code{max_rel_err}, the
#'   \code{param} (from 1) and \code{index} (from 1, row-major) of the worst
#'   element and its \code{analytic} and \code{numeric} values.
#' @examples
#' ag_device("cpu")
#' w <- ag_param(c(0.5, -1, 2), name = "w_gc")
#' ag_gradcheck(function() ag_sum(ag_tanh(w)))
#' @export
ag_gradcheck <- function(loss_fn, eps = 1e-3, max_elems = 0, ctx = NULL) {
  .Call(C_rgr_gradcheck, .rg_ctx(ctx), loss_fn, eps, max_elems)
}

#' Names of the original engine
#'
#' \code{ag_mse_loss} is \code{\link{ag_mse}}, the mean squared error, under the
#' name autograd engines of this style give it; \code{ag_cross_entropy_loss}
#' is \code{\link{ag_cross_entropy}} (logits and class indices counted from 0,
#' not probabilities and one-hot targets).
#'
#' @param pred,target,logits,targets as \code{ag_mse} and
#'   \code{ag_cross_entropy}.
#' @return A scalar \code{ag_tensor}.
#' @examples
#' ag_device("cpu")
#' as.numeric(ag_mse_loss(c(1, 2), c(1, 4)))
#' @export
ag_mse_loss <- function(pred, target) ag_mse(pred, target)

#' @rdname ag_mse_loss
#' @export
ag_cross_entropy_loss <- function(logits, targets) ag_cross_entropy(logits, targets)

#' Activation checkpointing
#'
#' Runs \code{f()} as a checkpoint region: the tensors its ops make go back to
#' the pass pool when it returns, all but its result, and \code{backward}
#' records their recomputation (the same ops on the same inputs: the same
#' values and dropout masks) just before the region's gradients. The forward
#' pass then holds the region's output instead of all its activations; the
#' price is the region's ops run twice. Gradients are the same as without the
#' region, bit for bit. A transformer block is the usual region.
#'
#' Regions do not nest. Every tensor the region made other than its result is
#' refused afterwards (a \code{resgrad_error}): return the value needed later.
#' The region's inputs must keep their values until \code{backward} (no
#' \code{ag_write} or optimizer step in between). End regions before the loss.
#' If \code{f} fails, the region is closed and the error passed on.
#'
#' @param f a function of no arguments that records ops and returns one
#'   \code{ag_tensor} made by an op of the region.
#' @param ctx a context; the default one if \code{NULL}.
#' @return The result of \code{f()}.
#' @examples
#' ag_device("cpu")
#' w <- ag_param(matrix(rnorm(6), 2, 3), name = "w_ckpt")
#' x <- matrix(rnorm(8), 4, 2)
#' h <- ag_checkpoint(function() ag_tanh(x %*% w))
#' backward(ag_sum(h))
#' dim(ag_grad(w))
#' @export
ag_checkpoint <- function(f, ctx = NULL) {
  ctx <- .rg_ctx(ctx)
  .Call(C_rgr_checkpoint_begin, ctx)
  done <- FALSE
  on.exit(if (!done) try(.Call(C_rgr_checkpoint_end, ctx, NULL), silent = TRUE))
  out <- f()
  done <- TRUE
  .Call(C_rgr_checkpoint_end, ctx, out)
  out
}
