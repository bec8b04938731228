# generate.R - text generation with a GPT's KV cache (rg_gpt_generate, docs/generate.md).

#' Generate tokens with a GPT
#'
#' Continues each prompt by up to \code{max_new} tokens with a KV cache on the
#' device (the library's \code{rg_gpt_generate}): one pass over the prompts,
#' then one step per new token. \code{temperature = 0} is greedy (the most
#' likely token, the tokens that the argmax of \code{gpt$forward} over the
#' growing sequence gives); otherwise each token is drawn from
#' \code{softmax(logits / temperature)} cut to the \code{top_k} most likely
#' tokens (0: all) and then to the smallest set of them whose probability
#' reaches \code{top_p} (1: all), as Hugging Face's warpers in that order.
#' The draws are a function of \code{(seed, position, row)}: the same seed gives
#' the same tokens. No dropout is applied. Each step begins with
#' \code{ag_step_begin}: pass-pool tensors of the context become stale.
#'
#' @param gpt an \code{ag_gpt}.
#' @param prompts token ids (from 0): an integer matrix, one prompt per row
#'   (every prompt \code{ncol} tokens long), or a list of integer vectors, one
#'   prompt each, of any lengths from 1 (doubles holding whole numbers are taken
#'   as ids too).
#' @param max_new the number of tokens to generate per prompt, at least 1; the
#'   longest prompt + \code{max_new} - 1 must fit the model's block size.
#' @param temperature 0 (greedy) or a finite number > 0.
#' @param top_k keep only the \code{top_k} most likely tokens; 0: off.
#' @param top_p in (0, 1]: keep the smallest set of most likely tokens whose
#'   probability reaches it; 1: off.
#' @param seed a whole number in [0, 2^53): the draws' seed.
#' @param stop \code{NULL}, or a token id that ends a row: it is written, and
#'   the row's later entries are \code{NA}.
#' @return An integer matrix \code{[length(prompts) or nrow(prompts), max_new]}:
#'   row \code{b} holds prompt \code{b}'s new tokens in order (\code{NA} after
#'   its stop token). Bad arguments signal \code{resgrad_misuse} naming what is
#'   wrong, with nothing generated.
#' @seealso \code{\link{ag_gpt_load_hf}}, \code{\link{ag_tokenizer}}
#' @examples
#' ag_device("cpu", seed = 1)
#' gpt <- ag_gpt_load_hf(system.file("extdata", "hf_gpt2_tiny", "model.safetensors",
#'                                   package = "resgrad"))
#' ag_gpt_generate(gpt, list(c(3, 14, 15, 9, 26), c(7, 1)), max_new = 8)
#' ag_gpt_generate(gpt, matrix(c(7L, 1L), 1), max_new = 4, temperature = 0.8,
#'                 top_k = 10, seed = 42)
#' @export
ag_gpt_generate <- function(gpt, prompts, max_new, temperature = 0, top_k = 0, top_p = 1,
                            seed = 0, stop = NULL) {
  misuse <- function(...) .rg_signal("RG_ERR_MISUSE", paste0("ag_gpt_generate: ", ...))
  if (!inherits(gpt, "ag_gpt")) misuse("gpt must be an ag_gpt (ag_gpt(), ag_gpt_load_hf())")
  if (is.matrix(prompts)) {
    rows <- lapply(seq_len(nrow(prompts)), function(i) prompts[i, ])
  } else if (is.list(prompts)) {
    rows <- prompts
  } else {
    misuse("prompts must be an integer matrix (one prompt per row) or a list of ",
           "integer vectors")
  }
  if (length(rows) == 0) misuse("give at least one prompt")
  for (i in seq_along(rows)) {
    r <- rows[[i]]
    if (!is.numeric(r) || length(r) == 0 || anyNA(r) || any(r != trunc(r)) ||
        any(r < 0) || any(r > .Machine$integer.max))
      misuse("prompt ", i, " must be a non-empty vector of whole token ids >= 0 ",
             "without NA")
  }
  one <- function(x, what) {
    if (!is.numeric(x) || length(x) != 1 || is.na(x))
      misuse(what, " must be one number")
    as.numeric(x)
  }
  whole <- function(x, what) {
    x <- one(x, what)
    if (x != trunc(x)) misuse(what, " must be a whole number, not ", x)
    x
  }
  lens <- vapply(rows, length, 1L)
  width <- max(lens)
  ids <- matrix(0L, width, length(rows)) # column b is prompt b: row-major [batch, width]
  for (i in seq_along(rows)) ids[seq_len(lens[i]), i] <- as.integer(rows[[i]])
  seed <- whole(seed, "seed")
  if (seed < 0 || seed >= 2^53) misuse("seed must be in [0, 2^53), not ", seed)
  stop_id <- if (is.null(stop)) -1 else whole(stop, "stop")
  if (stop_id < -1 || stop_id > .Machine$integer.max) misuse("stop must be a token id")
  cfg <- c(one(temperature, "temperature"), whole(top_k, "top_k"), one(top_p, "top_p"),
           seed, stop_id)
  .Call(C_rgr_gpt_generate, gpt$ptr, ids, as.integer(lens), whole(max_new, "max_new"), cfg)
}
