# ag_gpt_generate (rg_gpt_generate: the KV cache's rg_kv_write, rg_attention_cached and
# rg_sample) on the tiny GPT-2 that transformers made: greedy tokens equal to
# transformers' greedy_0 and greedy_1 (tools/hf_gpt2_fixture.py made them from the prompts
# below, its GREEDY_PROMPTS, 8 new tokens each), seeded sampling that repeats, and
# arguments refused as resgrad_misuse with nothing generated.

hf <- function(name) system.file("extdata", "hf_gpt2_tiny", name, package = "resgrad")
PROMPTS <- list(c(3L, 14L, 15L, 9L, 26L), c(7L, 1L))

test_that("greedy generation gives transformers' tokens", {
  open_cpu()
  ex <- read_safetensors(hf("expected.safetensors"))
  gpt <- ag_gpt_load_hf(hf("model.safetensors"))
  want <- rbind(as.integer(ex$greedy_0), as.integer(ex$greedy_1))
  expect_equal(dim(want), c(2L, 8L))
  # Both prompts in one batch (of different lengths) and each alone.
  got <- ag_gpt_generate(gpt, PROMPTS, max_new = 8)
  expect_true(is.integer(got))
  expect_identical(got, want)
  for (i in 1:2)
    expect_identical(ag_gpt_generate(gpt, matrix(PROMPTS[[i]], 1), 8), want[i, , drop = FALSE])
  # A greedy token is the argmax of the forward pass's logits at the prompt's end.
  ag_step_begin()
  logits <- as.array(gpt$forward(matrix(PROMPTS[[1]], 1)))
  expect_equal(which.max(logits[1, 5, ]) - 1L, want[1, 1])
})

test_that("sampling with a seed repeats, and the seed matters", {
  open_cpu()
  gpt <- ag_gpt_load_hf(hf("model.safetensors"))
  draw <- function(seed, ...) ag_gpt_generate(gpt, PROMPTS, 10, temperature = 1.5,
                                              seed = seed, ...)
  a <- draw(7)
  expect_identical(draw(7), a)
  expect_equal(dim(a), c(2L, 10L))
  expect_true(all(a >= 0 & a < 50))
  seeds <- lapply(8:12, draw)
  expect_false(all(vapply(seeds, identical, TRUE, a)))
  # top_k = 1 keeps only the most likely token: greedy whatever the temperature.
  expect_identical(draw(3, top_k = 1), ag_gpt_generate(gpt, PROMPTS, 10))
  # A stop token ends its row with NA after it.
  g <- ag_gpt_generate(gpt, PROMPTS, 8)
  s <- ag_gpt_generate(gpt, PROMPTS, 8, stop = g[1, 3])
  expect_identical(s[1, 1:3], g[1, 1:3])
  expect_true(all(is.na(s[1, 4:8])))
})

test_that("bad arguments are resgrad_misuse and generate nothing", {
  open_cpu()
  gpt <- ag_gpt_load_hf(hf("model.safetensors"))
  bad <- function(..., msg = NULL)
    expect_error(ag_gpt_generate(gpt, ...), msg, class = "resgrad_misuse")
  bad(PROMPTS, 0)
  bad(PROMPTS, 16, msg = "block") # 5 + 16 - 1 > 16
  bad(list(c(3, 60)), 2, msg = "vocab|outside")
  bad(list(c(-1, 2)), 2, msg = "prompt 1")
  bad(list(integer()), 2, msg = "prompt 1")
  bad(list(), 2, msg = "at least one")
  bad("hello", 2, msg = "prompts")
  bad(PROMPTS, 2, temperature = -1, msg = "temperature")
  bad(PROMPTS, 2, temperature = 1, top_p = 0, msg = "top_p")
  bad(PROMPTS, 2, seed = -1, msg = "seed")
  bad(PROMPTS, 2.5, msg = "max_new")
  expect_error(ag_gpt_generate(list(), PROMPTS, 2), "ag_gpt", class = "resgrad_error")
  # The context still works afterwards.
  expect_identical(dim(ag_gpt_generate(gpt, PROMPTS, 2)), c(2L, 2L))
})
