# inspect.R - looking at handles without disturbing them, and labels naming recorded work.

#' List a context's tensors
#'
#' One line for every tensor of \code{pool}, in slot order, as \code{print}
#' describes a tensor: dtype, shape, pool, generation and slot, the parameter's
#' name (or whose gradient it is), pending or ready with the op and label that
#' made it, gradient flags, and a failed barrier's message. The library's own
#' tensors (gradients, optimizer state) are listed too. Not a barrier; for
#' finding what holds memory or what a failed step left behind.
#'
#' @param pool \code{NULL} (both, the pass pool first), \code{"pass"} or
#'   \code{"persistent"}.
#' @param ctx a context; the default one if \code{NULL}.
#' @return A character vector, one element a tensor.
#' @seealso \code{\link{ag_tensor_info}} (\code{print} of one tensor)
#' @examples
#' ag_device("cpu")
#' w <- ag_param(c(1, 2), name = "w_dump")
#' y <- ag_relu(w)
#' ag_dump_handles()
#' @export
ag_dump_handles <- function(pool = NULL, ctx = NULL) {
  code <- if (is.null(pool)) -1L else .rg_pool_code(pool)
  .Call(C_rgr_dump_handles, .rg_ctx(ctx), code)
}

#' Label recorded work
#'
#' Evaluates \code{expr} with \code{label} pushed on the context's label stack:
#' every op recorded meanwhile carries the stack (joined by \code{"/"}), which
#' the library's error messages, \code{print} of a pending tensor and trace files
#' name. Labels nest; the label is popped however \code{expr} ends.
#'
#' @param label a string.
#' @param expr the expression to evaluate.
#' @param ctx a context; the default one if \code{NULL}.
#' @return The value of \code{expr}.
#' @examples
#' ag_device("cpu")
#' y <- ag_with_label("block0", ag_with_label("mlp", ag_relu(ag_tensor(c(-1, 2)))))
#' print(y)
#' @export
ag_with_label <- function(label, expr, ctx = NULL) {
  ctx <- .rg_ctx(ctx)
  .Call(C_rgr_label_push, ctx, label)
  on.exit(.Call(C_rgr_label_pop, ctx))
  expr
}
