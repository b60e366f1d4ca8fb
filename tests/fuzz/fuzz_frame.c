/* libFuzzer target: the frame decoder and the stream framer on arbitrary bytes. A frame
 * that decodes must re-encode and decode to the same bytes. */
#include "frame.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[256];
    int64_t n = frame_wire_length(data, size, err, sizeof err);
    if (n > (int64_t)size) abort();
    frame_t f;
    char *id = NULL;
    uint64_t seq;
    if (frame_decode(data, size, &f, &id, &seq, err, sizeof err) == 0) {
        buf_t a = {0}, b = {0};
        frame_encode(&f, &a);
        frame_t g;
        if (frame_decode(a.data, a.len, &g, NULL, NULL, err, sizeof err) != 0) abort();
        frame_encode(&g, &b);
        if (a.len != b.len || memcmp(a.data, b.data, a.len)) abort();
        frame_free(&g);
        frame_free(&f);
        buf_free(&a);
        buf_free(&b);
    }
    free(id);
    return 0;
}
