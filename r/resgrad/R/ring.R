# ring.R - the library's device ring buffers: replay memory kept on the device.

#' Ring buffers on the device
#'
#' A ring holds up to \code{capacity} entries of \code{rows} values each, on
#' the device, outside the per-step pool (replay memory, a window of streaming
#' data). Pushes, gathers and samples are recorded like ops and run at the next
#' barrier in the order recorded. Entries are numbered from the oldest (0) to
#' the newest (\code{count - 1}), counted from 0 as the library counts indices
#' held in tensors; once the ring is full a push overwrites the oldest entry.
#' The ring holds values: pushing carries no gradient in, and gathers require
#' none.
#'
#' \code{ag_ring_new} makes an empty ring; its value is an \code{ag_tensor},
#' the persistent table \code{[capacity, rows]} (\code{as.array} reads it slot
#' by slot). \code{ag_ring_push(ring, entries)} appends \code{entries}, an R
#' matrix (or \code{ag_tensor}) of \code{k} rows of \code{rows} values, or one
#' vector of \code{rows} values, of the ring's dtype (doubles for \code{"f32"},
#' integers for \code{"i32"}). \code{ag_ring_gather(ring, idx)} records the
#' entries \code{idx} (integers from 0, up to 3 axes) as a tensor
#' \code{[..idx.., rows]}. \code{ag_ring_sample(ring, n)} records the draw of
#' \code{n} entry numbers uniformly from those held, with replacement, on the
#' device (an I32 tensor for \code{ag_ring_gather}). \code{ag_ring_count} is a
#' barrier and returns how many entries the ring holds. \code{ag_ring_free}
#' gives the ring's memory back: its handle is stale afterwards.
#'
#' @param capacity,rows entries the ring holds at most, and values per entry.
#' @param dtype \code{"f32"}, \code{"bf16"} or \code{"i32"}.
#' @param ring a ring made by \code{ag_ring_new}.
#' @param entries the entries to append.
#' @param idx entry numbers, from 0 (the oldest).
#' @param n how many entry numbers to draw.
#' @param ctx a context; the default one if \code{NULL}.
#' @return \code{ag_ring_new}, \code{ag_ring_gather}, \code{ag_ring_sample}: an
#'   \code{ag_tensor}; \code{ag_ring_count}: a number; the others \code{NULL},
#'   invisibly.
#' @examples
#' ag_device("cpu")
#' r <- ag_ring_new(capacity = 4, rows = 2)
#' ag_ring_push(r, matrix(1:6 + 0, 3, 2))
#' ag_ring_count(r)
#' as.array(ag_ring_gather(r, c(2L, 0L)))
#' batch <- ag_ring_gather(r, ag_ring_sample(r, 8))
#' dim(batch)
#' ag_ring_free(r)
#' @export
ag_ring_new <- function(capacity, rows, dtype = "f32", ctx = NULL) {
  .Call(C_rgr_ring_new, .rg_ctx(ctx), .rg_dtype_code(dtype), capacity, rows)
}

#' @rdname ag_ring_new
#' @export
ag_ring_push <- function(ring, entries) invisible(.Call(C_rgr_ring_push, ring, entries))

#' @rdname ag_ring_new
#' @export
ag_ring_gather <- function(ring, idx) .Call(C_rgr_ring_gather, ring, .rg_ids(idx))

#' @rdname ag_ring_new
#' @export
ag_ring_sample <- function(ring, n) .Call(C_rgr_ring_sample, ring, n)

#' @rdname ag_ring_new
#' @export
ag_ring_count <- function(ring) .Call(C_rgr_ring_count, ring)

#' @rdname ag_ring_new
#' @export
ag_ring_free <- function(ring) invisible(.Call(C_rgr_ring_free, ring))
