# Handle inspection (print, ag_dump_handles), labels, trace files, pool resets and
# generations, the device's memory: none of the inspections is a barrier.

test_that("ag_dump_handles lists every tensor without running anything", {
  open_cpu()
  w <- ag_param(c(1, 2), name = "w_list")
  y <- ag_relu(ag_tensor(c(-1, 3)))
  drains <- ag_sync_count()
  pass <- ag_dump_handles("pass")
  persistent <- ag_dump_handles("persistent")
  both <- ag_dump_handles()
  expect_equal(ag_sync_count(), drains)
  expect_true(ag_is_pending(y))
  expect_equal(both, c(pass, persistent))
  expect_length(pass, 2)
  expect_match(pass[2], "^F32 \\[2\\] pass gen 1 slot 2, pending: rg_relu")
  expect_true(any(grepl("w_list", persistent)))
  expect_equal(format(y), paste0("<ag_tensor> ", pass[2]))
  ag_step_begin()
  expect_length(ag_dump_handles("pass"), 0)
  expect_match(format(y), "stale")
  expect_error(ag_dump_handles("nowhere"))
})

test_that("labels name recorded work in descriptions and errors, and nest", {
  open_cpu()
  y <- ag_with_label("block0", ag_with_label("mlp", ag_relu(ag_tensor(c(-1, 2)))))
  expect_match(format(y), "rg_relu \\[block0/mlp\\]")
  z <- ag_exp(ag_tensor(1)) # popped: no label
  expect_match(format(z), "pending: rg_exp$")
  err <- tryCatch(ag_with_label("head", ag_matmul(matrix(1, 2, 3), matrix(1, 2, 3))),
                  resgrad_error = function(e) conditionMessage(e))
  expect_match(err, "head")
  expect_match(format(ag_exp(ag_tensor(1))), "pending: rg_exp$") # popped after the error
})

test_that("trace = <file> writes a Chrome trace of the run", {
  f <- tempfile(fileext = ".json")
  ctx <- ag_device("cpu", trace = f)
  v <- as.numeric(ag_sum(ag_tensor(c(1, 2, 3))))
  ag_close(ctx)
  expect_equal(v, 6)
  text <- paste(readLines(f, warn = FALSE), collapse = "\n")
  expect_match(text, '"traceEvents"')
  expect_match(text, '"drain"')
  expect_match(text, "sum")
  if (requireNamespace("jsonlite", quietly = TRUE)) {
    events <- jsonlite::fromJSON(f)$traceEvents
    expect_true("drain" %in% events$name)
  }
  expect_error(ag_device("cpu", trace = file.path(tempfile(), "no", "dir.json")),
               class = "resgrad_io")
  open_cpu()
})

test_that("ag_reset frees a pool and bumps its generation", {
  open_cpu()
  x <- ag_tensor(c(1, 2))
  w <- ag_param(c(3, 4), name = "w_reset")
  g_pass <- ag_generation("pass")
  g_pers <- ag_generation("persistent")
  ag_reset("pass")
  expect_equal(ag_generation("pass"), g_pass + 1)
  expect_error(as.numeric(x), class = "resgrad_stale_handle")
  expect_equal(as.numeric(w), c(3, 4))
  ag_reset("persistent")
  expect_equal(ag_generation("persistent"), g_pers + 1)
  expect_error(as.numeric(w), class = "resgrad_stale_handle")
  expect_length(ag_params(), 0)
})

test_that("ag_device_memory reports the device's bytes", {
  open_cpu()
  m <- ag_device_memory()
  expect_named(m, c("available", "total"))
  expect_true(m[["total"]] > 0 && m[["available"]] > 0 && m[["available"]] <= m[["total"]])
})
