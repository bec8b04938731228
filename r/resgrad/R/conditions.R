# conditions.R - the library's errors as R conditions (signalled from C by .rg_signal).

.rg_condition_class <- function(status) {
  switch(status,
         RG_ERR_STALE = "resgrad_stale_handle",
         RG_ERR_OOM = "resgrad_oom",
         RG_ERR_MISUSE = "resgrad_misuse",
         RG_ERR_DEVICE = "resgrad_device",
         RG_ERR_NONFINITE = "resgrad_nonfinite",
         RG_ERR_IO = "resgrad_io",
         RG_ERR_UNSUPPORTED = "resgrad_unsupported",
         RG_ERR_FAILED = "resgrad_failed",
         character())
}

# Called from C (errors.c): stops with a condition of classes
# c(<the status's class>, "resgrad_error", "error", "condition").
.rg_signal <- function(status, message) {
  cond <- structure(
    class = c(.rg_condition_class(status), "resgrad_error", "error", "condition"),
    list(message = message, call = NULL, status = status))
  stop(cond)
}

#' Conditions signalled by resgrad
#'
#' Every error of the library reaches R as a condition of class
#' \code{resgrad_error} (and \code{error}), carrying the library's message (which
#' names the call, the label in force and what to do) and its status
#' (\code{cond$status}, e.g. \code{"RG_ERR_STALE"}). A more precise class comes
#' first: \code{resgrad_stale_handle} (a tensor of a pass that
#' \code{ag_step_begin} ended), \code{resgrad_oom} (a pool budget or the device
#' ran out), \code{resgrad_misuse}, \code{resgrad_device},
#' \code{resgrad_nonfinite}, \code{resgrad_io}, \code{resgrad_unsupported},
#' \code{resgrad_failed}. Catch them with \code{tryCatch}; after any of them the
#' context keeps working.
#'
#' @name resgrad_conditions
#' @aliases resgrad_error resgrad_stale_handle resgrad_oom
#' @examples
#' ag_device("cpu")
#' x <- ag_tensor(1:3 + 0)
#' ag_step_begin()
#' tryCatch(as.array(x), resgrad_stale_handle = function(e) conditionMessage(e))
NULL
