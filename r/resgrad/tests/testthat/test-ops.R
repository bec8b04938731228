# Every op of the library from R, driven by the op table: the forward result against base
# R (in double) and the gradient against central differences (ag_gradcheck, the library's
# rg_gradcheck) through a loss sum(op(params) * W).
#
# CASES has one entry per generated op function (resgrad:::.rg_ops). An op added to the C
# header is bound by r/gen_bindings.py and then fails "every op has a case" until it gets
# a case here; an op-table row whose call is neither an op function nor in NON_OP_CALLS
# fails "every table row is reachable".

P <- function(v) list(v = v, diff = TRUE)
C <- function(v) list(v = v, diff = FALSE)
is_in <- function(a) is.list(a) && !is.null(a$diff)
case <- function(args, ref, grad = TRUE, tol = 1e-5, gtol = 2e-3)
  list(args = args, ref = ref, grad = grad, tol = tol, gtol = gtol)
n <- function(...) array(rnorm(prod(c(...))), c(...))
u <- function(lo, hi, ...) array(runif(prod(c(...)), lo, hi), c(...))

CASES <- list(
  add = case(function() list(P(n(2, 3)), P(n(3))), binary(`+`)),
  sub = case(function() list(P(n(2, 1)), P(n(2, 3))), binary(`-`)),
  mul = case(function() list(P(n(2, 3)), P(n(2, 3))), binary(`*`)),
  div = case(function() list(P(n(2, 3)), P(u(1, 2, 2, 3))), binary(`/`)),
  scale = case(function() list(P(n(3, 2)), 0.5), function(x, s) x * s),
  pow = case(function() list(P(u(0.5, 2, 3)), 3), function(x, p) x^p),
  neg = case(function() list(P(n(4))), function(x) -x),
  exp = case(function() list(P(n(4))), exp),
  log = case(function() list(P(u(0.5, 2, 4))), log),
  sqrt = case(function() list(P(u(0.5, 2, 4))), sqrt),
  relu = case(function() list(P(away_from(n(2, 4), 0))), function(x) pmax(x, 0)),
  gelu = case(function() list(P(n(2, 4))), gelu_r),
  silu = case(function() list(P(n(2, 4))), function(x) x * sigmoid_r(x)),
  sigmoid = case(function() list(P(n(2, 4))), sigmoid_r),
  tanh = case(function() list(P(n(2, 4))), tanh),
  clamp = case(function() list(P(away_from(n(2, 4), c(-0.5, 0.5))), -0.5, 0.5),
               function(x, lo, hi) pmin(pmax(x, lo), hi)),
  sum = case(function() list(P(n(2, 3)), 2, TRUE), function(x, a, k) array(rowSums(x), c(2, 1))),
  mean = case(function() list(P(n(2, 3)), NULL, FALSE), function(x, a, k) mean(x)),
  max = case(function() list(P(rbind(c(0, 1, -1), c(3, 2, 1))), 2, FALSE),
             function(x, a, k) array(apply(x, 1, max))),
  argmax = case(function() list(C(n(3, 4)), -1, FALSE),
                function(x, a, k) array(apply(x, 1, which.max) - 1L), grad = FALSE, tol = 0),
  softmax = case(function() list(P(n(2, 5))), softmax_r),
  log_softmax = case(function() list(P(n(2, 5))), function(x) log(softmax_r(x))),
  matmul = case(function() list(P(n(2, 3, 4)), P(n(4, 2))), matmul_r),
  linear = case(function() list(P(n(3, 4)), P(n(2, 4)), P(n(2))), linear_r),
  linear_act = case(function() list(P(n(3, 4)), P(n(2, 4)), P(n(2)), "gelu"),
                    function(x, w, b, a) gelu_r(linear_r(x, w, b))),
  layernorm = case(function() list(P(n(3, 6)), P(n(6)), P(n(6)), 1e-5), layernorm_r,
                   tol = 1e-4),
  rmsnorm = case(function() list(P(n(3, 6)), P(n(6)), 1e-5), rmsnorm_r, tol = 1e-4),
  embedding = case(function() list(P(n(5, 3)), C(matrix(c(0L, 2L, 4L, 2L), 2))),
                   function(t, i) array(t[as.vector(i) + 1, ], c(dim(i), ncol(t)))),
  attention = case(function() list(P(n(1, 2, 3, 4)), P(n(1, 2, 3, 4)), P(n(1, 2, 3, 4)), TRUE),
                   attention_r, tol = 1e-4),
  attention_mask = case(function() list(P(n(2, 2, 4, 3)), P(n(2, 2, 4, 3)), P(n(2, 2, 4, 3)), TRUE,
                                         C(rbind(c(0L, 0L, 1L, 0L), c(0L, 0L, 0L, 1L))),
                                         C(n(4, 4))),
                        attention_mask_r, tol = 1e-4),
  attention_qkv = case(function() list(P(n(2, 3, 12)), 2, TRUE), attention_qkv_r, tol = 1e-4),
  cross_entropy = case(function() list(P(n(4, 5)), C(c(0L, 4L, 2L, 2L))), xent_r, tol = 1e-4),
  cross_entropy_ignore = case(function() list(P(n(4, 5)), C(c(0L, -1L, 2L, 2L)), -1),
                              xent_r, tol = 1e-4),
  mse = case(function() list(P(n(2, 3)), P(n(2, 3))), function(a, b) mean((a - b)^2)),
  reshape = case(function() list(P(n(2, 6)), c(3, -1)), reshape_rm),
  transpose = case(function() list(P(n(2, 3, 4)), 1, 3), function(x, a, b) aperm(x, c(3, 2, 1))),
  permute = case(function() list(P(n(2, 3, 4)), c(2, 3, 1)), aperm),
  slice = case(function() list(P(n(3, 5)), 2, 2, 3),
               function(x, a, s, l) x[, s:(s + l - 1), drop = FALSE]),
  concat = case(function() list(P(n(2, 3)), P(n(2, 1)), 2), function(a, b, ax) cbind(a, b)),
  dropout = case(function() list(P(n(3, 4)), 0.25), NULL), # forward: its own test
  cast = case(function() list(C(n(3, 4)), "bf16"), NULL, grad = FALSE), # its own test
  detach = case(function() list(C(n(3))), function(x) array(x), grad = FALSE, tol = 0)
)

# Calls of op-table rows that are not op functions, and the test that covers each.
NON_OP_CALLS <- c(rg_input = "test-layout.R (ag_tensor)", rg_copy = "reshape, detach",
                  rg_zero_grad = "test-train.R", rg_clip_grad_norm = "test-train.R",
                  rg_clip_grad_value = "test-train.R", rg_optim_step = "test-train.R",
                  rg_ring_push = "test-ring.R", rg_ring_gather = "test-ring.R",
                  rg_ring_sample = "test-ring.R",
                  rg_kv_write = "test-generate.R (ag_gpt_generate)",
                  rg_attention_cached = "test-generate.R (ag_gpt_generate)",
                  rg_sample = "test-generate.R (ag_gpt_generate, sampling)")

test_that("every op has a case", {
  ops <- resgrad:::.rg_ops
  expect_setequal(names(CASES), ops)
  for (op in ops) expect_true(exists(paste0("ag_", op)), info = op)
})

test_that("every table row is reachable", {
  t <- resgrad:::.rg_op_table
  for (i in seq_len(nrow(t))) {
    if ("BWD" %in% strsplit(t$flags[i], " ")[[1]]) next
    expect_true(sub("^rg_", "", t$call[i]) %in% resgrad:::.rg_ops ||
                  t$call[i] %in% names(NON_OP_CALLS), info = t$kernel[i])
  }
})

host <- function(a) {
  if (!is_in(a)) return(a)
  if (is.double(a$v)) {
    # the float32 value the library sees
    v <- a$v
    v[] <- as.numeric(ag_tensor(a$v))
    return(v)
  }
  a$v
}

for (name in names(CASES)) {
  c <- CASES[[name]]
  if (!is.null(c$ref)) test_that(paste("forward:", name), {
    open_cpu()
    set.seed(1)
    args <- c$args()
    f <- get(paste0("ag_", name))
    ins <- lapply(args, function(a) if (is_in(a)) ag_tensor(a$v) else a)
    got <- as.array(do.call(f, ins))
    want <- do.call(c$ref, lapply(args, host))
    if (length(dim(got)) == 0L) want <- as.vector(want)
    expect_equal(dim(got), dim(want), info = name)
    err <- max(abs(got - want) / pmax(1, abs(want)))
    expect_lte(err, c$tol)
  })
  if (c$grad) test_that(paste("gradient:", name), {
    open_cpu(seed = 7)
    set.seed(2)
    args <- c$args()
    f <- get(paste0("ag_", name))
    ins <- list()
    for (k in seq_along(args)) {
      a <- args[[k]]
      ins[k] <- list(if (!is_in(a)) a
                     else if (a$diff) ag_param(a$v, name = paste0("in", k))
                     else ag_tensor(a$v, persistent = TRUE))
    }
    probe <- do.call(f, ins)
    d <- if (is.null(dim(probe))) integer(0) else dim(probe)
    wv <- runif(max(1, prod(d)), 0.25, 1) * sample(c(-1, 1), max(1, prod(d)), TRUE)
    w <- ag_tensor(wv, dim = d, persistent = TRUE)
    ag_step_begin()
    r <- ag_gradcheck(function() ag_sum(do.call(f, ins) * w), eps = 1e-2)
    expect_lte(r[["max_abs_err"]], c$gtol)
  })
}

test_that("dropout keeps about 1 - p of the values, scaled", {
  open_cpu()
  x <- matrix(rnorm(64 * 64), 64)
  y <- as.array(ag_dropout(x, 0.25))
  kept <- y != 0
  expect_gt(mean(kept), 0.6)
  expect_lt(mean(kept), 0.9)
  expect_equal(y[kept], x[kept] / 0.75, tolerance = 1e-6)
  ag_train_mode(FALSE)
  expect_equal(as.array(ag_dropout(x, 0.25)), x, tolerance = 1e-7)
})

test_that("cast to bf16 rounds to 8 bits of mantissa", {
  open_cpu()
  x <- matrix(rnorm(12), 3)
  y <- ag_cast(x, "bf16")
  expect_equal(ag_dtype(y), "bf16")
  v <- as.array(y)
  expect_true(all(abs(v - x) <= abs(x) * 2^-8))
  expect_equal(as.array(ag_cast(y, "f32")), v)
})

test_that("help pages come from the header", {
  rd <- tools::Rd_db("resgrad")
  txt <- paste(as.character(rd[["ag_softmax.Rd"]]), collapse = "")
  expect_match(txt, "numerically stable")
})
