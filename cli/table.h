/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * table.h: fcachectl's tables, through libsmartcols: aligned columns (two
 * spaces apart, numbers to the right, the last column free), every cell
 * escaped for display (escape.h), never truncated, and the options every
 * table takes: --no-legend (no header line) and --output COLS (these
 * columns, in this order, named as in the header, case-insensitive).
 */
#pragma once

#include <stdbool.h>
#include <stdio.h>

struct fc_table;

struct fc_table_column {
        const char *name;
        bool right;             /* a number: aligned to the right */
};

/* For every table printed after: no header; only @output's columns (NULL: all). */
void fc_table_options(bool no_legend, const char *output);

struct fc_table *fc_table_new(const struct fc_table_column *cols, size_t n);
/* One row: a value per column (raw; escaped here). */
void fc_table_row(struct fc_table *t, const char *const *cells);
/* Prints and frees the table; 0, or -1 when --output names a column it does not
 * have (said on standard error, with the columns it has). */
int fc_table_print(struct fc_table *t, FILE *f);
