# tensor.R - tensors from R values and back, parameters, printing, R's generics.

.rg_dtypes <- c(f32 = 0L, bf16 = 1L, i32 = 2L)

.rg_dtype_code <- function(dtype) {
  if (is.null(dtype)) return(-1L)
  code <- .rg_dtypes[match.arg(dtype, names(.rg_dtypes))]
  unname(code)
}

#' Make a tensor from an R value
#'
#' Uploads \code{x} (a numeric, integer, logical or factor vector, matrix or
#' array) to the context's device. The upload is queued: the call returns at
#' once and \code{x} may change afterwards.
#'
#' Layout: an R array of \code{dim c(d1, ..., dn)} becomes the tensor of shape
#' \code{[d1, ..., dn]} holding the same element at the same index, so
#' \code{as.array(ag_tensor(x))} equals \code{x}. R stores the first index
#' fastest and the library the last, so the values are transposed on the way
#' (and back by \code{as.array}). A matrix of \code{n} rows of \code{k}
#' features is the library's \code{[n, k]} batch, as \code{ag_linear} and
#' \code{\%*\%} expect. A vector without \code{dim} is a tensor of one axis.
#' At most 4 axes.
#'
#' Types: doubles and logicals become F32 (\code{dtype = "bf16"} rounds them to
#' bfloat16), integers I32, a factor I32 codes counted from 0 (the library
#' counts class indices from 0: a factor of levels a, b, c gives 0, 1, 2).
#'
#' @param x the value.
#' @param dtype \code{NULL} (from \code{x}'s type), \code{"f32"}, \code{"bf16"}
#'   or \code{"i32"}.
#' @param dim the shape, when not \code{dim(x)} (or \code{length(x)});
#'   \code{integer(0)} makes a tensor of no axes from one number.
#' @param persistent \code{FALSE}: a per-step input in the pass pool (stale
#'   after the next \code{ag_step_begin}); \code{TRUE}: a constant in the
#'   persistent pool that lives across steps (a dataset resident on the device).
#' @param ctx a context; the default one if \code{NULL}.
#' @return An \code{ag_tensor}.
#' @seealso \code{\link{ag_param}}, \code{\link{as.array.ag_tensor}}
#' @examples
#' ag_device("cpu")
#' x <- ag_tensor(matrix(1:6 + 0, 2, 3))
#' dim(x)
#' as.array(x)
#' @export
ag_tensor <- function(x, dtype = NULL, dim = NULL, persistent = FALSE, ctx = NULL) {
  .Call(C_rgr_tensor_new, .rg_ctx(ctx), x, dim, .rg_dtype_code(dtype), persistent)
}

#' Make a trainable parameter
#'
#' A parameter lives in the persistent pool across steps, requires a gradient
#' (\code{ag_grad}) and is updated by optimizers and saved by \code{ag_save}
#' under its name. Give either its value \code{x} (uploaded in the layout of
#' \code{\link{ag_tensor}}) or its \code{dim} and an initialisation.
#'
#' @param x its initial value, or \code{NULL}.
#' @param dim its shape when \code{x} is \code{NULL}.
#' @param init \code{"zeros"}, \code{"ones"}, \code{"normal"} (mean 0, sd
#'   \code{a}, plus \code{b}), \code{"uniform"} (in \code{[a, b)}) or
#'   \code{"const"} (every element \code{a}); used when \code{x} is \code{NULL}.
#' @param a,b parameters of \code{init}.
#' @param name its unique name (checkpoints use it); \code{NULL} gives
#'   \code{"param.<N>"}.
#' @param dtype \code{"f32"} (default) or \code{"bf16"}.
#' @param ctx a context; the default one if \code{NULL}.
#' @return An \code{ag_tensor}.
#' @examples
#' ag_device("cpu")
#' w <- ag_param(matrix(rnorm(6), 2, 3), name = "w")
#' b <- ag_param(dim = 2, init = "zeros", name = "b")
#' ag_params()
#' @export
ag_param <- function(x = NULL, dim = NULL, init = c("zeros", "ones", "normal", "uniform", "const"),
                     a = 0, b = 0, name = NULL, dtype = "f32", ctx = NULL) {
  ctx <- .rg_ctx(ctx)
  init <- match.arg(init)
  if (is.null(name)) {
    .rg_state$nparam <- (if (is.null(.rg_state$nparam)) 0L else .rg_state$nparam) + 1L
    name <- paste0("param.", .rg_state$nparam)
  }
  if (!is.null(x)) {
    if (!(is.numeric(x) || is.logical(x))) stop("ag_param: x must be numeric")
    dim <- if (is.null(base::dim(x))) length(x) else base::dim(x)
  }
  if (is.null(dim)) stop("ag_param: give x or dim")
  kind <- match(init, c("zeros", "ones", "normal", "uniform", "const")) - 1L
  .Call(C_rgr_param, ctx, as.character(name), as.numeric(dim), .rg_dtype_code(dtype),
        list(kind, a, b), x)
}

#' The parameters of a context
#'
#' @param ctx a context; the default one if \code{NULL}.
#' @return A named list of the parameters in creation order.
#' @examples
#' ag_device("cpu")
#' p <- ag_param(dim = c(2, 2), name = "p")
#' names(ag_params())
#' @export
ag_params <- function(ctx = NULL) .Call(C_rgr_params, .rg_ctx(ctx))

#' Read a tensor into R
#'
#' A barrier: runs everything recorded so far (as one graph), then copies the
#' tensor into an R array in the layout of \code{\link{ag_tensor}}.
#' \code{as.numeric} drops the dimensions; \code{ag_item} reads a tensor of one
#' element. I32 tensors read as integers.
#'
#' @param x an \code{ag_tensor}.
#' @param mode as \code{as.vector}'s.
#' @param ... ignored.
#' @return An array (a number for a tensor of no axes).
#' @examples
#' ag_device("cpu")
#' x <- ag_tensor(array(1:24 + 0, c(2, 3, 4)))
#' identical(as.array(x), array(1:24 + 0, c(2, 3, 4)))
#' @export
as.array.ag_tensor <- function(x, ...) .Call(C_rgr_read, x)

#' @rdname as.array.ag_tensor
#' @export
as.matrix.ag_tensor <- function(x, ...) {
  v <- .Call(C_rgr_read, x)
  d <- base::dim(v)
  if (length(d) == 2L) v else if (length(d) <= 1L) matrix(v, ncol = 1L)
  else stop("as.matrix: the tensor has ", length(d), " axes")
}

#' @rdname as.array.ag_tensor
#' @export
as.double.ag_tensor <- function(x, ...) as.double(.Call(C_rgr_read, x))

#' @rdname as.array.ag_tensor
#' @export
as.vector.ag_tensor <- function(x, mode = "any") as.vector(.Call(C_rgr_read, x), mode)

#' @rdname as.array.ag_tensor
#' @export
ag_item <- function(x) {
  v <- .Call(C_rgr_read, x)
  if (length(v) != 1L) stop("ag_item: the tensor has ", length(v), " elements, not one")
  as.vector(v)
}

#' Overwrite a tensor
#'
#' A barrier (every queued reader of the old value runs first), then uploads
#' \code{value} (same element count, layout of \code{\link{ag_tensor}}) into
#' \code{x}: a parameter, a persistent constant or a pass tensor.
#'
#' @param x an \code{ag_tensor}.
#' @param value an R value of as many elements.
#' @return \code{x}, invisibly.
#' @examples
#' ag_device("cpu")
#' w <- ag_param(dim = 3, name = "w3")
#' ag_write(w, c(1, 2, 3))
#' as.numeric(w)
#' @export
ag_write <- function(x, value) {
  .Call(C_rgr_write, x, value)
  invisible(x)
}

#' Shape, type and state of a tensor
#'
#' None of these is a barrier. \code{dim} gives the shape, \code{length} the
#' element count, \code{ag_dtype} \code{"f32"}, \code{"bf16"} or \code{"i32"},
#' \code{ag_is_pending} whether a read would run queued work first,
#' \code{ag_pool} \code{"pass"} or \code{"persistent"}, \code{ag_is_live}
#' whether the handle is still valid (not stale), \code{ag_name} a parameter's
#' name. \code{print} shows the library's description of the handle: dtype,
#' shape, pool, generation, pending or ready (and the op and label that made
#' it) - without a barrier.
#'
#' @param x,object an \code{ag_tensor}.
#' @param ... ignored.
#' @examples
#' ag_device("cpu")
#' y <- ag_relu(ag_tensor(matrix(-2:3 + 0, 2)))
#' print(y)
#' ag_is_pending(y)
#' dim(y)
#' @name ag_tensor_info
NULL

#' @rdname ag_tensor_info
#' @export
dim.ag_tensor <- function(x) {
  d <- .Call(C_rgr_shape, x)
  if (length(d)) d else NULL
}

#' @rdname ag_tensor_info
#' @export
length.ag_tensor <- function(x) as.integer(prod(.Call(C_rgr_shape, x)))

#' @rdname ag_tensor_info
#' @export
ag_dtype <- function(x) .Call(C_rgr_dtype, x)

#' @rdname ag_tensor_info
#' @export
ag_is_pending <- function(x) .Call(C_rgr_state, x)[2] == 1L

#' @rdname ag_tensor_info
#' @export
ag_is_live <- function(x) .Call(C_rgr_state, x)[1] == 1L

#' @rdname ag_tensor_info
#' @export
ag_pool <- function(x) c("pass", "persistent")[.Call(C_rgr_state, x)[3] + 1L]

#' @rdname ag_tensor_info
#' @export
ag_name <- function(x) .Call(C_rgr_name, x)

#' @rdname ag_tensor_info
#' @export
print.ag_tensor <- function(x, ...) {
  cat("<ag_tensor> ", .Call(C_rgr_describe, x), "\n", sep = "")
  invisible(x)
}

#' @rdname ag_tensor_info
#' @export
format.ag_tensor <- function(x, ...) paste0("<ag_tensor> ", .Call(C_rgr_describe, x))

#' @rdname ag_tensor_info
#' @export
str.ag_tensor <- function(object, ...) cat(format.ag_tensor(object), "\n")

#' Arithmetic on tensors
#'
#' \code{+ - * /} record \code{ag_add}, \code{ag_sub}, \code{ag_mul},
#' \code{ag_div} (broadcasting as the library does: axes aligned from the
#' right); a number on either side is uploaded as a tensor of no axes (a number
#' times a tensor records \code{ag_scale}). Unary \code{-} is \code{ag_neg},
#' \code{x^p} \code{ag_pow}, \code{\%*\%} \code{ag_matmul} (and base R's
#' product for two R matrices), \code{t(x)} \code{ag_transpose},
#' \code{exp}, \code{log}, \code{sqrt}, \code{tanh} the ops of those names, and
#' \code{sum}, \code{mean} and \code{max} the reductions over every axis.
#'
#' @param e1,e2,x,y operands.
#' @param ... ignored.
#' @param na.rm ignored (tensors hold no NA).
#' @return An \code{ag_tensor}.
#' @examples
#' ag_device("cpu")
#' a <- ag_tensor(matrix(1:4 + 0, 2))
#' as.array(2 * a + a %*% a)
#' @name ag_arith
NULL

.rg_operand <- function(v, other) {
  if (inherits(v, "ag_tensor")) return(v)
  if (length(v) == 1L && is.null(base::dim(v)))
    return(ag_tensor(as.numeric(v), dim = integer(0), ctx = .Call(C_rgr_ctx_of_tensor, other)))
  ag_tensor(v, ctx = .Call(C_rgr_ctx_of_tensor, other))
}

#' @rdname ag_arith
#' @export
Ops.ag_tensor <- function(e1, e2) {
  if (!missing(e2) && inherits(e1, "ag_tensor") && inherits(e2, "ag_tensor")) {
    # two tensors: the common case, with nothing to convert
    r <- switch(.Generic, "+" = .Call(C_rgr_op_add, e1, e2),
                "-" = .Call(C_rgr_op_sub, e1, e2), "*" = .Call(C_rgr_op_mul, e1, e2),
                "/" = .Call(C_rgr_op_div, e1, e2), NULL)
    if (!is.null(r)) return(r)
  }
  t1 <- inherits(e1, "ag_tensor")
  if (missing(e2)) {
    return(switch(.Generic, "-" = ag_neg(e1), "+" = e1,
                  stop("resgrad: unary ", .Generic, " is not defined for tensors")))
  }
  t2 <- inherits(e2, "ag_tensor")
  if (.Generic == "*" && (!t1 || !t2)) {
    num <- if (t1) e2 else e1
    if (is.numeric(num) && length(num) == 1L && is.null(base::dim(num)))
      return(ag_scale(if (t1) e1 else e2, num))
  }
  if (.Generic == "^") {
    if (!t1 || t2 || length(e2) != 1L) stop("resgrad: x^p needs a tensor x and a number p")
    return(ag_pow(e1, e2))
  }
  anchor <- if (t1) e1 else e2
  a <- .rg_operand(e1, anchor)
  b <- .rg_operand(e2, anchor)
  switch(.Generic, "+" = ag_add(a, b), "-" = ag_sub(a, b), "*" = ag_mul(a, b),
         "/" = ag_div(a, b),
         stop("resgrad: ", .Generic, " is not defined for tensors (read them with as.array)"))
}

#' @rdname ag_arith
#' @export
`%*%` <- function(x, y) {
  if (inherits(x, "ag_tensor") || inherits(y, "ag_tensor")) ag_matmul(x, y)
  else base::`%*%`(x, y)
}

#' @rdname ag_arith
#' @export
t.ag_tensor <- function(x) ag_transpose(x)

#' @rdname ag_arith
#' @export
Math.ag_tensor <- function(x, ...) {
  switch(.Generic, exp = ag_exp(x), log = ag_log(x), sqrt = ag_sqrt(x), tanh = ag_tanh(x),
         stop("resgrad: ", .Generic, "() is not an op of resgrad"))
}

#' @rdname ag_arith
#' @export
Summary.ag_tensor <- function(..., na.rm = FALSE) {
  args <- list(...)
  if (length(args) != 1L) stop("resgrad: ", .Generic, "() takes one tensor")
  switch(.Generic, sum = ag_sum(args[[1]]), max = ag_max(args[[1]]),
         stop("resgrad: ", .Generic, "() is not an op of resgrad"))
}

#' @rdname ag_arith
#' @export
mean.ag_tensor <- function(x, ...) ag_mean(x)
