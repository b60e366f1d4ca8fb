/* Reads input one line at a time with a bound on the line length: a longer line is
 * consumed to its end and reported as too long, so it costs one error, not the process. */
#ifndef DI_LINEREADER_H
#define DI_LINEREADER_H

#include "util.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int fd;
    size_t max_line;
    buf_t buf;          /* bytes read but not yet returned, from pos */
    size_t pos;
    bool eof;
    uint64_t line_no;   /* 1-based number of the line last returned */
} linereader_t;

typedef enum { LINE_OK = 1, LINE_END = 0, LINE_TOO_LONG = -1, LINE_ERROR = -2 } line_result_t;

void linereader_init(linereader_t *r, int fd, size_t max_line);
/* LINE_OK: *line and *len hold the line without its "\n" (and without a "\r" before it); valid
 * until the next call. LINE_TOO_LONG: the line was skipped; *len holds how long it was.
 * A last line without a newline is still a line. */
line_result_t linereader_next(linereader_t *r, const char **line, size_t *len);
void linereader_free(linereader_t *r);

#endif
