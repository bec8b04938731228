# ag_gpt_load_hf and ag_gpt_save_hf on the tiny GPT-2 that Hugging Face's transformers
# made (the repository's tests/data/hf_gpt2_tiny, installed as extdata): its logits
# within 1e-4 of transformers', an export that loads back to the same parameters, and
# errors that name the problem.

fixture <- function(name) system.file("extdata", "hf_gpt2_tiny", name, package = "resgrad")
expected <- function() read_safetensors(fixture("expected.safetensors"))

logits_error <- function(gpt, ex) {
  ag_step_begin()
  max(abs(as.array(gpt$forward(ex$tokens)) - ex$logits))
}

test_that("the fixture is installed", {
  expect_true(file.exists(fixture("model.safetensors")))
  expect_true(file.exists(fixture("config.json")))
})

test_that("ag_gpt_load_hf gives transformers' logits", {
  open_cpu()
  ex <- expected()
  expect_equal(dim(ex$logits), c(2L, 16L, 50L))
  gpt <- ag_gpt_load_hf(fixture("model.safetensors"))
  expect_equal(gpt$config, list(vocab = 50, block = 16, layers = 2, width = 24, heads = 3,
                                dropout = 0, checkpoint = FALSE))
  expect_equal(gpt$param_count(), 16080)
  expect_lte(logits_error(gpt, ex), 1e-4)
})

test_that("ag_gpt_save_hf writes a checkpoint that loads back to the same model", {
  open_cpu()
  ex <- expected()
  gpt <- ag_gpt_load_hf(fixture("model.safetensors"), heads = 3, prefix = "m.")
  expect_true("m.h.1.attn.c_attn.weight" %in% names(ag_params()))
  dir <- tempfile()
  dir.create(dir)
  out <- file.path(dir, "model.safetensors")
  ag_gpt_save_hf(gpt, out)
  config <- readLines(file.path(dir, "config.json"))
  expect_true(any(grepl('"n_head": *3', config)))
  expect_true(any(grepl('"model_type": *"gpt2"', config)))
  mine <- read_safetensors(out)
  theirs <- read_safetensors(fixture("model.safetensors"))
  expect_setequal(names(mine), names(theirs))
  for (n in names(theirs)) expect_identical(mine[[n]], theirs[[n]], info = n)
  again <- ag_gpt_load_hf(out, prefix = "again.") # heads from the config.json written
  expect_lte(logits_error(again, ex), 1e-4)
})

test_that("a model made in R exports and loads back", {
  open_cpu(seed = 2)
  gpt <- ag_gpt(vocab = 20, block = 8, layers = 1, width = 16, heads = 4, prefix = "a.")
  dir <- tempfile()
  dir.create(dir)
  ag_gpt_save_hf(gpt, file.path(dir, "model.safetensors"))
  back <- ag_gpt_load_hf(file.path(dir, "model.safetensors"), prefix = "b.")
  expect_equal(back$config$heads, 4)
  idx <- matrix(c(1:8, 8:1), 2, byrow = TRUE)
  ag_step_begin()
  expect_equal(as.array(back$forward(idx)), as.array(gpt$forward(idx)), tolerance = 1e-6)
})

test_that("errors name the problem and make no parameters", {
  open_cpu()
  dir <- tempfile()
  dir.create(dir)
  file.copy(fixture("model.safetensors"), dir) # no config.json beside it
  lone <- file.path(dir, "model.safetensors")
  expect_error(ag_gpt_load_hf(lone), "config.json", class = "resgrad_io")
  expect_error(ag_gpt_load_hf(lone, heads = 5), "does not divide", class = "resgrad_misuse")
  expect_error(ag_gpt_load_hf(file.path(dir, "none.safetensors"), heads = 3),
               "cannot open", class = "resgrad_io")
  ckpt <- file.path(dir, "resgrad.safetensors")
  w <- ag_param(c(1, 2), name = "w_hf")
  ag_save(ckpt)
  expect_error(ag_gpt_load_hf(ckpt, heads = 1), class = "resgrad_io") # not a GPT-2
  expect_equal(names(ag_params()), "w_hf")
  expect_error(ag_gpt_save_hf(list(), file.path(dir, "x.safetensors")), "ag_gpt")
})
