/* Logging to stderr, one line per message, prefixed with the program name.
 * stdout belongs to the data stream, so nothing here ever writes there. */
#ifndef DI_LOG_H
#define DI_LOG_H

typedef enum { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 } log_level_t;

void log_init(const char *program);
const char *log_program(void);
void log_set_level(log_level_t level);
log_level_t log_get_level(void);
void log_msg(log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...)  log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...)  log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
