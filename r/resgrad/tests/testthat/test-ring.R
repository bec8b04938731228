# The ring ops (RING_PUSH, RING_GATHER, RING_SAMPLE of the op table) against base R. A
# ring holds values: it carries no gradient (the library's contract), so these have no
# gradient case; the test checks that a gathered value requires none.

test_that("push and gather give the entries pushed, oldest first", {
  open_cpu()
  r <- ag_ring_new(capacity = 4, rows = 3)
  expect_equal(dim(r), c(4L, 3L))
  expect_equal(ag_ring_count(r), 0)
  x <- matrix(rnorm(9), 3, 3)
  ag_ring_push(r, x)
  expect_equal(ag_ring_count(r), 3)
  got <- as.array(ag_ring_gather(r, c(2L, 0L, 1L)))
  expect_equal(got, x[c(3, 1, 2), ], tolerance = 1e-6)
  # one more fills it, two more wrap: the oldest two are overwritten
  y <- matrix(rnorm(9), 3, 3)
  ag_ring_push(r, y)
  expect_equal(ag_ring_count(r), 4)
  all_rows <- rbind(x, y)[3:6, ]
  expect_equal(as.array(ag_ring_gather(r, 0:3)), all_rows, tolerance = 1e-6)
  # a single vector is one entry; an index matrix gives [.., rows]
  ag_ring_push(r, c(7, 8, 9))
  idx <- matrix(c(3L, 0L, 1L, 2L), 2)
  g <- as.array(ag_ring_gather(r, idx))
  entries <- rbind(y, c(7, 8, 9))
  expect_equal(dim(g), c(2L, 2L, 3L))
  for (i in 1:2) for (j in 1:2)
    expect_equal(g[i, j, ], entries[idx[i, j] + 1, ], tolerance = 1e-6)
  ag_ring_free(r)
})

test_that("a gather before a push sees the old contents", {
  open_cpu()
  r <- ag_ring_new(2, 2)
  ag_ring_push(r, c(1, 2))
  before <- ag_ring_gather(r, 0L)
  ag_ring_push(r, c(3, 4))
  ag_ring_push(r, c(5, 6))
  after <- ag_ring_gather(r, 0L)
  expect_equal(as.numeric(before), c(1, 2))
  expect_equal(as.numeric(after), c(3, 4))
})

test_that("samples are entry numbers in [0, count), and gather them", {
  open_cpu(seed = 3)
  r <- ag_ring_new(8, 2, dtype = "i32")
  ag_ring_push(r, matrix(0:9, 5, 2))
  s <- ag_ring_sample(r, 200)
  expect_equal(ag_dtype(s), "i32")
  v <- as.vector(as.array(s))
  expect_true(all(v >= 0 & v < 5))
  expect_equal(sort(unique(v)), 0:4)
  b <- as.array(ag_ring_gather(r, s))
  expect_equal(b, matrix(0:9, 5, 2)[v + 1, ])
})

test_that("a gathered value requires no gradient and feeds a loss", {
  open_cpu()
  r <- ag_ring_new(4, 2)
  ag_ring_push(r, matrix(c(1, 2, 3, 4), 2))
  w <- ag_param(c(0.5, -1), name = "w_ring")
  loss <- ag_sum(ag_ring_gather(r, c(0L, 1L)) * w)
  backward(loss)
  expect_equal(as.numeric(ag_grad(w)), c(1 + 2, 3 + 4), tolerance = 1e-6)
})

test_that("misuse is a condition; a freed ring is a stale handle", {
  open_cpu()
  r <- ag_ring_new(4, 3)
  expect_error(ag_ring_push(r, c(1, 2)), class = "resgrad_error")
  expect_error(ag_ring_new(0, 3), class = "resgrad_error")
  ag_ring_push(r, c(1, 2, 3))
  expect_error(as.array(ag_ring_gather(r, 5L)), class = "resgrad_error")
  ag_ring_free(r)
  expect_error(ag_ring_count(r), class = "resgrad_stale_handle")
})
