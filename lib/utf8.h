/* UTF-8 checks shared by every parser that accepts text from outside. */
#ifndef DI_UTF8_H
#define DI_UTF8_H

#include <stdbool.h>
#include <stddef.h>

/* True when s[0..len) is well-formed UTF-8 (no overlongs, no surrogates, <= U+10FFFF). */
bool utf8_valid(const char *s, size_t len);

/* Length of the well-formed UTF-8 sequence starting at s (1..4), or 0 if it is not one,
 * or is cut short by len. */
size_t utf8_sequence_length(const unsigned char *s, size_t len);

#endif
