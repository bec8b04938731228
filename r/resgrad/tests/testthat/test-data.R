# Token datasets (ag_data_* over rg_data): the batches are the file's windows, a function
# of the seed and the batch number alone; bad files and sizes are conditions naming the
# problem; the dataset's finalizer and its context's close free it once.

llmc_file <- function(tokens) {
  f <- tempfile(fileext = ".bin")
  ag_data_write_llmc(f, tokens)
  f
}

test_that("ag_data_write_llmc writes llm.c's layout", {
  f <- llmc_file(c(1, 258, 65535))
  con <- file(f, "rb")
  header <- readBin(con, "integer", 256, size = 4, endian = "little")
  body <- readBin(con, "integer", 10, size = 2, signed = FALSE, endian = "little")
  close(con)
  expect_equal(header[1:3], c(20240520L, 1L, 3L))
  expect_true(all(header[4:256] == 0L))
  expect_equal(body, c(1L, 258L, 65535L))
  expect_error(ag_data_write_llmc(f, c(1, 65536)), "65536")
})

test_that("sequential batches are consecutive windows, epoch after epoch", {
  open_cpu()
  n <- 1000
  d <- ag_data_open(llmc_file(0:(n - 1)), vocab = n)
  expect_equal(ag_data_info(d)[c("tokens", "next", "epoch", "format")],
               list(tokens = n, `next` = 0, epoch = 0, format = "llmc"))
  B <- 3
  T <- 7
  per_epoch <- floor((n - 1) / (B * T))
  for (k in 0:2) {
    b <- ag_data_batch(d, B, T, random = FALSE)
    idx <- as.array(b$idx)
    expect_equal(ag_dtype(b$idx), "i32")
    expect_equal(dim(idx), c(B, T))
    start <- (k * B + 0:(B - 1)) * T # row r of batch k starts at token (k B + r) T
    expect_equal(idx, outer(start, 0:(T - 1), "+"))
    expect_equal(as.array(b$targets), idx + 1L)
  }
  ag_data_seek(d, per_epoch) # the first batch of the second epoch is batch 0 again
  b <- ag_data_batch(d, B, T, random = FALSE)
  expect_equal(as.array(b$idx), outer((0:(B - 1)) * T, 0:(T - 1), "+"))
  expect_equal(ag_data_info(d)$`next`, per_epoch + 1)
  expect_equal(ag_data_info(d)$epoch, 1)
  ag_data_close(d)
})

test_that("random batches are windows of the file, the same for a seed and a number", {
  open_cpu()
  n <- 500
  f <- llmc_file(0:(n - 1))
  take <- function(prefetch, seed, count = 3) {
    d <- ag_data_open(f, seed = seed, prefetch = prefetch)
    on.exit(ag_data_close(d))
    lapply(seq_len(count), function(i) {
      b <- ag_data_batch(d, 4, 9)
      list(idx = as.array(b$idx), targets = as.array(b$targets))
    })
  }
  a <- take(TRUE, seed = 7)
  for (b in a) {
    expect_true(all(b$idx[, 1] >= 0 & b$idx[, 1] < n - 9))
    expect_equal(b$idx, outer(b$idx[, 1], 0:8, "+"))
    expect_equal(b$targets, b$idx + 1L)
  }
  expect_identical(take(FALSE, seed = 7), a) # prefetch changes no value
  expect_false(identical(take(TRUE, seed = 8), a))
  d <- ag_data_open(f, seed = 7)
  ag_data_seek(d, 2)
  expect_identical(as.array(ag_data_batch(d, 4, 9)$idx), a[[3]]$idx) # resume at batch 2
  ag_data_close(d)
})

test_that("ranks take their rows of the global batch", {
  open_cpu()
  f <- llmc_file(0:299)
  whole <- ag_data_open(f, seed = 2)
  all_rows <- as.array(ag_data_batch(whole, 4, 5)$idx)
  for (r in 0:1) {
    d <- ag_data_open(f, seed = 2, world = 2, rank = r)
    expect_equal(as.array(ag_data_batch(d, 2, 5)$idx), all_rows[r * 2 + 1:2, ])
    ag_data_close(d)
  }
})

test_that("a raw file gives one token per byte", {
  open_cpu()
  f <- tempfile()
  writeBin(charToRaw("hello, world"), f)
  d <- ag_data_open(f)
  expect_equal(ag_data_info(d)$format, "raw")
  expect_equal(ag_data_info(d)$tokens, 12)
  b <- ag_data_batch(d, 1, 11, random = FALSE)
  expect_equal(as.vector(as.array(b$idx)), as.integer(charToRaw("hello, worl")))
  expect_equal(as.vector(as.array(b$targets)), as.integer(charToRaw("ello, world")))
})

test_that("bad files, options and sizes are conditions naming the problem", {
  open_cpu()
  expect_error(ag_data_open(file.path(tempdir(), "no-such-file.bin")), "no-such-file",
               class = "resgrad_io")
  f <- llmc_file(c(1, 2, 550, 3))
  expect_error(ag_data_open(f, vocab = 300), "550", class = "resgrad_io")
  truncated <- tempfile()
  writeBin(readBin(f, "raw", 1030)[1:1029], truncated)
  expect_error(ag_data_open(truncated), class = "resgrad_io")
  expect_error(ag_data_open(f, vocab = -1), class = "resgrad_misuse")
  d <- ag_data_open(f)
  expect_error(ag_data_batch(d, 2, 4), class = "resgrad_misuse") # 2 * 4 + 1 > 4 tokens
  expect_equal(ag_data_info(d)$`next`, 0) # nothing taken
  expect_error(ag_data_seek(d, -1), class = "resgrad_misuse")
  ag_data_close(d)
  expect_error(ag_data_batch(d, 1, 2), "closed", class = "resgrad_error")
  ag_data_close(d) # twice is fine
})

test_that("a dataset outlives nothing: finalized before, with or after its context", {
  f <- llmc_file(0:99)
  for (i in 1:3) {
    local({
      ctx <- ag_device("cpu")
      d <- ag_data_open(f)
      b <- ag_data_batch(d, 2, 3) # the worker is gathering the next batch
      if (i == 2) ag_close(ctx)
      NULL
    })
    ag_device("cpu")
    gc()
  }
  ctx <- ag_device("cpu")
  d <- ag_data_open(f)
  ag_close(ctx)
  expect_error(ag_data_info(d), "closed", class = "resgrad_error")
  rm(d, ctx)
  gc()
  open_cpu()
  expect_equal(as.numeric(ag_tensor(3)), 3)
})

test_that("a GPT learns a repeating text from its batches", {
  open_cpu(seed = 1)
  f <- tempfile()
  writeBin(charToRaw(strrep("abcdefgh", 64)), f)
  d <- ag_data_open(f, seed = 3)
  gpt <- ag_gpt(vocab = 256, block = 8, layers = 1, width = 16, heads = 2)
  opt <- optimizer_adamw(lr = 0.01, weight_decay = 0)
  losses <- numeric(0)
  for (step in 1:40) {
    ag_step_begin()
    b <- ag_data_batch(d, 4, 8)
    loss <- gpt$loss(b$idx, b$targets)
    opt$zero_grad()
    backward(loss)
    opt$step()
    losses[step] <- ag_item(loss)
  }
  expect_gt(losses[1], 5)  # about log(256): chance
  expect_lt(losses[40], 1) # the next letter is learnt
})
