# External pointers and R's garbage collector: a context outlives what refers to it,
# finalizers never free a value still queued, never free twice, never crash.

test_that("a context stays open while its tensors are reachable", {
  ctx <- ag_device("cpu")
  x <- ag_relu(ag_tensor(c(-1, 2))) # queued, not run
  ag_device("cpu")                   # a new default context
  rm(ctx)
  gc()
  expect_equal(as.numeric(x), c(0, 2)) # the old context ran the queued op
})

test_that("releasing tensors frees nothing a queued graph needs", {
  open_cpu()
  keep <- local({
    a <- ag_tensor(c(1, 2, 3))
    b <- a * 2
    rm(a)
    ag_sum(b)
  })
  gc()
  expect_equal(as.numeric(keep), 12)
})

test_that("optimizers and models are finalized in any order with their context", {
  for (i in 1:3) {
    local({
      ctx <- ag_device("cpu")
      w <- ag_param(c(1, 2), name = "w")
      opt <- optimizer_adamw()
      g <- ag_gpt(vocab = 8, block = 4, layers = 1, width = 8, heads = 2, prefix = "g.")
      NULL
    })
    ag_device("cpu") # the default context no longer refers to the one above
    gc()
  }
  expect_equal(as.numeric(ag_tensor(1) + 1), 2)
})

test_that("a closed context signals, its optimizer's finalizer does not free twice", {
  ctx <- ag_device("cpu")
  w <- ag_param(c(1, 2), name = "w")
  opt <- optimizer_sgd()
  ag_close(ctx)
  expect_error(as.numeric(w), "closed", class = "resgrad_error")
  expect_error(opt$step(), "closed", class = "resgrad_error")
  rm(opt, w, ctx)
  gc()
  expect_equal(as.numeric(ag_tensor(2)), 2)
})

test_that("a short training loop survives gctorture", {
  open_cpu(seed = 3)
  w <- ag_param(matrix(rnorm(6), 3, 2), name = "w")
  opt <- optimizer_sgd(lr = 0.1)
  x <- matrix(rnorm(8), 4, 2)
  gctorture(TRUE)
  on.exit(gctorture(FALSE))
  for (i in 1:2) {
    ag_step_begin()
    loss <- ag_mean(ag_linear(x, w)^2)
    opt$zero_grad()
    backward(loss)
    opt$step()
    v <- as.numeric(loss)
  }
  gctorture(FALSE)
  expect_true(is.finite(v))
})

test_that("datasets, handle listings and models survive gctorture", {
  open_cpu()
  f <- tempfile(fileext = ".bin")
  ag_data_write_llmc(f, rep(0:15, 8))
  gctorture(TRUE)
  on.exit(gctorture(FALSE))
  d <- ag_data_open(f)
  b <- ag_data_batch(d, 2, 4)
  info <- ag_data_info(d)
  lines <- ag_dump_handles()
  gpt <- ag_gpt(vocab = 16, block = 4, layers = 1, width = 8, heads = 2, prefix = "gt.")
  loss <- gpt$loss(b$idx, b$targets)
  m <- ag_device_memory()
  rm(d)
  gctorture(FALSE)
  expect_equal(info$`next`, 1)
  expect_length(lines, 2)
  expect_equal(gpt$config$width, 8)
  expect_true(is.finite(ag_item(loss)))
})
