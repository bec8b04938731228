# checkpoint.R - safetensors checkpoints of every parameter (and an optimizer's state).

#' Save and load checkpoints
#'
#' \code{ag_save} is a barrier, then writes every parameter of the context (and
#' the optimizer's state when given) as safetensors, atomically; metadata
#' strings go into its \code{__metadata__}. \code{ag_load} validates the whole
#' file before changing anything, then restores the parameters (by name), the
#' optimizer's state and the metadata. \code{ag_meta} reads one metadata value.
#'
#' @param path the file.
#' @param optimizer an \code{ag_optimizer}, or \code{NULL}.
#' @param metadata a named list (or character vector) of strings to save.
#' @param key a metadata key.
#' @param ctx a context; the default one if \code{NULL}.
#' @return \code{path} (\code{ag_save}, \code{ag_load}), invisibly;
#'   \code{ag_meta}: the value or \code{NULL}.
#' @examples
#' ag_device("cpu")
#' w <- ag_param(c(1, 2), name = "w_ckpt")
#' f <- tempfile(fileext = ".safetensors")
#' ag_save(f, metadata = list(note = "example"))
#' ag_write(w, c(0, 0))
#' ag_load(f)
#' as.numeric(w)
#' ag_meta("note")
#' @export
ag_save <- function(path, optimizer = NULL, metadata = NULL, ctx = NULL) {
  ctx <- .rg_ctx(ctx)
  for (k in names(metadata)) .Call(C_rgr_meta_set, ctx, k, as.character(metadata[[k]]))
  .Call(C_rgr_save, ctx, path.expand(path), if (is.null(optimizer)) NULL else optimizer$ptr)
  invisible(path)
}

#' @rdname ag_save
#' @export
ag_load <- function(path, optimizer = NULL, ctx = NULL) {
  .Call(C_rgr_load, .rg_ctx(ctx), path.expand(path),
        if (is.null(optimizer)) NULL else optimizer$ptr)
  invisible(path)
}

#' @rdname ag_save
#' @export
ag_meta <- function(key, ctx = NULL) .Call(C_rgr_meta_get, .rg_ctx(ctx), key)
