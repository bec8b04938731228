/*
 * convert.c - R's column-major values to the library's row-major tensors and back.
 *
 * The layout: an R array of dim c(d1, ..., dn) is the tensor of shape [d1, ..., dn] with
 * the same element at the same index, x[i1, ..., in] == tensor[i1-1, ..., in-1]. R stores
 * the first index fastest, the library the last, so the bytes are transposed on the way
 * (one pass each way). A vector without dim is a tensor of one axis; a tensor of no axes
 * reads back as a plain number. Numbers become F32 (or BF16, rounded to nearest even),
 * integers and factors I32 (a factor's codes counted from 0, as the library indexes),
 * logicals F32. NA has no F32 or I32 form: an NA in an integer input is refused, an NA
 * in a double input becomes NaN. rgr_named_reals makes the named numeric vectors the
 * counters and the gradient check return.
 */
#include "rgr.h"

#include <math.h>
#include <string.h>

/* For each row-major position r (the last axis fastest) of dims d[0..n-1], the
   column-major position c of the same index: STEP is run with r and c. */
#define RGR_WALK(n, d, numel, STEP)                                             \
  do {                                                                          \
    int64_t idx_[RG_MAX_DIMS] = {0}, cs_[RG_MAX_DIMS], c = 0, s_ = 1;           \
    for (int k_ = 0; k_ < (n); k_++) {                                          \
      cs_[k_] = s_;                                                             \
      s_ *= (d)[k_];                                                            \
    }                                                                           \
    for (int64_t r = 0; r < (numel); r++) {                                     \
      STEP;                                                                     \
      int k_ = (n) - 1;                                                         \
      while (k_ >= 0) {                                                         \
        c += cs_[k_];                                                           \
        if (++idx_[k_] < (d)[k_]) break;                                        \
        c -= cs_[k_] * (d)[k_];                                                 \
        idx_[k_] = 0;                                                           \
        k_--;                                                                   \
      }                                                                         \
    }                                                                           \
  } while (0)

static uint16_t bf16_of(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* NaN */
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float f32_of_bf16(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* The shape of x: dims when given, else its dim attribute, else its length. */
static int shape_of(SEXP x, SEXP dims, int64_t *d) {
  SEXP dm = dims != R_NilValue ? dims : Rf_getAttrib(x, R_DimSymbol);
  if (dm == R_NilValue) {
    d[0] = (int64_t)XLENGTH(x);
    return 1;
  }
  int n = (int)XLENGTH(dm);
  if (n > RG_MAX_DIMS)
    rgr_signal(RG_ERR_MISUSE, "an array of %d dimensions: resgrad tensors have at most %d",
               n, RG_MAX_DIMS);
  int64_t numel = 1;
  for (int i = 0; i < n; i++) {
    d[i] = Rf_isReal(dm) ? (int64_t)REAL(dm)[i] : (int64_t)INTEGER(dm)[i];
    numel *= d[i];
  }
  if (numel != (int64_t)XLENGTH(x))
    rgr_signal(RG_ERR_MISUSE, "the dimensions given hold %lld elements but the value has "
               "%lld", (long long)numel, (long long)XLENGTH(x));
  return n;
}

void *rgr_host_buffer(SEXP x, SEXP dims, int *dtype, int *ndim, int64_t *d) {
  if (!(Rf_isNumeric(x) || Rf_isLogical(x) || Rf_isFactor(x)))
    rgr_signal(RG_ERR_MISUSE, "a tensor is made from a numeric, integer, logical or factor "
               "R value, not %s", Rf_type2char(TYPEOF(x)));
  int n = shape_of(x, dims, d);
  int64_t numel = 1;
  for (int i = 0; i < n; i++) numel *= d[i];
  int is_int = TYPEOF(x) == INTSXP && !Rf_isFactor(x) ? 1 : Rf_isFactor(x) ? 2 : 0;
  if (*dtype < 0) *dtype = is_int ? RG_I32 : RG_F32;
  void *buf = R_alloc((size_t)(numel > 0 ? numel : 1), *dtype == RG_BF16 ? 2 : 4);
  const double *xr = TYPEOF(x) == REALSXP ? REAL(x) : NULL;
  const int *xi = TYPEOF(x) == REALSXP ? NULL : TYPEOF(x) == LGLSXP ? LOGICAL(x) : INTEGER(x);
  int off = is_int == 2 ? 1 : 0; /* a factor's codes count from 1 */
  if (*dtype == RG_I32) {
    int32_t *o = buf;
    RGR_WALK(n, d, numel, {
      double v = xr ? xr[c] : (double)xi[c];
      if ((xr && ISNAN(v)) || (!xr && xi[c] == NA_INTEGER))
        rgr_signal(RG_ERR_MISUSE, "an NA where an I32 tensor needs an integer");
      o[r] = (int32_t)v - off;
    });
  } else if (*dtype == RG_BF16) {
    uint16_t *o = buf;
    RGR_WALK(n, d, numel, {
      o[r] = bf16_of(xr ? (float)xr[c] : xi[c] == NA_INTEGER ? NAN : (float)(xi[c] - off));
    });
  } else if (*dtype == RG_F32) {
    float *o = buf;
    RGR_WALK(n, d, numel, {
      o[r] = xr ? (float)xr[c] : xi[c] == NA_INTEGER ? NAN : (float)(xi[c] - off);
    });
  } else {
    rgr_signal(RG_ERR_MISUSE, "dtype %d is not one of f32, bf16, i32", *dtype);
  }
  *ndim = n;
  return buf;
}

rg_tensor rgr_upload(SEXP cx, SEXP x, SEXP dims, int dtype, int persistent) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  int64_t d[RG_MAX_DIMS];
  int n = 0;
  void *buf = rgr_host_buffer(x, dims, &dtype, &n, d);
  rg_tensor t = persistent ? rg_constant(ctx, (rg_dtype)dtype, n, d, buf)
                           : rg_input(ctx, (rg_dtype)dtype, n, d, buf);
  if (t.id == 0) rgr_fail(ctx);
  return t;
}

SEXP rgr_download(SEXP cx, rg_tensor t) {
  rg_ctx *ctx = rgr_ctx_ptr(cx);
  int n = rg_ndim(ctx, t);
  if (rg_error(ctx) != RG_OK) rgr_fail(ctx);
  int64_t d[RG_MAX_DIMS], numel = rg_numel(ctx, t);
  for (int i = 0; i < n; i++) d[i] = rg_dim(ctx, t, i);
  rg_dtype dt = rg_dtype_of(ctx, t);
  size_t es = dt == RG_BF16 ? 2 : 4;
  void *buf = R_alloc((size_t)(numel > 0 ? numel : 1), es);
  rgr_check(ctx, rg_read(ctx, t, buf, (size_t)numel * es));
  SEXP out = PROTECT(Rf_allocVector(dt == RG_I32 ? INTSXP : REALSXP, (R_xlen_t)numel));
  if (dt == RG_I32) {
    const int32_t *b = buf;
    int *o = INTEGER(out);
    RGR_WALK(n, d, numel, { o[c] = b[r]; });
  } else if (dt == RG_BF16) {
    const uint16_t *b = buf;
    double *o = REAL(out);
    RGR_WALK(n, d, numel, { o[c] = f32_of_bf16(b[r]); });
  } else {
    const float *b = buf;
    double *o = REAL(out);
    RGR_WALK(n, d, numel, { o[c] = b[r]; });
  }
  if (n > 0) {
    SEXP dm = PROTECT(Rf_allocVector(INTSXP, n));
    for (int i = 0; i < n; i++) INTEGER(dm)[i] = (int)d[i];
    Rf_setAttrib(out, R_DimSymbol, dm);
    UNPROTECT(1);
  }
  UNPROTECT(1);
  return out;
}

SEXP rgr_named_reals(const char *const *names, const double *v, int n) {
  SEXP out = PROTECT(Rf_allocVector(REALSXP, n));
  SEXP nm = PROTECT(Rf_allocVector(STRSXP, n));
  for (int i = 0; i < n; i++) {
    REAL(out)[i] = v[i];
    SET_STRING_ELT(nm, i, Rf_mkChar(names[i]));
  }
  Rf_setAttrib(out, R_NamesSymbol, nm);
  UNPROTECT(2);
  return out;
}
