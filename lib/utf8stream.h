/* Bytes to UTF-8 text, incrementally: a character whose bytes arrive in several pieces is
 * emitted once complete; ill-formed bytes become U+FFFD, one per maximal subpart (Unicode's
 * recommended practice, which Rust's String::from_utf8_lossy and so HF tokenizers' byte-level
 * decode follow); an incomplete character left at the very end becomes U+FFFD too. */
#ifndef DI_UTF8STREAM_H
#define DI_UTF8STREAM_H

#include "util.h"

#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint8_t pend[4]; /* a well-formed prefix of a character still waiting for bytes */
    size_t npend;
    size_t need;     /* its full length */
} utf8stream_t;

/* Appends to out the text of bytes[0..n), holding back an incomplete character. */
void utf8stream_push(utf8stream_t *s, const uint8_t *bytes, size_t n, buf_t *out);
/* End of input: an incomplete character becomes U+FFFD. */
void utf8stream_finish(utf8stream_t *s, buf_t *out);

#endif
