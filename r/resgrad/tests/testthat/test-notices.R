# The bundled library writes its notices through R's REprintf (its notice sink), so R's
# message sink sees them: the package's code writes nothing to the process's stderr.

test_that("the library's trace lines reach R's message stream", {
  skip_if(nzchar(Sys.getenv("RESGRAD_PKG_CONFIG")), "a pkg-config library prints on stderr")
  out <- capture.output({
    ag_device("cpu", trace = 1L, quiet = FALSE)
    v <- as.numeric(ag_sum(ag_tensor(c(1, 2, 3))))
  }, type = "message")
  ag_device("cpu")
  expect_equal(v, 6)
  expect_true(any(grepl("^resgrad: drain \\(read\\) of [0-9]+ nodes on ", out)))
  expect_true(any(grepl("sum", out)))
})
