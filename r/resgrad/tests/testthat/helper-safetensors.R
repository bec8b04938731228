# read_safetensors(path): a list of R arrays (the package's layout: an array of dim
# c(d1, ..., dn) is the tensor [d1, ..., dn] index for index) of a safetensors file of
# F32 and I32 tensors, read with base R alone.

read_safetensors <- function(path) {
  con <- file(path, "rb")
  on.exit(close(con))
  # the header's length, a little-endian u64: its low half suffices for these files
  len <- readBin(con, "integer", 2, size = 4, endian = "little")
  header <- rawToChar(readBin(con, "raw", len[1]))
  data <- readBin(con, "raw", file.size(path))
  out <- list()
  # "name":{"dtype":"F32","shape":[2,16,50],"data_offsets":[0,6400]}
  re <- '"([^"]+)":\\{"dtype":"([A-Z0-9]+)","shape":\\[([0-9, ]*)\\],"data_offsets":\\[([0-9]+), *([0-9]+)\\]\\}'
  for (m in regmatches(header, gregexpr(re, header))[[1]]) {
    f <- regmatches(m, regexec(re, m))[[1]]
    shape <- as.integer(strsplit(f[4], ",")[[1]])
    bytes <- data[(as.numeric(f[5]) + 1):as.numeric(f[6])]
    v <- switch(f[3],
                F32 = readBin(bytes, "double", length(bytes) / 4, size = 4, endian = "little"),
                I32 = readBin(bytes, "integer", length(bytes) / 4, size = 4, endian = "little"),
                stop("read_safetensors: dtype ", f[3]))
    # row-major values to an R array: fill the reversed shape, then reverse the axes
    out[[f[2]]] <- if (length(shape) > 1) aperm(array(v, rev(shape))) else v
  }
  out
}
