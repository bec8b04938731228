# The layout: an R array of dim c(d1, ..., dn) is the tensor [d1, ..., dn], element for
# element, and reads back equal.

test_that("arrays of 1 to 4 axes round-trip", {
  open_cpu()
  for (d in list(5L, c(2L, 3L), c(2L, 3L, 4L), c(2L, 1L, 3L, 2L))) {
    x <- array(rnorm(prod(d)), d)
    t <- ag_tensor(x)
    expect_equal(dim(t), d)
    expect_equal(as.array(t), array(as.numeric(as.array(t)), d))
    expect_equal(as.array(t), x, tolerance = 1e-7)
  }
})

test_that("an element keeps its index", {
  open_cpu()
  x <- array(seq_len(24) + 0, c(2, 3, 4))
  t <- ag_tensor(x)
  # [1, 2, 3] of R is row-major offset 0*12 + 1*4 + 2 of the library's [2,3,4]
  expect_equal(as.numeric(ag_slice(ag_slice(ag_slice(t, 1, 1, 1), 2, 2, 1), 3, 3, 1)),
               x[1, 2, 3])
  expect_equal(as.numeric(ag_reshape(t, 24))[1 + 0 * 12 + 1 * 4 + 2], x[1, 2, 3])
})

test_that("vectors, numbers, integers, logicals and factors", {
  open_cpu()
  expect_equal(dim(ag_tensor(1:3 + 0)), 3L)
  s <- ag_tensor(2.5, dim = integer(0))
  expect_null(dim(s))
  expect_equal(ag_item(s), 2.5)
  i <- ag_tensor(matrix(1:6, 2))
  expect_equal(ag_dtype(i), "i32")
  expect_identical(as.array(i), matrix(1:6, 2))
  expect_equal(as.numeric(ag_tensor(c(TRUE, FALSE))), c(1, 0))
  f <- ag_tensor(factor(c("b", "a", "c", "a")))
  expect_identical(as.vector(as.array(f)), c(1L, 0L, 2L, 0L))
  expect_equal(ag_dtype(ag_tensor(1:3, dtype = "f32")), "f32")
})

test_that("matrices multiply as in R", {
  open_cpu()
  a <- matrix(rnorm(6), 2, 3)
  b <- matrix(rnorm(12), 3, 4)
  expect_equal(as.array(ag_tensor(a) %*% ag_tensor(b)), a %*% b, tolerance = 1e-5)
  expect_equal(as.array(t(ag_tensor(a))), t(a), tolerance = 1e-7)
  expect_equal(a %*% b, base::`%*%`(a, b))
})

test_that("reshape follows the library's row-major order", {
  open_cpu()
  x <- matrix(1:6 + 0, 2, 3)
  expect_equal(as.array(ag_reshape(x, c(3, 2))), matrix(c(1, 5, 4, 3, 2, 6), 3, 2))
  expect_equal(as.array(ag_reshape(x, c(3, 2))), reshape_rm(x, c(3, 2)))
})

test_that("persistent tensors, parameters and writes", {
  open_cpu()
  k <- ag_tensor(matrix(1:4 + 0, 2), persistent = TRUE)
  p <- ag_param(matrix(5:8 + 0, 2), name = "p")
  ag_step_begin()
  expect_equal(ag_pool(k), "persistent")
  expect_equal(as.array(k + p), matrix(c(6, 8, 10, 12), 2))
  ag_write(p, matrix(0, 2, 2))
  expect_equal(as.array(p), matrix(0, 2, 2))
  expect_equal(ag_name(p), "p")
  q <- ag_param(dim = c(2, 3), init = "const", a = 1.5, name = "q")
  expect_equal(as.array(q), matrix(1.5, 2, 3))
  b <- ag_tensor(c(1, 1.00390625, 3.14159), dtype = "bf16")
  expect_equal(ag_dtype(b), "bf16")
  expect_equal(as.numeric(b), c(1, 1, 3.140625))
})

test_that("operators record ops", {
  open_cpu()
  x <- ag_tensor(c(1, 2, 3))
  expect_equal(as.numeric(2 * x + 1), c(3, 5, 7))
  expect_equal(as.numeric(1 - x), c(0, -1, -2))
  expect_equal(as.numeric(x / 2), c(0.5, 1, 1.5))
  expect_equal(as.numeric(-x), -c(1, 2, 3))
  expect_equal(as.numeric(x^2), c(1, 4, 9))
  expect_equal(as.numeric(sum(x)), 6)
  expect_equal(as.numeric(mean(x)), 2)
  expect_equal(as.numeric(exp(x)), exp(c(1, 2, 3)), tolerance = 1e-6)
  expect_equal(length(x), 3L)
})

test_that("print describes without a barrier", {
  open_cpu()
  y <- ag_relu(ag_tensor(matrix(-2:3 + 0, 2)))
  ag_stats_reset()
  out <- capture.output(print(y))
  expect_match(out, "F32 \\[2,3\\] pass gen [0-9]+ slot [0-9]+, pending: rg_relu")
  expect_true(ag_is_pending(y))
  expect_equal(ag_sync_count(), 0)
  as.array(y)
  expect_false(ag_is_pending(y))
  expect_equal(ag_sync_count(), 1)
})
