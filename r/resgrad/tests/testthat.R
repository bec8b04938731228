library(testthat)
library(resgrad)

test_check("resgrad")
