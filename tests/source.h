/*
 * source.h - the tests that read the project's own source text (test_layers, test_optable)
 * find it through RG_SOURCE_DIR, which ctest sets to the checkout.
 */
#ifndef RG_TESTS_SOURCE_H
#define RG_TESTS_SOURCE_H

/* The file RG_SOURCE_DIR/path, NUL-terminated (the caller frees it); NULL when
   RG_SOURCE_DIR is unset or the file cannot be read. */
char *read_source(const char *path);

#endif
