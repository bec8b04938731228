# Training from R: an MLP on iris to a stated accuracy, clipping, schedules,
# checkpoints, the counters of a step, the GPT model.

iris_data <- function() {
  x <- scale(as.matrix(iris[, 1:4]))
  attributes(x)[c("scaled:center", "scaled:scale")] <- NULL
  list(x = x, y = iris$Species)
}

test_that("an MLP learns iris to 95% training accuracy", {
  open_cpu(seed = 42)
  d <- iris_data()
  x <- ag_tensor(d$x, persistent = TRUE)
  y <- ag_tensor(d$y, persistent = TRUE) # factor: classes 0, 1, 2
  fc1 <- ag_layer_linear(4, 16, name = "fc1")
  fc2 <- ag_layer_linear(16, 3, name = "fc2")
  opt <- optimizer_adamw(lr = 0.02, weight_decay = 0)
  model <- function(x) fc2$forward(ag_relu(fc1$forward(x)))
  for (step in 1:150) {
    loss <- with_grad_tape(ag_cross_entropy(model(x), y))
    opt$zero_grad()
    backward(loss)
    ag_clip_grad_norm(5)
    opt$step()
  }
  pred <- as.vector(as.array(ag_argmax(model(x), axis = 2)))
  acc <- mean(pred == as.integer(d$y) - 1L)
  expect_gte(acc, 0.95)
  expect_lt(ag_item(loss), 0.2)
  expect_equal(opt$steps(), 150)
})

test_that("a training step reads back one value and drains once", {
  open_cpu(seed = 1)
  x <- ag_tensor(matrix(rnorm(32), 8, 4), persistent = TRUE)
  y <- ag_tensor(sample(0:2, 8, TRUE), persistent = TRUE)
  fc <- ag_layer_linear(4, 3)
  opt <- optimizer_sgd(lr = 0.1, momentum = 0.9)
  step <- function() {
    loss <- with_grad_tape(ag_cross_entropy(fc$forward(x), y))
    opt$zero_grad()
    backward(loss)
    ag_clip_grad_value(1)
    opt$step()
    ag_item(loss)
  }
  first <- step()
  step()
  ag_stats_reset()
  last <- step()
  expect_equal(ag_xfer_count()[["down"]], 1)
  expect_equal(ag_xfer_count()[["up"]], 0)
  expect_lte(ag_sync_count(), 2) # the step's barrier and the read
  expect_gt(ag_launch_count(), 0)
  expect_lt(last, first)
})

test_that("schedules set the rate on the device", {
  open_cpu()
  w <- ag_param(1, name = "w")
  opt <- optimizer_sgd(lr = 1)
  ag_lr_schedule(opt, "step", lr = 1, gamma = 0.5, step_size = 1)
  for (i in 1:3) {
    with_grad_tape(l <- ag_sum(w * w))
    opt$zero_grad()
    backward(l)
    opt$step()
  }
  expect_equal(opt$get_lr(), 0.25)
  ag_lr_schedule(opt, NULL)
  opt$set_lr(0.01)
  expect_equal(opt$get_lr(), 0.01, tolerance = 1e-7)
})

test_that("checkpoints save and load parameters and optimizer state", {
  open_cpu(seed = 5)
  fc <- ag_layer_linear(3, 2, name = "fc")
  opt <- optimizer_adamw()
  with_grad_tape(l <- ag_sum(fc$forward(matrix(1, 1, 3))))
  backward(l)
  opt$step()
  before <- as.array(fc$weight)
  f <- tempfile(fileext = ".safetensors")
  on.exit(unlink(f))
  ag_save(f, opt, metadata = list(run = "test"))
  ag_write(fc$weight, matrix(0, 2, 3))
  ag_load(f, opt)
  expect_equal(as.array(fc$weight), before)
  expect_equal(ag_meta("run"), "test")
  expect_equal(opt$steps(), 1)
  expect_error(ag_load(tempfile()), class = "resgrad_io")
})

test_that("a small GPT lowers its loss", {
  open_cpu(seed = 3)
  gpt <- ag_gpt(vocab = 12, block = 8, layers = 1, width = 16, heads = 2)
  idx <- matrix(rep(0:7, 4) %% 12L, 4, 8, byrow = TRUE)
  tgt <- (idx + 1L) %% 12L
  opt <- optimizer_adamw(lr = 3e-3)
  first <- NULL
  for (i in 1:30) {
    loss <- with_grad_tape(gpt$loss(idx, tgt))
    opt$zero_grad()
    backward(loss)
    opt$step()
    if (is.null(first)) first <- ag_item(loss)
  }
  expect_lt(ag_item(loss), first * 0.7)
  expect_equal(dim(gpt$forward(idx)), c(4L, 8L, 12L))
  expect_gt(gpt$param_count(), 0)
})
