# data.R - token datasets: a token file mapped and checked once, and the batches of a
# language model cut from it (the library's rg_data; docs/data.md).

.rg_data_formats <- c(auto = 0L, raw = 1L, llmc = 2L)

#' Token datasets
#'
#' A file of tokens, memory-mapped and checked once by \code{ag_data_open}, and
#' the batches of a language model cut from it: rows of \code{block + 1}
#' consecutive tokens, the first \code{block} the input and the last
#' \code{block} the targets (the next token of each input position).
#'
#' Formats: \code{"llmc"}, the token files of llm.c (a header of 256
#' little-endian int32: magic 20240520, version 1, the token count; then the
#' tokens as little-endian uint16), which \code{ag_data_write_llmc} writes;
#' \code{"raw"}, any file, one token per byte (vocabulary 256); \code{"auto"},
#' llm.c's when the file starts with its magic, else raw. With \code{vocab}
#' set, every token is checked against it at open.
#'
#' \code{ag_data_batch(data, batch, block)} records the upload of the next batch
#' as two pass tensors, \code{idx} and \code{targets}, I32
#' \code{[batch, block]} (R matrices of \code{batch} rows when read), token ids
#' counted from 0 as \code{ag_gpt} takes them. It is not a barrier. Batch
#' \code{n} (0, 1, 2, ...) is a function of the file, \code{seed}, \code{n},
#' the sizes and the mode alone: \code{random = TRUE} starts each row at a
#' position drawn uniformly by the seed; \code{random = FALSE} takes
#' consecutive windows advancing by \code{block}, epoch after epoch.
#' \code{ag_data_seek(data, n)} makes batch \code{n} the next one (a resumed
#' run seeks to its step), and with \code{prefetch = TRUE} a worker thread
#' gathers batch \code{n + 1} while step \code{n} runs, which changes no value.
#' With \code{world} ranks (data-parallel), rank \code{rank} takes its
#' \code{batch} rows of each global batch of \code{world * batch} rows.
#'
#' \code{ag_data_info} returns the tokens in the file, the number of the next
#' batch, the epochs taken so far and the format the file was read as.
#' \code{ag_data_close} unmaps the file (tensors already recorded keep their
#' values); the garbage collector and \code{ag_close} of its context do it too.
#'
#' @param path the token file.
#' @param format \code{"auto"}, \code{"llmc"} or \code{"raw"}.
#' @param vocab every token must be below it (0: the format's bound, 65536 or
#'   256, which needs no check).
#' @param seed the seed of random batches.
#' @param world,rank this process is rank \code{rank} of \code{world}.
#' @param prefetch \code{TRUE}: a worker thread gathers the next batch ahead.
#' @param ctx a context; the default one if \code{NULL}.
#' @param data a dataset made by \code{ag_data_open}.
#' @param batch,block rows of the batch, and tokens a row (the sequence length);
#'   \code{ag_data_seek}'s \code{batch}: the number of the next batch.
#' @param random \code{TRUE}: rows at random positions; \code{FALSE}:
#'   sequential windows.
#' @param tokens integers in \code{[0, 65536)}.
#' @return \code{ag_data_open}: an \code{ag_data}; \code{ag_data_batch}: a list
#'   of two \code{ag_tensor}s, \code{idx} and \code{targets};
#'   \code{ag_data_info}: a list (\code{tokens}, \code{next}, \code{epoch},
#'   \code{format}); \code{ag_data_write_llmc}: \code{path}, invisibly; the
#'   others \code{NULL}, invisibly.
#' @seealso \code{\link{ag_gpt}}
#' @examples
#' ag_device("cpu")
#' f <- tempfile(fileext = ".bin")
#' ag_data_write_llmc(f, rep(0:9, 20))
#' data <- ag_data_open(f, vocab = 10)
#' ag_data_info(data)
#' b <- ag_data_batch(data, batch = 2, block = 5, random = FALSE)
#' as.array(b$idx)
#' as.array(b$targets)
#' ag_data_close(data)
#' @export
ag_data_open <- function(path, format = c("auto", "llmc", "raw"), vocab = 0, seed = 0,
                         world = 1, rank = 0, prefetch = TRUE, ctx = NULL) {
  format <- match.arg(format)
  opts <- as.numeric(c(.rg_data_formats[[format]], vocab, seed, world, rank,
                       isTRUE(prefetch)))
  .Call(C_rgr_data_open, .rg_ctx(ctx), enc2native(path.expand(path)), opts)
}

#' @rdname ag_data_open
#' @export
ag_data_batch <- function(data, batch, block, random = TRUE)
  .Call(C_rgr_data_batch, data, batch, block, random)

#' @rdname ag_data_open
#' @export
ag_data_seek <- function(data, batch) invisible(.Call(C_rgr_data_seek, data, batch))

#' @rdname ag_data_open
#' @export
ag_data_info <- function(data) .Call(C_rgr_data_info, data)

#' @rdname ag_data_open
#' @export
ag_data_close <- function(data) invisible(.Call(C_rgr_data_close, data))

#' @rdname ag_data_open
#' @export
ag_data_write_llmc <- function(path, tokens) {
  tokens <- as.numeric(tokens)
  if (anyNA(tokens) || any(tokens != round(tokens)) || any(tokens < 0 | tokens > 65535))
    stop("ag_data_write_llmc: llm.c token files hold whole numbers in [0, 65536)")
  con <- file(path.expand(path), "wb")
  on.exit(close(con))
  writeBin(c(20240520L, 1L, length(tokens), integer(253)), con, size = 4L,
           endian = "little")
  # uint16 little-endian: two bytes a token, low byte first
  bytes <- rbind(tokens %% 256, tokens %/% 256)
  writeBin(as.raw(bytes), con)
  invisible(path)
}

#' @export
print.ag_data <- function(x, ...) {
  i <- tryCatch(ag_data_info(x), resgrad_error = function(e) NULL)
  if (is.null(i)) cat("<ag_data> (closed)\n")
  else cat(sprintf("<ag_data> %s, %.0f tokens, next batch %.0f, epoch %.0f\n", i$format,
                   i$tokens, i$`next`, i$epoch))
  invisible(x)
}
