/*
 * test_layers.c - the calls between the files of src/core go one way: down its layers.
 *
 * Every file of src/core has a layer (the table below; docs/ARCHITECTURE.md lists the
 * same order). A file may call the functions of its own layer and of lower ones, never
 * of a higher one, so each layer can be read knowing only those below it and no circle
 * of calls crosses layers. A file of src/core missing from the table fails the test (a
 * new file must be placed), and so does a name in the table that is not a file there.
 * The core reaches the backends only through their rg_backend tables: a call from the
 * core to a function defined in src/cpu, src/cuda, src/nn or src/text fails too. src/text
 * (the tokenizer) stands apart the other way as well: its files call only functions
 * defined in src/text, so the tokenizer is plain host code that needs no context.
 *
 * The source text is read under RG_SOURCE_DIR (ctest sets it), with comments, strings
 * and character constants blanked. A definition is a line at column 0, outside braces,
 * that starts with a return type and whose first name followed by '(' is the function's,
 * with a '{' before any ';' after it. A call is a name followed by '(' inside braces (a
 * function body) or on a preprocessor line. Only names starting with rg_ count. A
 * self-check first runs the same scan on a few lines written to trip it.
 */
#include "common.h"
#include "source.h"

#include <ctype.h>
#include <dirent.h>
#include <stdbool.h>

/* The layers of src/core, lowest first. */
enum { LEAF, BASE, TENSOR, QUEUE, RECORD, TRAIN, CONTEXT };
static const char *const layer_name[] = {"leaf",   "base",  "tensor", "queue",
                                         "record", "train", "context"};

static const struct { const char *file; int layer; } table[] = {
    /* call nothing else in the core: the shared headers, host memory, the sticky error,
       the trace file, the RG_PROFILE table (which every layer and backend reports to),
       the notice sink */
    {"internal.h", LEAF}, {"ops.h", LEAF}, {"philox.h", LEAF}, {"sched.h", LEAF},
    {"sample.h", LEAF},
    {"alloc.c", LEAF}, {"error.c", LEAF}, {"trace.c", LEAF},
    {"profile.c", LEAF}, {"notice.c", LEAF},
    /* labels; the dry-run backend */
    {"label.c", BASE}, {"dry.c", BASE},
    /* arenas, tensors and their handles, parameters, describing handles */
    {"arena.c", TENSOR}, {"tensor.c", TENSOR}, {"param.c", TENSOR}, {"inspect.c", TENSOR},
    /* recording nodes, draining them, resetting the pools */
    {"queue.c", QUEUE},
    /* what records nodes: transfers, ops, autograd and the all-reduces it records
       (dist.c), BF16 shadows, checkpoint regions and their recomputation */
    {"transfer.c", RECORD}, {"ops.c", RECORD}, {"autograd.c", RECORD}, {"shadow.c", RECORD},
    {"dist.c", RECORD}, {"share.c", RECORD}, {"recompute.c", RECORD}, {"ring.c", RECORD},
    {"state.c", RECORD}, {"decode.c", RECORD},
    /* optimizers, checkpoints, gradient checks, token datasets (their batches are
       rg_input's uploads) */
    {"optim.c", TRAIN}, {"checkpoint.c", TRAIN}, {"gradcheck.c", TRAIN}, {"data.c", TRAIN},
    /* rg_open and rg_close */
    {"context.c", CONTEXT},
};
#define NTABLE ((int)(sizeof table / sizeof *table))

#define OUTSIDE (-1) /* the layer of a file outside the core (a backend, src/nn) */
#define APART (-2)   /* outside the core, and calling nothing outside its own folder */

typedef struct src { char path[128]; char *text; int layer; } src;
typedef struct defn { const char *name; size_t len; int src; } defn; /* name: in src's text */

/* ---- reading ------------------------------------------------------------------------- */

static int by_name(const void *a, const void *b) { return strcmp(a, b); }

/* The names in RG_SOURCE_DIR/dir that end in .c, .h or .cu, sorted; how many (at most
   cap), or -1 if the folder cannot be read. */
static int list_dir(const char *dir, char (*names)[64], int cap) {
  char full[4096];
  snprintf(full, sizeof full, "%s/%s", getenv("RG_SOURCE_DIR"), dir);
  DIR *d = opendir(full);
  if (!d) return -1;
  int n = 0;
  for (struct dirent *e; (e = readdir(d)) && n < cap;) {
    const char *dot = strrchr(e->d_name, '.');
    if (dot && (!strcmp(dot, ".c") || !strcmp(dot, ".h") || !strcmp(dot, ".cu")) &&
        strlen(e->d_name) < sizeof *names)
      snprintf(names[n++], sizeof *names, "%s", e->d_name);
  }
  closedir(d);
  qsort(names, (size_t)n, sizeof *names, by_name);
  return n;
}

/* Blanks comments, string literals and character constants, newlines kept, so that what
   is left is code. */
static void blank(char *s) {
  for (char *p = s; *p;) {
    if (p[0] == '/' && p[1] == '*') {
      char *e = strstr(p + 2, "*/"), *end = e ? e + 2 : p + strlen(p);
      for (; p < end; p++)
        if (*p != '\n') *p = ' ';
    } else if (p[0] == '/' && p[1] == '/') {
      for (; *p && *p != '\n'; p++) *p = ' ';
    } else if (*p == '"' || *p == '\'') {
      char q = *p;
      *p++ = ' ';
      while (*p && *p != q && *p != '\n') {
        if (*p == '\\' && p[1] && p[1] != '\n') *p++ = ' ';
        *p++ = ' ';
      }
      if (*p == q) *p++ = ' ';
    } else {
      p++;
    }
  }
}

/* ---- scanning ------------------------------------------------------------------------ */

static bool ident_char(char c) { return isalnum((unsigned char)c) || c == '_'; }

/* The length of the identifier at p if one starts there and '(' follows it at once, else 0. */
static size_t called(const char *text, const char *p) {
  if ((p > text && ident_char(p[-1])) || !(isalpha((unsigned char)*p) || *p == '_')) return 0;
  size_t n = 0;
  while (ident_char(p[n])) n++;
  return p[n] == '(' ? n : 0;
}

static bool is_rg(const char *p, size_t n) { return n > 3 && !strncmp(p, "rg_", 3); }

/* Walks a blanked text, calling visit for every rg_ name followed by '(' that heads a
   definition (def, see the top of the file) or is a call (!def); a prototype is neither.
   The braces of a C++ linkage block (extern "C" {) do not count as a body's. */
typedef void visit_fn(void *user, const char *name, size_t len, bool def);
static void walk(const char *text, visit_fn *visit, void *user) {
  int depth = 0;
  bool pp = false, cont = false; /* on a preprocessor line; the last one went on */
  for (const char *line = text; *line;) {
    const char *eol = strchr(line, '\n');
    if (!eol) eol = line + strlen(line);
    const char *s = line;
    while (s < eol && (*s == ' ' || *s == '\t')) s++;
    pp = cont || *s == '#';
    cont = pp && eol > line && eol[-1] == '\\';
    bool head = !pp && depth == 0 && (isalpha((unsigned char)*line) || *line == '_');
    bool linkage = !strncmp(s, "extern", 6) && s[6 + strspn(s + 6, " ")] == '{';
    for (const char *p = line; p < eol; p++) {
      size_t n = called(text, p);
      if (n) {
        bool def = false;
        if (head) { /* the line's first call-like name: a definition or a prototype */
          def = p[n + strcspn(p + n, "{;")] == '{';
          head = false;
        }
        if (is_rg(p, n) && (def || pp || depth > 0)) visit(user, p, n, def);
        p += n - 1;
      } else if (!pp && !linkage && *p == '{') {
        depth++;
      } else if (!pp && *p == '}' && depth > 0) {
        depth--;
      }
    }
    line = *eol ? eol + 1 : eol;
  }
}

typedef struct scan {
  src *s;
  int n;
  defn *defs;
  int ndefs, cap;
  int cur;        /* the file being walked */
  int edges;      /* calls across files of the core that were checked */
  int bad;        /* functions called against the layers, duplicate definitions */
  bool quiet;     /* the self-check: count, do not print */
  const defn *said[256]; /* the functions the current file was faulted for (once each) */
  int nsaid;
} scan;

static const defn *find(const scan *c, const char *name, size_t len, bool core) {
  for (int i = 0; i < c->ndefs; i++) {
    const defn *d = &c->defs[i];
    if (d->len == len && !memcmp(d->name, name, len) && (c->s[d->src].layer >= 0) == core)
      return d;
  }
  return NULL;
}

static void add_def(void *user, const char *name, size_t len, bool def) {
  scan *c = user;
  if (!def) return;
  const defn *twin = c->s[c->cur].layer >= 0 ? find(c, name, len, true) : NULL;
  if (twin && twin->src != c->cur) {
    c->bad++;
    if (!c->quiet)
      fprintf(stderr, "%s and %s both define %.*s: keep one\n", c->s[twin->src].path,
              c->s[c->cur].path, (int)len, name);
    return;
  }
  if (c->ndefs == c->cap) {
    c->cap = c->cap ? 2 * c->cap : 256;
    defn *d = realloc(c->defs, sizeof *d * (size_t)c->cap);
    if (!d) abort();
    c->defs = d;
  }
  c->defs[c->ndefs++] = (defn){name, len, c->cur};
}

/* Whether the current file was faulted for calling d before; notes it if not. */
static bool said(scan *c, const defn *d) {
  for (int i = 0; i < c->nsaid; i++)
    if (c->said[i] == d) return true;
  if (c->nsaid < (int)(sizeof c->said / sizeof *c->said)) c->said[c->nsaid++] = d;
  return false;
}

static void check_call(void *user, const char *name, size_t len, bool def) {
  scan *c = user;
  if (def) return;
  const src *from = &c->s[c->cur];
  const defn *d = find(c, name, len, true);
  if (d && d->src == c->cur) return;
  if (d) {
    const src *to = &c->s[d->src];
    c->edges++;
    if (from->layer >= to->layer || said(c, d)) return;
    c->bad++;
    if (!c->quiet)
      fprintf(stderr, "%s (layer %s) calls %.*s, defined in %s (layer %s, higher): move the "
              "function down, or the call up\n", from->path, layer_name[from->layer],
              (int)len, name, to->path, layer_name[to->layer]);
  } else if ((d = find(c, name, len, false)) && !said(c, d)) {
    c->bad++;
    if (!c->quiet)
      fprintf(stderr, "%s calls %.*s, defined in %s outside the core: reach a backend "
              "through its rg_backend table\n", from->path, (int)len, name, c->s[d->src].path);
  }
}

/* The length of path's folder ("src/text/" of "src/text/bpe.c"). */
static size_t folder_len(const char *path) {
  const char *slash = strrchr(path, '/');
  return slash ? (size_t)(slash - path) + 1 : 0;
}

/* A call from a file that stands apart: it must be to its own folder. */
static void check_apart_call(void *user, const char *name, size_t len, bool def) {
  scan *c = user;
  if (def) return;
  const src *from = &c->s[c->cur];
  const defn *d = find(c, name, len, true);
  if (!d) d = find(c, name, len, false);
  if (!d) return;
  const char *to = c->s[d->src].path;
  size_t k = folder_len(from->path);
  if (k == folder_len(to) && !strncmp(from->path, to, k)) return;
  if (said(c, d)) return;
  c->bad++;
  if (!c->quiet)
    fprintf(stderr, "%s calls %.*s, defined in %s: %.*s depends on nothing else of the "
            "library; move what it needs into it\n", from->path, (int)len, name, to,
            (int)k - 1, from->path);
}

/* Finds the definitions of every file, then checks the calls of the core's files and of
   the files that stand apart. */
static void run(scan *c) {
  for (c->cur = 0; c->cur < c->n; c->cur++) walk(c->s[c->cur].text, add_def, c);
  for (c->cur = 0; c->cur < c->n; c->cur++) {
    c->nsaid = 0;
    if (c->s[c->cur].layer >= 0) walk(c->s[c->cur].text, check_call, c);
    if (c->s[c->cur].layer == APART) walk(c->s[c->cur].text, check_apart_call, c);
  }
}

/* ---- the checks ---------------------------------------------------------------------- */

/* The scan on lines written to trip it: calls in a comment and in a string, a prototype,
   a definition over two lines, a C++ linkage block. The faults are a.c (layer 0) calling
   rg_b (layer 1), twice (once in a macro) but counted once, and b.c calling out of the
   core; b.c's call down to rg_a is the third call across files. t/apart.c stands apart:
   its call to rg_t2 (its own folder) is fine, its call to rg_a2 of the core a fault. */
static void self_check(void) {
  char a[] = "/* rg_b() is in layer 1 */\n"
             "int rg_b(void);\n"
             "#define B() (rg_b() + \\\n"
             "             rg_a(0, 0))\n"
             "extern \"C\" {\n"
             "static int rg_a(int x,\n"
             "                int y) {\n"
             "  const char *s = \"rg_b(\";\n"
             "  return x + y + (s[0] == '\\'');\n"
             "}\n"
             "}\n"
             "int rg_a2(void) { return rg_b(); }\n";
  char b[] = "int rg_b(void) {\n"
             "  return rg_a(1, 2) + rg_out(); // not rg_c()\n"
             "}\n";
  char o[] = "int rg_out(void) { return 0; }\n";
  char t[] = "int rg_t(void) { return rg_t2() + rg_a2(); }\n"
             "int rg_t2(void) { return 0; }\n";
  src s[] = {{"a.c", a, 0}, {"b.c", b, 1}, {"out.c", o, OUTSIDE}, {"t/apart.c", t, APART}};
  for (int i = 0; i < 4; i++) blank(s[i].text);
  scan c = {.s = s, .n = 4, .quiet = true};
  run(&c);
  CHECK(c.ndefs == 6 && c.bad == 3 && c.edges == 3, "self-check: %d definitions (want 6), %d "
        "faults (want 3), %d calls across files (want 3): the scanner is broken", c.ndefs,
        c.bad, c.edges);
  free(c.defs);
}

static int place(const char *file) {
  for (int i = 0; i < NTABLE; i++)
    if (!strcmp(table[i].file, file)) return table[i].layer;
  return -1;
}

/* Adds dir's files to s (layer from the table for the core, else other). */
static void add_dir(src *s, int *n, int cap, const char *dir, bool core, int other) {
  static char names[256][64];
  int k = list_dir(dir, names, 256);
  CHECK(k > 0, "cannot list %s/%s", getenv("RG_SOURCE_DIR"), dir);
  for (int i = 0; i < k && *n < cap; i++) {
    int layer = core ? place(names[i]) : other;
    CHECK(!core || layer >= 0, "%s/%s is not in the layer table of tests/test_layers.c: give "
          "it a layer there and in docs/ARCHITECTURE.md", dir, names[i]);
    if (core && layer < 0) continue;
    src *f = &s[*n];
    snprintf(f->path, sizeof f->path, "%s/%s", dir, names[i]);
    f->layer = layer;
    f->text = read_source(f->path);
    CHECK(f->text, "cannot read %s", f->path);
    if (!f->text) continue;
    blank(f->text);
    ++*n;
  }
}

int main(void) {
  self_check();
  const char *dir = getenv("RG_SOURCE_DIR");
  CHECK(dir && *dir, "RG_SOURCE_DIR is not set: run this test with ctest, or set it to the "
        "checkout");
  if (!dir || !*dir || failed()) return finish();
  static src s[512];
  int n = 0;
  add_dir(s, &n, 512, "src/core", true, 0);
  int ncore = n;
  for (int i = 0; i < NTABLE; i++) {
    bool there = false;
    for (int k = 0; k < ncore; k++) there = there || !strcmp(s[k].path + 9, table[i].file);
    CHECK(there, "the layer table of tests/test_layers.c names %s, which is not a file of "
          "src/core", table[i].file);
  }
  add_dir(s, &n, 512, "src/cpu", false, OUTSIDE);
  add_dir(s, &n, 512, "src/cuda", false, OUTSIDE);
  add_dir(s, &n, 512, "src/nn", false, OUTSIDE);
  add_dir(s, &n, 512, "src/text", false, APART);
  scan c = {.s = s, .n = n};
  run(&c);
  /* A scan that found nothing would pass. */
  CHECK(find(&c, "rg_open", 7, true) && find(&c, "rg__fail", 8, true) && c.edges > 100,
        "the scan found %s rg_open, %s rg__fail and %d calls across files: it is broken",
        find(&c, "rg_open", 7, true) ? "" : "no", find(&c, "rg__fail", 8, true) ? "" : "no",
        c.edges);
  CHECK(c.bad == 0, "%d function(s) called against the layers or defined twice, listed above",
        c.bad);
  if (!failed())
    printf("test_layers: %d files of src/core in %d layers, %d definitions, %d calls across "
           "files, all downward\n", ncore, (int)(sizeof layer_name / sizeof *layer_name),
           c.ndefs, c.edges);
  for (int i = 0; i < n; i++) free(s[i].text);
  free(c.defs);
  return finish();
}
