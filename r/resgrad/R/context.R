# context.R - the device context: opening, the default context, barriers, counters.

.rg_state <- new.env(parent = emptyenv())

#' Choose the device and open a context on it
#'
#' Opens a resgrad context on \code{device} and makes it the default one, which
#' every later call without a tensor argument (\code{ag_tensor},
#' \code{ag_param}, optimizers, layers) uses. A context holds the two pools
#' (pass and persistent), the queue of recorded work and the counters. The
#' previous default context stays open as long as R can reach one of its
#' tensors, optimizers or models (or until \code{ag_close}).
#'
#' @param device \code{"cpu"}, \code{"cuda"} (\code{"gpu"} is a synonym) or
#'   \code{"auto"} (CUDA when a GPU and a CUDA build are present, else the CPU).
#' @param seed seed of parameter initialisation and dropout.
#' @param check \code{TRUE}: check mode, every op runs as it is recorded so that
#'   errors surface at their call (slow; for debugging).
#' @param threads CPU threads for kernels; 0: all cores.
#' @param bf16,tf32 mixed precision (bf16 autocast) and TF32 matrix products
#'   (CUDA).
#' @param check_finite \code{TRUE}: the first NaN or Inf an op makes fails the
#'   barrier, naming the op.
#' @param quiet \code{FALSE}: the library's notices (such as the fall back from
#'   \code{"auto"} to the CPU) are printed through R's \code{REprintf}
#'   (the bundled library; one linked through pkg-config prints them on stderr).
#' @param trace \code{FALSE}; \code{TRUE}: each node a barrier runs is printed
#'   (op, shape, label) as a notice; a file name: a trace of everything the
#'   context does (spans of recording and barriers, each op's time, transfers,
#'   pool counters) is written there as Chrome trace-event JSON, which
#'   \url{https://ui.perfetto.dev} and \code{chrome://tracing} open; the file is
#'   complete after every barrier. The environment variable \code{RG_TRACE}
#'   takes precedence.
#' @param ... further fields of the library's \code{rg_options}:
#'   \code{pass_budget}, \code{persistent_budget} (bytes), \code{max_pass_nodes},
#'   \code{device_index}.
#' @return The context (class \code{ag_context}), invisibly.
#' @seealso \code{\link{ag_stats}}, \code{\link{ag_step_begin}}
#' @examples
#' ctx <- ag_device("cpu")
#' print(ctx)
#' @export
ag_device <- function(device = c("auto", "cpu", "cuda", "gpu"), seed = 0, check = FALSE,
                      threads = 0L, bf16 = FALSE, tf32 = FALSE, check_finite = FALSE,
                      quiet = TRUE, trace = FALSE, ...) {
  device <- match.arg(device)
  if (is.character(trace)) trace <- enc2native(path.expand(trace))
  else trace <- as.integer(trace)
  opts <- list(seed = seed, check = as.integer(check), threads = as.integer(threads),
               bf16 = as.integer(bf16), tf32 = as.integer(tf32),
               check_finite = as.integer(check_finite), quiet = as.integer(quiet),
               trace = trace, ...)
  ctx <- .Call(C_rgr_open, device, opts)
  .rg_state$ctx <- ctx
  invisible(ctx)
}

# The default context, opened on "auto" the first time one is needed (called from C).
.rg_default_ctx <- function() {
  if (is.null(.rg_state$ctx)) ag_device("auto")
  .rg_state$ctx
}

.rg_ctx <- function(ctx = NULL) if (is.null(ctx)) .rg_default_ctx() else ctx

#' The default context
#'
#' @return The context \code{ag_device} opened last (opening one on
#'   \code{"auto"} if there is none).
#' @examples
#' ag_context()
#' @export
ag_context <- function() .rg_default_ctx()

#' @export
print.ag_context <- function(x, ...) {
  i <- .Call(C_rgr_ctx_info, x)
  cat("<ag_context> ", i$name, if (!i$open) " (closed)", "\n", sep = "")
  invisible(x)
}

#' Close a context
#'
#' Runs what is queued, then frees everything the context owns. Its tensors,
#' optimizers and models can no longer be used (their calls signal a
#' \code{resgrad_error}); R's garbage collector closes a context by itself once
#' nothing refers to it, so this is only needed to give device memory back at
#' once.
#'
#' @param ctx a context; the default one if \code{NULL}.
#' @return The status of the last barrier, invisibly.
#' @examples
#' ctx <- ag_device("cpu")
#' ag_close(ctx)
#' @export
ag_close <- function(ctx = NULL) {
  ctx <- .rg_ctx(ctx)
  st <- .Call(C_rgr_close, ctx)
  if (identical(.rg_state$ctx, ctx)) .rg_state$ctx <- NULL
  invisible(st)
}

#' Device name and kind of a context
#'
#' @param ctx a context; the default one if \code{NULL}.
#' @return \code{ag_device_name}: e.g. \code{"cpu (8 threads)"} or
#'   \code{"cuda:0 (NVIDIA H200)"}; \code{ag_device_kind}: \code{"cpu"} or
#'   \code{"cuda"}.
#' @examples
#' ag_device_name()
#' @export
ag_device_name <- function(ctx = NULL) .Call(C_rgr_ctx_info, .rg_ctx(ctx))$name

#' @rdname ag_device_name
#' @export
ag_device_kind <- function(ctx = NULL) .Call(C_rgr_ctx_info, .rg_ctx(ctx))$kind

#' Steps, barriers and modes
#'
#' \code{ag_step_begin} is a barrier, then frees the pass pool and clears the
#' autograd tape: every tensor of the pass made before it is stale (using it
#' signals \code{resgrad_stale_handle}); parameters and persistent tensors stay.
#' Call it at the start of each training step. \code{with_grad_tape(expr)} does
#' it, then evaluates \code{expr}. \code{ag_sync} runs what is queued without
#' reading anything. \code{ag_train_mode(FALSE)} turns dropout off (evaluation).
#' \code{ag_check_finite(TRUE)} makes the first non-finite value a barrier meets
#' an error naming its op.
#'
#' @param expr an expression recording one step.
#' @param on \code{TRUE} or \code{FALSE}.
#' @param ctx a context; the default one if \code{NULL}.
#' @return \code{with_grad_tape}: the value of \code{expr}; the others
#'   \code{NULL}, invisibly.
#' @examples
#' ag_device("cpu")
#' w <- ag_param(matrix(1, 2, 2))
#' loss <- with_grad_tape(ag_sum(w %*% ag_tensor(matrix(1:4 + 0, 2))))
#' backward(loss)
#' as.array(ag_grad(w))
#' @export
ag_step_begin <- function(ctx = NULL) invisible(.Call(C_rgr_step_begin, .rg_ctx(ctx)))

#' @rdname ag_step_begin
#' @export
with_grad_tape <- function(expr, ctx = NULL) {
  ag_step_begin(ctx)
  expr
}

#' @rdname ag_step_begin
#' @export
ag_sync <- function(ctx = NULL) invisible(.Call(C_rgr_sync, .rg_ctx(ctx)))

#' @rdname ag_step_begin
#' @export
ag_train_mode <- function(on = TRUE, ctx = NULL)
  invisible(.Call(C_rgr_set_training, .rg_ctx(ctx), on))

#' @rdname ag_step_begin
#' @export
ag_check_finite <- function(on = TRUE, ctx = NULL)
  invisible(.Call(C_rgr_set_check_finite, .rg_ctx(ctx), on))

#' Pools: reset, generation
#'
#' \code{ag_reset("pass")} runs what is queued, then frees the pass pool (as
#' \code{ag_step_begin}); \code{ag_reset("persistent")} frees the persistent
#' pool: every parameter, persistent tensor, gradient and optimizer state of the
#' context, whose handles are stale afterwards (optimizers made before it hold
#' no parameters: make new ones). \code{ag_generation} is a pool's generation,
#' which starts at 1 and grows by one at each reset; a handle made in an older
#' generation is stale.
#'
#' @param pool \code{"pass"} or \code{"persistent"}.
#' @param ctx a context; the default one if \code{NULL}.
#' @return \code{ag_generation}: a number; \code{ag_reset}: \code{NULL},
#'   invisibly.
#' @examples
#' ag_device("cpu")
#' x <- ag_tensor(1:3 + 0)
#' ag_generation("pass")
#' ag_reset("pass")
#' ag_generation("pass")
#' ag_is_live(x)
#' @export
ag_reset <- function(pool = c("pass", "persistent"), ctx = NULL)
  invisible(.Call(C_rgr_reset, .rg_ctx(ctx), .rg_pool_code(pool)))

#' @rdname ag_reset
#' @export
ag_generation <- function(pool = c("pass", "persistent"), ctx = NULL)
  .Call(C_rgr_generation, .rg_ctx(ctx), .rg_pool_code(pool))

.rg_pool_code <- function(pool) match(match.arg(pool, c("pass", "persistent")),
                                      c("pass", "persistent")) - 1L

#' Memory of the device
#'
#' The bytes of the context's device that are available now and in total: a
#' GPU's free and total memory, or the CPU's available and total memory (the
#' available bounded by the process's memory limits where they are set). Not a
#' barrier.
#'
#' @param ctx a context; the default one if \code{NULL}.
#' @return \code{c(available = , total = )}, in bytes.
#' @examples
#' ag_device("cpu")
#' ag_device_memory()
#' @export
ag_device_memory <- function(ctx = NULL) .Call(C_rgr_device_memory, .rg_ctx(ctx))

#' Counters of a context
#'
#' \code{ag_stats} returns every counter of the library's \code{rg_stats}:
#' transfers up (host to device) and down, recorded and executed nodes, kernel
#' launches, drains (barriers that ran work), CUDA graph captures and replays,
#' and pool bytes. \code{ag_xfer_count}, \code{ag_launch_count} and
#' \code{ag_sync_count} are the ones most often watched: a training step
#' should make one transfer down (the loss) and one drain. None of them is a
#' barrier.
#'
#' @param ctx a context; the default one if \code{NULL}.
#' @return \code{ag_stats}: a named numeric vector; \code{ag_xfer_count}:
#'   \code{c(up = , down = )}; the others a number.
#' @examples
#' ag_device("cpu")
#' ag_stats_reset()
#' as.numeric(ag_sum(ag_tensor(1:4 + 0)))
#' ag_xfer_count()
#' @export
ag_stats <- function(ctx = NULL) .Call(C_rgr_stats, .rg_ctx(ctx))

#' @rdname ag_stats
#' @export
ag_stats_reset <- function(ctx = NULL) invisible(.Call(C_rgr_stats_reset, .rg_ctx(ctx)))

#' @rdname ag_stats
#' @export
ag_xfer_count <- function(ctx = NULL) {
  s <- ag_stats(ctx)
  c(up = s[["up_count"]], down = s[["down_count"]])
}

#' @rdname ag_stats
#' @export
ag_launch_count <- function(ctx = NULL) ag_stats(ctx)[["launches"]]

#' @rdname ag_stats
#' @export
ag_sync_count <- function(ctx = NULL) ag_stats(ctx)[["drains"]]

#' The library's version
#'
#' @return The version of the resgrad C library the package runs on, e.g.
#'   \code{"0.1.0"}.
#' @examples
#' ag_version()
#' @export
ag_version <- function() .Call(C_rgr_version)
