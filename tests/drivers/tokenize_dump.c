/* Test driver for tests/py/test_tokenizer_hf.py: runs the C tokenizer over documents.
 *
 *   tokenize_dump encode FILE        plain-text encoding, one line of ids per document
 *   tokenize_dump encode-added FILE  the same with added tokens (HF encode)
 *   tokenize_dump decode FILE        FILE has one line of ids per document; writes each
 *                                    decoded document as a record
 *
 * A record is "<byte length>\n<bytes>"; documents in FILE are records too. A document the
 * tokenizer refuses gives the line "error". The tokenizer is $DI_DATA/tokenizer/tokenizer.json
 * (DI_DATA defaults to "data"). */
#include "tokenizer.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static tokenizer_t *load(void)
{
    const char *data = getenv("DI_DATA");
    char path[4096], err[1024];
    snprintf(path, sizeof path, "%s/tokenizer/tokenizer.json", data && *data ? data : "data");
    tokenizer_t *t = tokenizer_load(path, err, sizeof err);
    if (!t) die("%s", err);
    return t;
}

/* Next record of the file at *pos: its bytes in [*doc, *doc + *len). */
static bool next_record(const char *file, size_t size, size_t *pos, const char **doc, size_t *len)
{
    if (*pos >= size) return false;
    char *end;
    unsigned long long n = strtoull(file + *pos, &end, 10);
    if (*end != '\n' || n > size - (size_t)(end + 1 - file)) die("malformed record at byte %zu", *pos);
    *doc = end + 1;
    *len = (size_t)n;
    *pos = (size_t)(end + 1 - file) + (size_t)n;
    return true;
}

static void encode_all(const tokenizer_t *t, const char *file, size_t size, bool added, FILE *out)
{
    size_t pos = 0, len;
    const char *doc;
    ids_t ids = {0};
    while (next_record(file, size, &pos, &doc, &len)) {
        ids.n = 0;
        int rc = added ? tokenizer_encode_with_added(t, doc, len, &ids) : tokenizer_encode(t, doc, len, &ids);
        if (rc) {
            fputs("error\n", out);
            continue;
        }
        for (size_t i = 0; i < ids.n; i++) fprintf(out, i ? " %u" : "%u", ids.v[i]);
        fputc('\n', out);
    }
    ids_free(&ids);
}

/* One document per line, empty lines included (an empty document has no ids). */
static void decode_all(const tokenizer_t *t, char *file, FILE *out)
{
    ids_t ids = {0};
    buf_t text = {0};
    for (char *line = file, *eol; (eol = strchr(line, '\n')); line = eol + 1) {
        *eol = 0;
        ids.n = 0;
        buf_clear(&text);
        for (char *p = line, *end; *p; p = end) {
            int64_t id;
            end = strchr(p, ' ');
            if (end) *end++ = 0;
            else end = p + strlen(p);
            if (!parse_i64(p, 0, UINT32_MAX, &id)) die("bad id \"%s\"", p);
            ids_push(&ids, (uint32_t)id);
        }
        if (tokenizer_decode(t, ids.v, ids.n, &text)) {
            fputs("error\n", out);
            continue;
        }
        fprintf(out, "%zu\n", text.len);
        if (text.len) fwrite(text.data, 1, text.len, out);
    }
    ids_free(&ids);
    buf_free(&text);
}

int main(int argc, char **argv)
{
    if (argc != 3) die("usage: tokenize_dump encode|encode-added|decode FILE");
    size_t size;
    char *file = read_file(argv[2], &size);
    if (!file) die("cannot read %s", argv[2]);
    tokenizer_t *t = load();
    if (!strcmp(argv[1], "encode") || !strcmp(argv[1], "encode-added"))
        encode_all(t, file, size, !strcmp(argv[1], "encode-added"), stdout);
    else if (!strcmp(argv[1], "decode"))
        decode_all(t, file, stdout);
    else
        die("unknown mode %s", argv[1]);
    tokenizer_free(t);
    free(file);
    return 0;
}
