/* Stdcopy frames from a block of json-file log lines of svc's exact writer shape.
 *
 * svc/wire/jsonlog_parse.py frames a block in Python at about 250 MB/s of payload: a bytes
 * object per record is the floor there. This does the same block in one pass. It is only
 * the fast path's twin (jsonlog_parse._plain + _frames): every line must be
 *
 *   {"log":"<TEXT>\n","stream":"<stdout|stderr>","time":"<30 bytes>"}\n
 *
 * with TEXT free of '"', '\\' and newlines (nothing escaped), all lines of the first line's
 * stream. Anything else returns -1 and Python parses the block as before; so whatever this
 * accepts, the Python fast path accepts too, with the same bytes out (the unit tests check
 * both ways on the same blocks).
 *
 * Each record becomes [code 0 0 0 BE32(len(TEXT)+1)] TEXT "\n". The output is never longer
 * than the input (a record's JSON costs at least 71 bytes more than its frame's 8).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

static const char HEAD[] = "{\"log\":\"";                           /* 8 */
static const char MID_OUT[] = "\\n\",\"stream\":\"stdout\",\"time\":\""; /* 30 */
static const char MID_ERR[] = "\\n\",\"stream\":\"stderr\",\"time\":\""; /* 30 */
static const char TAIL[] = "\"}\n";                                  /* 3 */
#define HEAD_LEN 8
#define MID_LEN 30
#define TIME_LEN 30
#define TAIL_LEN 3

/* in[0..n) -> out (room for n bytes); the frames' length, or -1 (not the exact shape).
 * *code: 1 stdout, 2 stderr (the first line's). */
ssize_t svc_frame_plain(const char *in, size_t n, char *out, int *code)
{
    const char *p = in, *end = in + n, *mid = NULL;
    char *o = out;
    int c = 0;
    while (p < end) {
        if ((size_t)(end - p) < HEAD_LEN || memcmp(p, HEAD, HEAD_LEN) != 0)
            return -1;
        /* TEXT ends at its escaped newline's backslash; then no quote or raw newline may
         * come before it (glibc's memchr is vectorised: three passes beat one loop) */
        const char *text = p + HEAD_LEN;
        const char *q = memchr(text, '\\', (size_t)(end - text));
        if (q == NULL || memchr(text, '"', (size_t)(q - text)) != NULL
            || memchr(text, '\n', (size_t)(q - text)) != NULL)
            return -1;
        if ((size_t)(end - q) < MID_LEN + TIME_LEN + TAIL_LEN)
            return -1;
        if (mid == NULL) {
            if (memcmp(q, MID_OUT, MID_LEN) == 0) {
                mid = MID_OUT;
                c = 1;
            } else if (memcmp(q, MID_ERR, MID_LEN) == 0) {
                mid = MID_ERR;
                c = 2;
            } else {
                return -1;
            }
        } else if (memcmp(q, mid, MID_LEN) != 0) {
            return -1;
        }
        if (memcmp(q + MID_LEN + TIME_LEN, TAIL, TAIL_LEN) != 0)
            return -1;
        size_t len = (size_t)(q - text);
        if (len + 1 > UINT32_MAX)
            return -1;
        uint32_t size = (uint32_t)(len + 1);
        o[0] = (char)c;
        o[1] = o[2] = o[3] = 0;
        o[4] = (char)(size >> 24);
        o[5] = (char)(size >> 16);
        o[6] = (char)(size >> 8);
        o[7] = (char)size;
        memcpy(o + 8, text, len);
        o[8 + len] = '\n';
        o += 9 + len;
        p = q + MID_LEN + TIME_LEN + TAIL_LEN;
    }
    *code = c;
    return o - out;
}
