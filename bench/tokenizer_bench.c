/* Tokenizer throughput on one thread: encodes every document of a corpus (records
 * "<len>\n<bytes>", as tests/py/make_corpus.py writes them) several times and prints MB/s.
 * bench/tokenizer_bench.py runs it next to HF tokenizers on the same corpus.
 *
 *   tokenizer_bench [--added] [--repeat N] CORPUS
 *
 * The tokenizer is $DI_TOKENIZER or the default path (see tokenizer_default_path). */
#include "tokenizer.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *text;
    size_t len;
} doc_t;

static doc_t *read_corpus(char *file, size_t size, size_t *ndocs, size_t *bytes)
{
    size_t cap = 1024, n = 0, pos = 0;
    doc_t *docs = xmalloc(cap * sizeof *docs);
    *bytes = 0;
    while (pos < size) {
        char *end;
        unsigned long long len = strtoull(file + pos, &end, 10);
        if (*end != '\n' || len > size - (size_t)(end + 1 - file)) die("malformed corpus record at byte %zu", pos);
        if (n == cap) docs = xrealloc(docs, (cap *= 2) * sizeof *docs);
        docs[n++] = (doc_t){end + 1, (size_t)len};
        *bytes += (size_t)len;
        pos = (size_t)(end + 1 - file) + (size_t)len;
    }
    *ndocs = n;
    return docs;
}

int main(int argc, char **argv)
{
    bool added = false;
    int64_t repeat = 3;
    const char *corpus = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--added")) added = true;
        else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) {
            if (!parse_i64(argv[++i], 1, 1000, &repeat)) die("--repeat wants 1..1000");
        } else if (!corpus) corpus = argv[i];
        else die("usage: tokenizer_bench [--added] [--repeat N] CORPUS");
    }
    if (!corpus) die("usage: tokenizer_bench [--added] [--repeat N] CORPUS");
    size_t size, ndocs, bytes;
    char *file = read_file(corpus, &size);
    if (!file) die("cannot read %s", corpus);
    doc_t *docs = read_corpus(file, size, &ndocs, &bytes);

    char err[1024];
    uint64_t t0 = now_ns();
    tokenizer_t *t = tokenizer_load(tokenizer_default_path(), err, sizeof err);
    if (!t) die("%s", err);
    double load_s = (double)(now_ns() - t0) / 1e9;

    ids_t ids = {0};
    size_t tokens = 0;
    double best = 0, first = 0;
    for (int64_t r = 0; r < repeat; r++) {
        tokens = 0;
        uint64_t start = now_ns();
        for (size_t i = 0; i < ndocs; i++) {
            ids.n = 0;
            int rc = added ? tokenizer_encode_with_added(t, docs[i].text, docs[i].len, &ids)
                           : tokenizer_encode(t, docs[i].text, docs[i].len, &ids);
            if (rc) die("document %zu was refused", i);
            tokens += ids.n;
        }
        double mbps = (double)bytes / 1e6 / ((double)(now_ns() - start) / 1e9);
        if (mbps > best) best = mbps;
        if (r == 0) first = mbps; /* the word cache starts empty */
    }
    printf("docs %zu bytes %zu tokens %zu load_s %.3f mode %s first_MB/s %.2f best_of %lld MB/s %.2f\n", ndocs, bytes,
           tokens, load_s, added ? "added" : "plain", first, (long long)repeat, best);
    ids_free(&ids);
    tokenizer_free(t);
    free(docs);
    free(file);
    return 0;
}
