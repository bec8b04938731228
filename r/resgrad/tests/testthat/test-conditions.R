# The library's errors are R conditions with classes, never crashes.

test_that("a stale handle is a resgrad_stale_handle condition", {
  open_cpu()
  x <- ag_tensor(c(1, 2))
  ag_step_begin()
  e <- tryCatch(as.array(x), resgrad_stale_handle = function(e) e)
  expect_s3_class(e, "resgrad_error")
  expect_match(conditionMessage(e), "rg_step_begin")
  expect_equal(e$status, "RG_ERR_STALE")
  expect_error(ag_relu(x) , class = "resgrad_stale_handle")
  # describing a stale handle is not an error
  expect_match(capture.output(print(x)), "stale")
  expect_equal(as.numeric(ag_tensor(3) * 2), 6) # the context keeps working
})

test_that("misuse carries the library's message", {
  open_cpu()
  e <- tryCatch(ag_add(matrix(1, 2, 3), c(1, 2, 3, 4)), resgrad_error = function(e) e)
  expect_s3_class(e, "resgrad_misuse")
  expect_match(conditionMessage(e), "rg_add")
  expect_error(ag_sum(c(1, 2), axis = 0), class = "resgrad_misuse")
  expect_error(ag_tensor("a"), class = "resgrad_error")
  expect_error(ag_linear_act(matrix(1, 2, 2), matrix(1, 2, 2), c(0, 0), "nope"),
               class = "resgrad_misuse")
})

test_that("a pool budget running out is a resgrad_oom condition", {
  ag_device("cpu", pass_budget = 4096)
  expect_error(ag_tensor(rnorm(1e5)), class = "resgrad_oom")
  expect_equal(as.numeric(ag_tensor(c(1, 2)) + 1), c(2, 3))
})

test_that("an error at a barrier names the op; check mode names it at its call", {
  open_cpu()
  e <- ag_embedding(matrix(0, 3, 2), c(0L, 7L))
  expect_error(as.array(e), "7", class = "resgrad_error")
  ag_device("cpu", check = TRUE)
  expect_error(ag_embedding(matrix(0, 3, 2), c(0L, 7L)), "7", class = "resgrad_error")
})

test_that("tensors of two contexts do not mix", {
  a <- ag_tensor(1, ctx = ag_device("cpu"))
  b <- ag_tensor(1, ctx = ag_device("cpu"))
  expect_error(ag_add(a, b), "two different contexts", class = "resgrad_misuse")
})
