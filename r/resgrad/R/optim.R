# optim.R - optimizers, gradient clipping and learning-rate schedules.

.rg_optimizer <- function(ptr, kind) {
  o <- new.env(parent = emptyenv())
  o$ptr <- ptr
  o$kind <- kind
  o$step <- function() invisible(.Call(C_rgr_optim_step, ptr))
  o$zero_grad <- function() invisible(.Call(C_rgr_zero_grad, .Call(C_rgr_ctx_of_optim, ptr)))
  o$set_lr <- function(lr) invisible(.Call(C_rgr_optim_set_lr, ptr, lr))
  o$get_lr <- function() .Call(C_rgr_optim_lr, ptr)
  o$steps <- function() .Call(C_rgr_optim_steps, ptr)
  o$free <- function() invisible(.Call(C_rgr_optim_free, ptr))
  class(o) <- c(paste0("ag_optimizer_", kind), "ag_optimizer")
  o
}

#' Optimizers
#'
#' An optimizer over every parameter that exists when it is made; its state
#' (moments, step count, learning rate) lives on the device. The returned object
#' has the methods \code{$step()} (records one fused update of every parameter;
#' not a barrier), \code{$zero_grad()}, \code{$set_lr(lr)}, \code{$get_lr()} and
#' \code{$steps()} (barriers: they read the device) and \code{$free()}. R's
#' garbage collector frees an optimizer nobody refers to.
#' \code{optimizer_adam} is AdamW without weight decay.
#'
#' @param lr learning rate.
#' @param betas AdamW's \code{c(beta1, beta2)}.
#' @param eps AdamW's epsilon.
#' @param weight_decay AdamW: decoupled (\code{w -= lr * wd * w}); SGD: L2 added
#'   to the gradient.
#' @param momentum SGD's momentum (0: plain SGD).
#' @param ctx a context; the default one if \code{NULL}.
#' @return An \code{ag_optimizer}.
#' @seealso \code{\link{ag_clip_grad_norm}}, \code{\link{ag_lr_schedule}}
#' @examples
#' ag_device("cpu")
#' w <- ag_param(c(1, -1), name = "w_opt")
#' opt <- optimizer_sgd(lr = 0.1)
#' for (i in 1:3) {
#'   with_grad_tape(loss <- ag_sum(w * w))
#'   opt$zero_grad()
#'   backward(loss)
#'   opt$step()
#' }
#' as.numeric(w)
#' @export
optimizer_adamw <- function(lr = 1e-3, betas = c(0.9, 0.999), eps = 1e-8,
                            weight_decay = 0.01, ctx = NULL) {
  .rg_optimizer(.Call(C_rgr_optim_adamw, .rg_ctx(ctx), lr, betas[1], betas[2], eps,
                      weight_decay), "adamw")
}

#' @rdname optimizer_adamw
#' @export
optimizer_adam <- function(lr = 1e-3, betas = c(0.9, 0.999), eps = 1e-8, ctx = NULL)
  optimizer_adamw(lr, betas, eps, weight_decay = 0, ctx = ctx)

#' @rdname optimizer_adamw
#' @export
optimizer_sgd <- function(lr = 1e-2, momentum = 0, weight_decay = 0, ctx = NULL) {
  .rg_optimizer(.Call(C_rgr_optim_sgd, .rg_ctx(ctx), lr, momentum, weight_decay), "sgd")
}

#' @export
print.ag_optimizer <- function(x, ...) {
  cat("<ag_optimizer> ", x$kind, "\n", sep = "")
  invisible(x)
}

#' Gradient clipping
#'
#' \code{ag_clip_grad_norm} records the scaling of every parameter gradient by
#' \code{max_norm / (norm + 1e-6)} when that is below 1 (the total L2 norm); a
#' non-finite norm makes the next optimizer step skip its update.
#' \code{ag_clip_grad_value} clamps every gradient element to
#' \code{[-max_abs, max_abs]}. Neither reads anything back.
#'
#' @param max_norm,max_abs the bound.
#' @param ctx a context; the default one if \code{NULL}.
#' @return \code{NULL}, invisibly.
#' @examples
#' ag_device("cpu")
#' w <- ag_param(c(3, 4), name = "w_clip")
#' backward(ag_sum(w * w))
#' ag_clip_grad_norm(1)
#' as.numeric(ag_grad(w))
#' @export
ag_clip_grad_norm <- function(max_norm, ctx = NULL)
  invisible(.Call(C_rgr_clip_grad_norm, .rg_ctx(ctx), max_norm))

#' @rdname ag_clip_grad_norm
#' @export
ag_clip_grad_value <- function(max_abs, ctx = NULL)
  invisible(.Call(C_rgr_clip_grad_value, .rg_ctx(ctx), max_abs))

#' Learning-rate schedules
#'
#' Sets the optimizer's schedule, computed on the device from its step count
#' (no upload per step). With \code{lr} the peak rate and \code{s} the update's
#' index from 0: warm-up for \code{s < warmup} (\code{lr (s + 1) / warmup},
#' ONECYCLE from \code{start_lr}), then \code{"constant"}: \code{lr};
#' \code{"step"}: \code{lr gamma^floor((s - warmup) / step_size)};
#' \code{"cosine"}, \code{"onecycle"}: cosine decay to \code{min_lr} at update
#' \code{total}. \code{kind = NULL} clears it (the last rate stays).
#'
#' @param optimizer an \code{ag_optimizer}.
#' @param kind \code{"constant"}, \code{"cosine"}, \code{"step"},
#'   \code{"onecycle"} or \code{NULL}.
#' @param lr,min_lr,start_lr,gamma,warmup,total,step_size the schedule's fields.
#' @return \code{optimizer}, invisibly.
#' @examples
#' ag_device("cpu")
#' w <- ag_param(1, name = "w_sched")
#' opt <- optimizer_adamw(lr = 1e-3)
#' ag_lr_schedule(opt, "cosine", lr = 1e-3, min_lr = 1e-4, warmup = 10, total = 100)
#' @export
ag_lr_schedule <- function(optimizer, kind = c("constant", "cosine", "step", "onecycle"),
                           lr, min_lr = 0, start_lr = 0, gamma = 1, warmup = 0,
                           total = 0, step_size = 1) {
  if (is.null(kind)) {
    .Call(C_rgr_optim_schedule, optimizer$ptr, NULL, NULL)
    return(invisible(optimizer))
  }
  kind <- match.arg(kind)
  code <- match(kind, c("constant", "cosine", "step", "onecycle")) - 1L
  .Call(C_rgr_optim_schedule, optimizer$ptr, code,
        as.numeric(c(lr, min_lr, start_lr, gamma, warmup, total, step_size)))
  invisible(optimizer)
}
