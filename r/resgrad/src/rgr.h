/*
 * rgr.h - what the C files of the R package resgrad share.
 *
 * Invariants:
 *  - A context is an external pointer (class "ag_context") whose address is an rgr_ctx
 *    holder. Its finalizer closes the library's context only when no optimizer or GPT
 *    holder still needs it (users == 0); otherwise the last of those closes it. R may
 *    run the finalizers of a context and its optimizers in one collection in any order,
 *    so neither order can free an optimizer that rg_close already freed.
 *  - A tensor is an external pointer (class "ag_tensor") with no address: its tag holds
 *    the library's handle (8 raw bytes) and its protected value is the context's external
 *    pointer, so a context outlives every tensor R can still reach. A handle is a value
 *    (generation-checked): releasing an R tensor frees nothing, and a handle kept past
 *    ag_step_begin is stale, which the library reports and R signals as a condition.
 *  - Datasets (ag_data_open) hold a claim on their context's holder as optimizers do, and
 *    for the same reason: rg_close frees them, so each is freed by the package only while
 *    its context is open.
 *  - A closed context (ag_close, or a tensor restored from a saved session) has ctx ==
 *    NULL; every call through it signals a resgrad_error condition.
 *  - Errors become R conditions (rgr_fail, rgr_signal) only after every buffer this
 *    package allocated with malloc is freed: signalling unwinds the C stack. The library's
 *    sticky error is cleared whenever it is turned into a condition.
 */
#ifndef RGR_H
#define RGR_H

#define R_NO_REMAP
#include <R.h>
#include <Rinternals.h>
#include <R_ext/Rdynload.h>

#include <resgrad.h>
#include <resgrad_nn.h>

#if defined(__GNUC__)
#define RGR_NORET __attribute__((noreturn))
#else
#define RGR_NORET
#endif

typedef struct rgr_ctx {
  rg_ctx *ctx; /* NULL once closed */
  int users;   /* optimizer and GPT holders that still refer to it */
  int r_gone;  /* the context's external pointer was finalized */
} rgr_ctx;

typedef struct rgr_enum { const char *name; int value; } rgr_enum;

/* What an optimizer's or a dataset's external pointer holds: the library's object (NULL
   once freed) and a claim on its context's holder (rgr_user_add). rg_close frees such
   objects itself, so they are freed by the package only while h->ctx is open. */
typedef struct rgr_dep { rgr_ctx *h; void *obj; } rgr_dep;

/* errors.c */
RGR_NORET void rgr_fail(rg_ctx *ctx);
RGR_NORET void rgr_signal(rg_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void rgr_check(rg_ctx *ctx, rg_status st); /* rgr_fail unless st is RG_OK */

/* context.c */
rgr_ctx *rgr_holder(SEXP cx);       /* the holder of a context's external pointer */
rg_ctx *rgr_ctx_ptr(SEXP cx);        /* its open context, else a condition */
SEXP rgr_default_ctx(void);          /* the default context (ag_device), opened if none */
SEXP rgr_ctx_of_args(SEXP *ts, int n); /* the context of the tensors among ts (all one),
                                          else the default one */
void rgr_user_add(rgr_ctx *h);
void rgr_user_drop(rgr_ctx *h);      /* closes and frees h when it was the last need */

void *rgr_addr_of(SEXP p, const char *cls, const char *what, const char *remedy);
                                     /* the address of an external pointer of class cls,
                                        else a condition naming what it should be and the
                                        remedy (also for one restored from a saved
                                        session, whose address is NULL) */
SEXP rgr_make_ptr(void *addr, SEXP prot, R_CFinalizer_t fin, const char *cls);
                                     /* an external pointer with a finalizer (run at exit
                                        too) and a class */

/* tensor.c */
extern SEXP rgr_tensor_class;
int rgr_is_tensor(SEXP s);
SEXP rgr_wrap(SEXP cx, rg_tensor t);   /* a new ag_tensor for a live handle */
SEXP rgr_result(SEXP cx, rg_tensor t); /* rgr_wrap, or the sticky error for RG_NONE */
rg_tensor rgr_handle(SEXP s);          /* the handle of an ag_tensor (else a condition) */
SEXP rgr_ctx_of(SEXP s);               /* the context external pointer of an ag_tensor */
rg_tensor rgr_tensor_arg(SEXP cx, SEXP s, const char *name);
double rgr_float_arg(SEXP s, const char *name);
long long rgr_int_arg(SEXP s, const char *name);
int rgr_axis_arg(SEXP s, const char *name);
int rgr_enum_arg(SEXP s, const char *name, const rgr_enum *e);
int rgr_dims_arg(SEXP s, const char *name, int64_t *dims);
void rgr_perm_arg(SEXP cx, rg_tensor x, SEXP s, const char *name, int *perm);

/* convert.c: R's column-major arrays to the library's row-major tensors and back */
rg_tensor rgr_upload(SEXP cx, SEXP x, SEXP dims, int dtype, int persistent);
void *rgr_host_buffer(SEXP x, SEXP dims, int *dtype, int *ndim, int64_t *d);
SEXP rgr_download(SEXP cx, rg_tensor t);
SEXP rgr_named_reals(const char *const *names, const double *v, int n);

/* ops.c (generated) */
extern const R_CallMethodDef rgr_op_methods[];

#endif
