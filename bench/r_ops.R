# r_ops.R - the host cost of recording one op from R, next to bench/op_overhead's C figure.
#
# As op_overhead.c: on a CPU context (one kernel thread) it records `ops` cheap ops,
# ag_add of two one-element tensors chained (acc <- acc + one), in batches of 10000, each
# batch in its own step (ag_step_begin); only the recording loops are timed. Each batch's
# result is read back and must equal the batch size. One untimed batch warms up first.
# The R figure is the whole call: R's dispatch of ag_add, .Call, the handle's external
# pointer and the library's record. The operator form (acc + one, through Ops.ag_tensor)
# is timed too.
#
# usage:  Rscript bench/r_ops.R [ops] [--c-bin build/op_overhead]
# output: one JSON line per form (and op_overhead's line with --c-bin)
suppressMessages(library(resgrad))
args <- commandArgs(trailingOnly = TRUE)
cbin <- NULL
if (length(i <- which(args == "--c-bin"))) {
  cbin <- args[i + 1]
  args <- args[-c(i, i + 1)]
}
ops <- if (length(args)) as.integer(args[1]) else 200000L
batch <- 10000L
nb <- max(1L, ceiling(ops / batch))
ag_device("cpu", threads = 1L)

run_batch <- function(form) {
  ag_step_begin()
  acc <- ag_tensor(0, dim = 1L)
  one <- ag_tensor(1, dim = 1L)
  t0 <- as.numeric(Sys.time()) # microseconds on Linux
  if (form == "ag_add") {
    for (i in seq_len(batch)) acc <- ag_add(acc, one)
  } else {
    for (i in seq_len(batch)) acc <- acc + one
  }
  t <- as.numeric(Sys.time()) - t0
  if (as.numeric(acc) != batch) stop("r_ops: the batch computed ", as.numeric(acc))
  t
}

for (form in c("ag_add", "operator")) {
  run_batch(form)
  total <- sum(vapply(seq_len(nb), function(b) run_batch(form), 0))
  cat(sprintf('{"bench":"r_ops","form":"%s","device":"cpu","ns_per_op":%.1f,"ops":%d,"batch":%d}\n',
              form, total / (nb * batch) * 1e9, nb * batch, batch))
}
if (!is.null(cbin)) system2(cbin, sprintf("%d", nb * batch))
