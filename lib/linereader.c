#include "linereader.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

void linereader_init(linereader_t *r, int fd, size_t max_line)
{
    *r = (linereader_t){.fd = fd, .max_line = max_line};
}

/* Reads more bytes; false at end of input or on error (errno set). */
static bool fill(linereader_t *r)
{
    if (r->pos) {
        memmove(r->buf.data, r->buf.data + r->pos, r->buf.len - r->pos);
        r->buf.len -= r->pos;
        r->pos = 0;
    }
    buf_reserve(&r->buf, 1 << 16);
    for (;;) {
        ssize_t n = read(r->fd, r->buf.data + r->buf.len, r->buf.cap - r->buf.len - 1);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            r->eof = true;
            return false;
        }
        r->buf.len += (size_t)n;
        return true;
    }
}

line_result_t linereader_next(linereader_t *r, const char **line, size_t *len)
{
    size_t scanned = 0; /* bytes of the current line already known to hold no newline */
    size_t skipped = 0; /* bytes of an over-long line already thrown away */
    for (;;) {
        uint8_t *start = r->buf.data + r->pos;
        size_t avail = r->buf.len - r->pos;
        uint8_t *nl = avail > scanned ? memchr(start + scanned, '\n', avail - scanned) : NULL;
        size_t line_len = nl ? (size_t)(nl - start) : avail;
        if (skipped || line_len > r->max_line) {
            /* Too long: drop what we have and keep going to the end of the line. */
            skipped += line_len;
            r->pos += line_len + (nl != NULL);
            scanned = 0;
            if (nl || r->eof) {
                r->line_no++;
                *len = skipped;
                return LINE_TOO_LONG;
            }
            fill(r); /* at end of input the next pass reports the line */
            continue;
        }
        if (nl || (r->eof && avail)) {
            r->pos += line_len + (nl != NULL);
            if (line_len && start[line_len - 1] == '\r') line_len--;
            r->line_no++;
            *line = (const char *)start;
            *len = line_len;
            return LINE_OK;
        }
        if (r->eof) return LINE_END;
        scanned = avail;
        errno = 0;
        if (!fill(r) && errno) return LINE_ERROR;
    }
}

void linereader_free(linereader_t *r)
{
    buf_free(&r->buf);
}
