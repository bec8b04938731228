# zzz.R - the package's documentation entry and its shared library.

#' resgrad: device-resident automatic differentiation from R
#'
#' The R interface of the resgrad C library. Ops record and return pending
#' tensors at once; the first read (\code{as.array}, \code{as.numeric},
#' \code{ag_item}) is a barrier that runs everything recorded as one graph.
#' Start with \code{\link{ag_device}}, \code{\link{ag_tensor}},
#' \code{\link{ag_param}}, the ops (\code{ag_add} ... \code{ag_detach}, one per
#' op of the library), \code{\link{backward}} and the optimizers, and see
#' \code{vignette("resgrad")}.
#'
#' @keywords internal
#' @useDynLib resgrad, .registration = TRUE, .fixes = "C_"
"_PACKAGE"
