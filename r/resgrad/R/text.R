# text.R - GPT-2's byte-level BPE tokenizer (resgrad_text.h, docs/text.md).

#' GPT-2's tokenizer
#'
#' \code{ag_tokenizer} loads a GPT-2 byte-level BPE tokenizer (the library's
#' \code{rg_bpe_load}): \code{path} is a folder holding \code{vocab.json} and
#' \code{merges.txt}, or holding \code{tokenizer.json}, or a
#' \code{tokenizer.json} file. A tokenizer is host data tied to no context
#' (\code{ag_close} and \code{ag_reset} leave it alone); it is freed when R
#' collects it. A file that is not such a tokenizer signals \code{resgrad_io}
#' naming the file, the place and what to do.
#'
#' \code{ag_encode} gives the token ids of a string as GPT-2 cuts it (special
#' tokens such as \code{"<|endoftext|>"} whole; no token added before or after).
#' \code{ag_decode} gives the text of ids: a string (UTF-8), or with
#' \code{raw = TRUE} its bytes, which is the form for ids that end inside a
#' character. \code{ag_vocab_size} is the number of ids (the largest + 1).
#'
#' @param path a folder or a \code{tokenizer.json} file.
#' @param tok an \code{ag_tokenizer}.
#' @param text one string (converted to UTF-8).
#' @param ids integer token ids (doubles holding whole numbers too).
#' @param raw \code{TRUE}: return the bytes as a raw vector.
#' @return \code{ag_tokenizer}: an \code{ag_tokenizer}; \code{ag_encode}: an
#'   integer vector; \code{ag_decode}: a string or a raw vector;
#'   \code{ag_vocab_size}: an integer.
#' @seealso \code{\link{ag_gpt_generate}}
#' @examples
#' tok <- ag_tokenizer(system.file("extdata", "bpe", package = "resgrad"))
#' ag_vocab_size(tok)
#' ids <- ag_encode(tok, "Hello world!")
#' ids
#' ag_decode(tok, ids)
#' @export
ag_tokenizer <- function(path) {
  if (!is.character(path) || length(path) != 1 || is.na(path))
    .rg_signal("RG_ERR_MISUSE", "ag_tokenizer: path must be one string")
  structure(list(ptr = .Call(C_rgr_bpe_load, enc2native(path.expand(path)))),
            class = "ag_tokenizer")
}

.rg_tok <- function(tok, fn) {
  if (!inherits(tok, "ag_tokenizer"))
    .rg_signal("RG_ERR_MISUSE", paste0(fn, ": tok must be an ag_tokenizer (ag_tokenizer())"))
  tok$ptr
}

#' @rdname ag_tokenizer
#' @export
ag_encode <- function(tok, text) {
  p <- .rg_tok(tok, "ag_encode")
  if (!is.character(text) || length(text) != 1 || is.na(text))
    .rg_signal("RG_ERR_MISUSE", "ag_encode: text must be one string (not NA)")
  .Call(C_rgr_bpe_encode, p, enc2utf8(text))
}

#' @rdname ag_tokenizer
#' @export
ag_decode <- function(tok, ids, raw = FALSE) {
  p <- .rg_tok(tok, "ag_decode")
  if (!is.numeric(ids) || anyNA(ids) || any(ids != trunc(ids)) ||
      any(abs(ids) > .Machine$integer.max))
    .rg_signal("RG_ERR_MISUSE", "ag_decode: ids must be whole token ids without NA")
  .Call(C_rgr_bpe_decode, p, as.integer(ids), isTRUE(raw))
}

#' @rdname ag_tokenizer
#' @export
ag_vocab_size <- function(tok) .Call(C_rgr_bpe_vocab_size, .rg_tok(tok, "ag_vocab_size"))

#' @export
print.ag_tokenizer <- function(x, ...) {
  cat(sprintf("<ag_tokenizer> %d ids\n", ag_vocab_size(x)))
  invisible(x)
}
