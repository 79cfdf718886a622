/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * output.c: rendering results.
 *
 * Tables pick a few columns per command (sizes in binary units); JSON
 * carries every value of every key, with a shape that depends on the key
 * only (result.h): a key that can repeat is always an array of strings,
 * a text key always a string, other decimal values numbers.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "output.h"
#include "table.h"
#include "result.h"

int fc_outcome_parse(struct fc_outcome *o, char *text)
{
        size_t alloc = 0;

        for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
             line = strtok_r(NULL, "\n", &save)) {
                char *eq = strchr(line, '=');
                if (!eq)
                        continue;
                *eq = '\0';
                fc_result_unescape(eq + 1);
                if (o->count == alloc) {
                        size_t na = alloc ? alloc * 2 : 32;
                        struct fc_pair *p = realloc(o->pairs, na * sizeof(*p));
                        if (!p)
                                return -ENOMEM;
                        o->pairs = p;
                        alloc = na;
                }
                o->pairs[o->count++] = (struct fc_pair){ line, eq + 1 };
        }
        return 0;
}

void fc_outcome_free(struct fc_outcome *o)
{
        free(o->pairs);
        free(o->message);
        o->pairs = NULL;
        o->message = NULL;
        o->count = 0;
}

const char *fc_outcome_get(const struct fc_outcome *o, const char *key)
{
        for (size_t i = 0; i < o->count; i++)
                if (!strcmp(o->pairs[i].key, key))
                        return o->pairs[i].value;
        return NULL;
}

void fc_format_bytes(char *buf, size_t len, unsigned long long bytes)
{
        static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
        double v = (double)bytes;
        int u = 0;

        while (v >= 1024 && u < 6) {
                v /= 1024;
                u++;
        }
        if (u == 0)
                snprintf(buf, len, "%llu B", bytes);
        else
                snprintf(buf, len, "%.1f %s", v, units[u]);
}

enum col_kind { COL_STR, COL_NUM, COL_BYTES, COL_PAGES_AS_BYTES, COL_PERCENT };

struct column {
        const char *header;
        const char *key;
        enum col_kind kind;
        const char *key2; /* COL_PERCENT: key / key2 */
};

static const struct column query_cols[] = {
        { "TYPE", "type", COL_STR, NULL },
        { "FILES", "files", COL_NUM, NULL },
        { "SIZE", "bytes", COL_BYTES, NULL },
        { "CACHED", "bytes_cached", COL_BYTES, NULL },
        { "%", "pages_cached", COL_PERCENT, "pages_total" },
        { "DIRTY", "bytes_dirty", COL_BYTES, NULL },
        { "WRITEBACK", "bytes_writeback", COL_BYTES, NULL },
        { NULL, NULL, 0, NULL },
};

static const struct column change_cols[] = {
        { "FILES", "files", COL_NUM, NULL },
        { "SIZE", "bytes", COL_BYTES, NULL },
        { "BEFORE", "pages_cached_before", COL_PAGES_AS_BYTES, NULL },
        { "AFTER", "bytes_cached", COL_BYTES, NULL },
        { "%", "pages_cached", COL_PERCENT, "pages_total" },
        { "ERRORS", "errors", COL_NUM, NULL },
        { NULL, NULL, 0, NULL },
};

static const struct column *columns_for(const struct fc_command *c)
{
        switch (c->op) {
        case FC_OP_QUERY_CACHED:
        case FC_OP_QUERY_DIRTY:
                return query_cols;
        case FC_OP_FLUSH:
        case FC_OP_FLUSH_VOLUME:
        case FC_OP_PREFETCH:
                return change_cols;
        default:
                return NULL; /* key: value lists */
        }
}

static long long page_size_of(const struct fc_outcome *o)
{
        const char *ps = fc_outcome_get(o, "page_size");

        return ps ? atoll(ps) : 4096;
}

static void cell(char *buf, size_t len, const struct column *col, const struct fc_outcome *o)
{
        const char *v = fc_outcome_get(o, col->key);

        if (!v) {
                snprintf(buf, len, "-");
                return;
        }
        switch (col->kind) {
        case COL_STR: /* escaped by the table */
        case COL_NUM:
                snprintf(buf, len, "%s", v);
                break;
        case COL_BYTES:
                fc_format_bytes(buf, len, strtoull(v, NULL, 10));
                break;
        case COL_PAGES_AS_BYTES:
                fc_format_bytes(buf, len, strtoull(v, NULL, 10) * (unsigned long long)page_size_of(o));
                break;
        case COL_PERCENT: {
                const char *d = fc_outcome_get(o, col->key2);
                unsigned long long num = strtoull(v, NULL, 10), den = d ? strtoull(d, NULL, 10) : 0;
                if (den)
                        snprintf(buf, len, "%.0f%%", 100.0 * (double)num / (double)den);
                else
                        snprintf(buf, len, "-");
                break;
        }
        }
}

static void print_list(FILE *f, const struct fc_outcome *o, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                size_t width = 0;

                if (n > 1) {
                        fputs(i ? "\n" : "", f);
                        fc_fputs_display(o[i].path, f);
                        fputs(":\n", f);
                }
                if (o[i].err)
                        continue;
                for (size_t k = 0; k < o[i].count; k++)
                        if (strlen(o[i].pairs[k].key) > width)
                                width = strlen(o[i].pairs[k].key);
                for (size_t k = 0; k < o[i].count; k++) {
                        const char *key = o[i].pairs[k].key, *v = o[i].pairs[k].value;
                        size_t kl = strlen(key);
                        char human[32] = "";

                        if (kl > 6 && !strcmp(key + kl - 6, "_bytes") && *v >= '0' && *v <= '9') {
                                fc_format_bytes(human, sizeof(human), strtoull(v, NULL, 10));
                                fprintf(f, "%-*s  %s (%s)\n", (int)width, key, v, human);
                        } else {
                                /* Values carry names (pins, first_error): one line each. */
                                fprintf(f, "%-*s  ", (int)width, key);
                                fc_fputs_display(v, f);
                                fputc('\n', f);
                        }
                }
        }
}

int fc_print_table(FILE *f, const struct fc_command *c, const struct fc_outcome *o, size_t n)
{
        const struct column *cols = columns_for(c);
        size_t ncol = 0, ok = 0;

        for (size_t i = 0; i < n; i++)
                ok += !o[i].err;
        if (!ok)
                return 0;
        /* A volume's view answers with the store's keys, not the page cache's. */
        for (size_t i = 0; i < n && cols; i++)
                if (!o[i].err && fc_outcome_get(&o[i], "volume"))
                        cols = NULL;
        if (!cols) {
                print_list(f, o, n);
                return 0;
        }
        while (cols[ncol].header)
                ncol++;
        /* Text columns left-aligned, numbers right-aligned, the path last and free. */
        struct fc_table_column tcols[16];
        for (size_t j = 0; j < ncol; j++)
                tcols[j] = (struct fc_table_column){ cols[j].header, cols[j].kind != COL_STR };
        tcols[ncol] = (struct fc_table_column){ "PATH", false };
        struct fc_table *t = fc_table_new(tcols, ncol + 1);
        for (size_t i = 0; i < n; i++) {
                char cells[16][32];
                const char *row[16];

                if (o[i].err)
                        continue;
                for (size_t j = 0; j < ncol; j++) {
                        cell(cells[j], sizeof(cells[j]), &cols[j], &o[i]);
                        row[j] = cells[j];
                }
                row[ncol] = o[i].path;
                fc_table_row(t, row);
        }
        return fc_table_print(t, f);
}

/* JSON string; bytes that are not valid UTF-8 become U+FFFD. */
void fc_json_str(FILE *f, const char *s)
{
        const unsigned char *p = (const unsigned char *)s;

        fputc('"', f);
        while (*p) {
                unsigned char ch = *p;
                int len = ch < 0x80 ? 1 : (ch & 0xe0) == 0xc0 ? 2 : (ch & 0xf0) == 0xe0 ? 3
                                      : (ch & 0xf8) == 0xf0 ? 4 : 0;
                bool valid = len > 0 && !(len == 2 && ch < 0xc2);

                for (int k = 1; valid && k < len; k++)
                        valid = (p[k] & 0xc0) == 0x80;
                if (!valid) {
                        fputs("\\ufffd", f);
                        p++;
                        continue;
                }
                if (len > 1) {
                        fwrite(p, 1, (size_t)len, f);
                        p += len;
                        continue;
                }
                if (ch == '"' || ch == '\\')
                        fprintf(f, "\\%c", ch);
                else if (ch == '\n')
                        fputs("\\n", f);
                else if (ch == '\t')
                        fputs("\\t", f);
                else if (ch < 0x20 || ch == 0x7f)
                        fprintf(f, "\\u%04x", ch);
                else
                        fputc(ch, f);
                p++;
        }
        fputc('"', f);
}

static bool is_number(const char *v)
{
        if (!*v || strlen(v) > 19)
                return false;
        if (v[0] == '0' && v[1])
                return false;
        for (; *v; v++)
                if (*v < '0' || *v > '9')
                        return false;
        return true;
}

static const char *errno_name(int err)
{
        const char *name = strerrorname_np(err);
        return name ? name : "E?";
}

void fc_print_json(FILE *f, const char *command, const struct fc_outcome *o, size_t n)
{
        fputs("{\"command\":", f);
        fc_json_str(f, command);
        fputs(",\"results\":[", f);
        for (size_t i = 0; i < n; i++) {
                fprintf(f, "%s{\"path\":", i ? "," : "");
                fc_json_str(f, o[i].path);
                if (o[i].err) {
                        fprintf(f, ",\"ok\":false,\"error\":{\"errno\":%d,\"name\":", o[i].err);
                        fc_json_str(f, errno_name(o[i].err));
                        fputs(",\"message\":", f);
                        fc_json_str(f, o[i].message ? o[i].message : "");
                        fputs("}}", f);
                        continue;
                }
                fputs(",\"ok\":true,\"result\":{", f);
                bool first = true;
                for (size_t k = 0; k < o[i].count; k++) {
                        const char *key = o[i].pairs[k].key;
                        bool dup = false;

                        for (size_t m = 0; m < k; m++)
                                dup |= !strcmp(o[i].pairs[m].key, key);
                        if (dup)
                                continue;
                        fprintf(f, "%s", first ? "" : ",");
                        first = false;
                        fc_json_str(f, key);
                        fputc(':', f);
                        if (fc_result_key_repeats(key)) {
                                fputc('[', f);
                                bool lf = true;
                                for (size_t m = k; m < o[i].count; m++) {
                                        if (strcmp(o[i].pairs[m].key, key))
                                                continue;
                                        fprintf(f, "%s", lf ? "" : ",");
                                        lf = false;
                                        fc_json_str(f, o[i].pairs[m].value);
                                }
                                fputc(']', f);
                        } else if (!fc_result_key_is_text(key) &&
                                   is_number(o[i].pairs[k].value)) {
                                fputs(o[i].pairs[k].value, f);
                        } else {
                                fc_json_str(f, o[i].pairs[k].value);
                        }
                }
                fputs("}}", f);
        }
        fputs("]}\n", f);
}
