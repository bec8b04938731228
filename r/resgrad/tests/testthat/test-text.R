# ag_tokenizer, ag_encode, ag_decode, ag_vocab_size on the repository's miniature GPT-2
# tokenizer (tests/data/bpe's vocab.json and merges.txt, installed as extdata/bpe) against
# its expected.json: the ids Hugging Face's GPT-2 tokenizer gives for each text.

bpe <- function(name = NULL) {
  d <- system.file("extdata", "bpe", package = "resgrad")
  if (is.null(name)) d else file.path(d, name)
}

test_that("the tokenizer loads and round-trips", {
  tok <- ag_tokenizer(bpe())
  expect_s3_class(tok, "ag_tokenizer")
  expect_true(ag_vocab_size(tok) > 956)
  # From expected.json: "a<|endoftext|>b" and "' s".
  expect_identical(ag_encode(tok, "a<|endoftext|>b"), c(64L, 956L, 65L))
  expect_identical(ag_encode(tok, "' s"), c(6L, 289L))
  expect_identical(ag_encode(tok, ""), integer())
  expect_identical(ag_decode(tok, c(64, 956, 65)), "a<|endoftext|>b")
  expect_identical(ag_decode(tok, integer()), "")
  # Three ids of one emoji (U+1F600, in expected.json): the first alone ends inside it.
  expect_identical(ag_decode(tok, 257L, raw = TRUE), as.raw(c(0xf0, 0x9f)))
  expect_identical(ag_decode(tok, c(257L, 246L, 222L)), enc2utf8("\U0001F600"))
})

test_that("every text of expected.json gives its ids and decodes back", {
  skip_if_not_installed("jsonlite")
  tok <- ag_tokenizer(bpe())
  cases <- jsonlite::fromJSON(bpe("expected.json"), simplifyVector = FALSE)
  expect_gt(length(cases), 40)
  for (c in cases) {
    want <- as.integer(unlist(c$ids))
    expect_identical(ag_encode(tok, c$text), want, info = c$text)
    expect_identical(ag_decode(tok, want), enc2utf8(c$text), info = c$text)
  }
})

test_that("errors name the problem", {
  expect_error(ag_tokenizer(tempfile()), class = "resgrad_io")
  tok <- ag_tokenizer(bpe())
  expect_error(ag_decode(tok, c(1, 1e6)), "element 2", class = "resgrad_misuse")
  expect_error(ag_decode(tok, -1), "vocabulary", class = "resgrad_misuse")
  expect_error(ag_decode(tok, NA), class = "resgrad_misuse")
  expect_error(ag_encode(tok, c("a", "b")), "one string", class = "resgrad_misuse")
  expect_error(ag_encode(list(), "a"), "ag_tokenizer", class = "resgrad_error")
  expect_identical(ag_encode(tok, "a"), 64L) # still usable
})
