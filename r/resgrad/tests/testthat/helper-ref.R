# helper-ref.R - base R references for the op tests, on R arrays in the package's layout
# (an R array of dim c(d1, ..., dn) is the tensor [d1, ..., dn], index for index).

open_cpu <- function(seed = 0) ag_device("cpu", seed = seed, threads = 1L)

shape <- function(x) if (is.null(dim(x))) length(x) else dim(x)

# x broadcast to dims, axes aligned from the right (numpy's rule, the library's).
bcast <- function(x, dims) {
  xd <- shape(x)
  xd <- c(rep(1L, length(dims) - length(xd)), xd)
  idx <- arrayInd(seq_len(prod(dims)), dims)
  src <- pmin(idx, matrix(xd, nrow(idx), length(dims), byrow = TRUE))
  array(array(x, xd)[src], dims)
}

binary <- function(f) function(a, b) {
  d <- shape(a)
  db <- shape(b)
  n <- max(length(d), length(db))
  d <- c(rep(1L, n - length(d)), d)
  db <- c(rep(1L, n - length(db)), db)
  out <- pmax(d, db)
  f(bcast(a, out), bcast(b, out))
}

last_axis <- function(x, f) {
  d <- shape(x)
  n <- length(d)
  if (n == 1L) return(f(x))
  aperm(apply(x, seq_len(n - 1L), f), c(2:n, 1L))
}

softmax_r <- function(x) last_axis(x, function(v) exp(v - max(v)) / sum(exp(v - max(v))))
gelu_r <- function(x) 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))
sigmoid_r <- function(x) 1 / (1 + exp(-x))

# Row-major reshape (the library's), in R.
reshape_rm <- function(x, dims) {
  n <- length(x)
  if (any(dims == -1)) dims[dims == -1] <- n / prod(dims[dims != -1])
  aperm(array(aperm(x), rev(dims)), rev(seq_along(dims)))
}

matmul_r <- function(a, b) {
  if (length(dim(a)) == 2L) return(a %*% b)
  out <- array(0, c(dim(a)[1], dim(a)[2], dim(b)[2]))
  for (i in seq_len(dim(a)[1])) out[i, , ] <- a[i, , ] %*% b
  out
}

linear_r <- function(x, w, b) x %*% t(w) + matrix(b, nrow(x), length(b), byrow = TRUE)

layernorm_r <- function(x, g, b, eps = 1e-5) {
  m <- rowMeans(x)
  v <- rowMeans((x - m)^2)
  (x - m) / sqrt(v + eps) * matrix(g, nrow(x), ncol(x), byrow = TRUE) +
    matrix(b, nrow(x), ncol(x), byrow = TRUE)
}

rmsnorm_r <- function(x, g, eps = 1e-5)
  x / sqrt(rowMeans(x * x) + eps) * matrix(g, nrow(x), ncol(x), byrow = TRUE)

attention_r <- function(q, k, v, causal) attention_mask_r(q, k, v, causal)

# pad: [B, S], nonzero masks a key; bias: [T, S], added to the scaled scores. A query
# row with every key masked gives 0.
attention_mask_r <- function(q, k, v, causal, pad = NULL, bias = NULL) {
  d <- dim(q)
  out <- array(0, d)
  for (b in seq_len(d[1])) for (h in seq_len(d[2])) {
    s <- q[b, h, , ] %*% t(k[b, h, , ]) / sqrt(d[4])
    if (!is.null(bias)) s <- s + bias
    if (causal) s[col(s) > row(s)] <- -Inf
    if (!is.null(pad)) s[, pad[b, ] != 0] <- -Inf
    p <- t(apply(s, 1, function(r) if (all(r == -Inf)) 0 * r else exp(r - max(r)) / sum(exp(r - max(r)))))
    out[b, h, , ] <- p %*% v[b, h, , ]
  }
  out
}

attention_qkv_r <- function(qkv, heads, causal) {
  d <- dim(qkv)
  c <- d[3] / 3
  hd <- c / heads
  split <- function(i) {
    part <- qkv[, , (i * c + 1):((i + 1) * c), drop = FALSE]
    aperm(array(part, c(d[1], d[2], hd, heads)), c(1, 4, 2, 3))
  }
  o <- attention_r(split(0), split(1), split(2), causal)
  array(aperm(o, c(1, 3, 4, 2)), c(d[1], d[2], c))
}

xent_r <- function(logits, targets, ignore = NULL) {
  lp <- log(softmax_r(logits))
  keep <- if (is.null(ignore)) rep(TRUE, length(targets)) else targets != ignore
  picked <- lp[cbind(seq_along(targets), pmax(targets, 0) + 1)]
  -sum(picked[keep]) / max(sum(keep), 1)
}

away_from <- function(x, points, gap = 0.05) {
  for (p in points) {
    near <- abs(x - p) < gap
    x[near] <- p + sign(x[near] - p + 1e-9) * gap * 2
  }
  x
}
