# r_step.R - the mlp-small training step recorded from R, next to bench/workloads' C step.
#
# mlp-small as bench/workloads.c and bench/python_step.py run it: 784-256-256-10, batch 64
# resident on the device (a persistent constant), fused linear+ReLU (ag_linear_act),
# cross-entropy, AdamW (lr 1e-3, weight decay 0.01), one read of the loss a step. The
# batch has workloads.c's shapes but not its values (its 64-bit LCG needs integer
# arithmetic R does not have); a step's work does not depend on the values. Prints one
# JSON line in workloads' format (ms_median over --steps after --warm; record_ms_median:
# the recording alone, before the read), and with --c-bin runs bench/workloads on the
# same workload for the C figure.
#
# usage:  Rscript bench/r_step.R [--device cpu] [--steps 50] [--warm 10]
#                               [--c-bin build/workloads]
suppressMessages(library(resgrad))
opt_arg <- function(name, default) {
  a <- commandArgs(trailingOnly = TRUE)
  i <- which(a == name)
  if (length(i)) a[i + 1] else default
}
device <- opt_arg("--device", "cpu")
steps <- as.integer(opt_arg("--steps", "50"))
warm <- as.integer(opt_arg("--warm", "10"))
cbin <- opt_arg("--c-bin", NULL)

ag_device(device)
set.seed(12345)
d <- c(784, 256, 256, 10)
B <- 64
x <- ag_tensor(matrix(runif(B * d[1], -1, 1), B), persistent = TRUE)
y <- ag_tensor(sample(0:9, B, TRUE), persistent = TRUE)
layers <- lapply(seq_len(length(d) - 1), function(i) {
  k <- 1 / sqrt(d[i])
  list(w = ag_param(dim = c(d[i + 1], d[i]), init = "uniform", a = -k, b = k,
                    name = sprintf("ls.%d.weight", i - 1)),
       b = ag_param(dim = d[i + 1], init = "uniform", a = -k, b = k,
                    name = sprintf("ls.%d.bias", i - 1)))
})
opt <- optimizer_adamw(lr = 1e-3, weight_decay = 0.01)
loss_of <- function() {
  h <- x
  for (i in seq_along(layers))
    h <- ag_linear_act(h, layers[[i]]$w, layers[[i]]$b,
                       if (i < length(layers)) "relu" else "none")
  ag_cross_entropy(h, y)
}
times <- rec <- numeric(0)
clock <- function() as.numeric(Sys.time()) # microseconds on Linux
for (i in seq_len(warm + steps)) {
  t <- clock()
  ag_step_begin()
  loss <- loss_of()
  backward(loss)
  opt$step()
  opt$zero_grad()
  t1 <- clock()
  value <- ag_item(loss)
  if (i > warm) {
    times <- c(times, clock() - t)
    rec <- c(rec, t1 - t)
  }
}
s <- ag_stats()
cat(sprintf(paste0('{"work":"mlp-small","mode":"f32","lang":"r","dev":"%s","ms_median":%.4f,',
                   '"ms_min":%.4f,"record_ms_median":%.4f,"graph_replays":%d,"steps":%d,',
                   '"loss_last":%.5f}\n'),
            ag_device_name(), median(times) * 1e3, min(times) * 1e3, median(rec) * 1e3,
            as.integer(s[["graph_replays"]]), steps, value))
if (!is.null(cbin))
  system2(cbin, c("--device", device, "--mode", "f32", "--steps", steps, "--warm", warm,
                  "mlp-small"))
