# Activation checkpointing (ag_checkpoint over rg_checkpoint_begin/end): the gradients
# equal those of the same pass without the region, bit for bit.

grads_of <- function(region) {
  open_cpu(seed = 5)
  set.seed(4)
  w1 <- ag_param(matrix(rnorm(12), 3, 4), name = "w1")
  w2 <- ag_param(matrix(rnorm(8), 4, 2), name = "w2")
  x <- matrix(rnorm(15), 5, 3)
  block <- function() ag_gelu(ag_tanh(x %*% w1) %*% w2)
  h <- if (region) ag_checkpoint(block) else block()
  backward(ag_sum(h * h))
  list(as.array(ag_grad(w1)), as.array(ag_grad(w2)))
}

test_that("a checkpoint region leaves the gradients unchanged", {
  expect_identical(grads_of(TRUE), grads_of(FALSE))
})

test_that("a region's inner tensors are refused after it; regions do not nest", {
  open_cpu()
  w <- ag_param(c(1, 2), name = "w_inner")
  inner <- NULL
  out <- ag_checkpoint(function() {
    inner <<- ag_exp(w)
    ag_sum(inner)
  })
  expect_error(as.array(ag_neg(inner)), class = "resgrad_error")
  expect_equal(as.numeric(out), exp(1) + exp(2), tolerance = 1e-6)
  expect_error(ag_checkpoint(function() ag_checkpoint(function() ag_exp(w))),
               class = "resgrad_error")
  # the failed inner call closed the outer region: a new one opens
  expect_equal(as.numeric(ag_checkpoint(function() ag_sum(ag_exp(w)))),
               exp(1) + exp(2), tolerance = 1e-6)
})
