/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * table.c: fcachectl's tables through libsmartcols (table.h).
 */
#include <libsmartcols.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "escape.h"
#include "table.h"

static bool opt_no_legend;
static const char *opt_output;

struct fc_table {
        const struct fc_table_column *cols;
        size_t ncols;
        struct libscols_table *tb;
        struct libscols_column **sc;   /* per column: NULL when --output leaves it out */
        bool bad;                      /* --output named a column this table lacks */
};

void fc_table_options(bool no_legend, const char *output)
{
        opt_no_legend = no_legend;
        opt_output = output && *output ? output : NULL;
}

static void say_columns(const struct fc_table *t, const char *word)
{
        fprintf(stderr, "fcachectl: --output: '%s' is not a column of this table (it has:", word);
        for (size_t i = 0; i < t->ncols; i++)
                fprintf(stderr, "%s%s", i ? ", " : " ", t->cols[i].name);
        fputs(")\n", stderr);
}

static struct libscols_column *add_column(struct fc_table *t, size_t i)
{
        return scols_table_new_column(t->tb, t->cols[i].name, 0,
                                      t->cols[i].right ? SCOLS_FL_RIGHT : 0);
}

struct fc_table *fc_table_new(const struct fc_table_column *cols, size_t n)
{
        struct fc_table *t = calloc(1, sizeof(*t));

        if (!t || !(t->tb = scols_new_table()) || !(t->sc = calloc(n, sizeof(*t->sc))))
                abort();
        t->cols = cols;
        t->ncols = n;
        scols_table_set_column_separator(t->tb, "  ");
        /* Paths are never cut to a terminal's width. */
        scols_table_set_termforce(t->tb, SCOLS_TERMFORCE_NEVER);
        scols_table_enable_noheadings(t->tb, opt_no_legend);
        /* Cells come escaped (escape.h), the one escaping of names: not twice. */
        scols_table_enable_noencoding(t->tb, 1);
        if (!opt_output) {
                for (size_t i = 0; i < n; i++)
                        t->sc[i] = add_column(t, i);
                return t;
        }
        char *list = strdup(opt_output), *save = NULL;

        if (!list)
                abort();
        for (char *w = strtok_r(list, ",", &save); w; w = strtok_r(NULL, ",", &save)) {
                size_t i = 0;

                while (i < n && strcasecmp(w, cols[i].name))
                        i++;
                if (i == n) {
                        if (!t->bad)
                                say_columns(t, w);
                        t->bad = true;
                } else if (!t->sc[i]) {
                        t->sc[i] = add_column(t, i);
                }
        }
        free(list);
        return t;
}

void fc_table_row(struct fc_table *t, const char *const *cells)
{
        struct libscols_line *ln = scols_table_new_line(t->tb, NULL);

        if (!ln)
                abort();
        for (size_t i = 0; i < t->ncols; i++) {
                char *e;

                if (!t->sc[i])
                        continue;
                e = fc_escape(cells[i] ? cells[i] : "", FC_ESCAPE_DISPLAY);
                /* The line takes the string. */
                if (!e || scols_line_refer_column_data(ln, t->sc[i], e) < 0)
                        abort();
        }
}

int fc_table_print(struct fc_table *t, FILE *f)
{
        int r = t->bad ? -1 : 0;

        if (!r) {
                scols_table_set_stream(t->tb, f);
                scols_print_table(t->tb);
        }
        scols_unref_table(t->tb);
        free(t->sc);
        free(t);
        return r;
}
