/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * volume-config.c: the parser of /etc/fcache/volumes.d/NAME.conf.
 *
 * The format is systemd-like: an optional "[Volume]" section header, lines
 * "Key=Value", comments starting with '#' or ';', blank lines.  Unknown keys,
 * bad values and duplicate keys are errors naming the file, line, key and
 * reason, so that fcached can report one bad volume and start the others.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "command.h"
#include "volume-config.h"

#define DEFAULT_CACHE_SIZE (1ULL << 30)
#define DEFAULT_ATTR_LEASE_MS 30000
#define DEFAULT_BACKING_TIMEOUT_MS 10000
#define DEFAULT_HOARD_INTERVAL_MS 600000
#define DEFAULT_THREADS 4
#define DEFAULT_DELETE_LIMIT_PERCENT 50

void volume_config_init(struct volume_config *c)
{
        memset(c, 0, sizeof(*c));
        c->cache_size = DEFAULT_CACHE_SIZE;
        c->attr_lease_ms = DEFAULT_ATTR_LEASE_MS;
        c->backing_timeout_ms = DEFAULT_BACKING_TIMEOUT_MS;
        c->hoard_interval_ms = DEFAULT_HOARD_INTERVAL_MS;
        c->threads = DEFAULT_THREADS;
        c->fetch_threads = 0;    /* by the backing: view_fetch_threads() */
        c->delete_limit = DEFAULT_DELETE_LIMIT_PERCENT;
        c->delete_limit_percent = true;
}

void volume_config_free(struct volume_config *c)
{
        free(c->name);
        free(c->backing);
        free(c->mountpoint);
        free(c->cache_dir);
        free(c->server);
        memset(c, 0, sizeof(*c));
}

__attribute__((format(printf, 3, 4)))
static int fail(char *err, size_t errlen, const char *fmt, ...)
{
        va_list ap;

        if (err && errlen) {
                va_start(ap, fmt);
                vsnprintf(err, errlen, fmt, ap);
                va_end(ap);
        }
        return -EINVAL;
}

static int parse_number_suffix(const char *s, uint64_t *num, const char **suffix)
{
        char *end;
        unsigned long long v;

        while (isspace((unsigned char)*s))
                s++;
        if (!isdigit((unsigned char)*s))
                return -EINVAL;
        errno = 0;
        v = strtoull(s, &end, 10);
        if (errno)
                return -errno;
        while (isspace((unsigned char)*end))
                end++;
        *num = v;
        *suffix = end;
        return 0;
}

/* The one size grammar of fcache (the CLI's, cli/command.c), around spaces. */
int volume_config_parse_size(const char *s, uint64_t *out)
{
        size_t n;
        char *t;
        int r;

        while (isspace((unsigned char)*s))
                s++;
        n = strlen(s);
        while (n && isspace((unsigned char)s[n - 1]))
                n--;
        t = strndup(s, n);
        if (!t)
                return -ENOMEM;
        r = fc_parse_size(t, out);
        free(t);
        return r;
}

int volume_config_parse_duration(const char *s, uint64_t *out_ms)
{
        uint64_t v = 0, mul;
        const char *suf = "";
        int r = parse_number_suffix(s, &v, &suf);

        if (r < 0)
                return r;
        if (!*suf || !strcmp(suf, "s") || !strcmp(suf, "sec"))
                mul = 1000;
        else if (!strcmp(suf, "ms"))
                mul = 1;
        else if (!strcmp(suf, "min") || !strcmp(suf, "m"))
                mul = 60000;
        else if (!strcmp(suf, "h"))
                mul = 3600000;
        else
                return -EINVAL;
        if (v > UINT64_MAX / mul)
                return -ERANGE;
        *out_ms = v * mul;
        return 0;
}

static int set_string(char **dst, const char *value, bool absolute, const char *key,
                      char *err, size_t errlen)
{
        char *dup;

        if (!*value)
                return fail(err, errlen, "%s: empty value", key);
        if (absolute && value[0] != '/')
                return fail(err, errlen, "%s: '%s' is not an absolute path", key, value);
        dup = strdup(value);
        if (!dup)
                return -ENOMEM;
        free(*dst);
        *dst = dup;
        return 0;
}

/* "100" (pinned objects) or "25%" (of the pinned objects); trailing spaces allowed. */
static int parse_delete_limit(struct volume_config *c, const char *key, const char *value,
                              char *err, size_t errlen)
{
        const char *suf = "";
        uint64_t v = 0;

        if (parse_number_suffix(value, &v, &suf) < 0 ||
            (*suf && strcmp(suf, "%")))
                return fail(err, errlen, "%s: '%s' is neither a number of pinned objects (e.g. "
                            "100) nor a percentage of them (e.g. 25%%)", key, value);
        if (*suf && v > 100)
                return fail(err, errlen, "%s: '%s' is more than 100%%", key, value);
        c->delete_limit = v;
        c->delete_limit_percent = *suf == '%';
        return 0;
}

const char *volume_config_write_back_name(int mode)
{
        return mode == WRITE_BACK_YES ? "yes" : mode == WRITE_BACK_AUTO ? "auto" : "no";
}

int volume_config_set(struct volume_config *c, const char *key, const char *value,
                      char *err, size_t errlen)
{
        uint64_t v;
        int r;

        if (!strcmp(key, "Backing"))
                return set_string(&c->backing, value, true, key, err, errlen);
        if (!strcmp(key, "Mountpoint"))
                return set_string(&c->mountpoint, value, true, key, err, errlen);
        if (!strcmp(key, "CacheDir"))
                return set_string(&c->cache_dir, value, true, key, err, errlen);
        if (!strcmp(key, "Server"))
                return set_string(&c->server, value, false, key, err, errlen);
        if (!strcmp(key, "CacheSize") || !strcmp(key, "Reserve")) {
                r = volume_config_parse_size(value, &v);
                if (r < 0)
                        return fail(err, errlen, "%s: '%s' is not a size (e.g. 10G, 512M)",
                                    key, value);
                if (key[0] == 'C')
                        c->cache_size = v;
                else
                        c->reserve = v;
                return 0;
        }
        if (!strcmp(key, "AttrLease") || !strcmp(key, "BackingTimeout") ||
            !strcmp(key, "HoardInterval")) {
                r = volume_config_parse_duration(value, &v);
                if (r < 0)
                        return fail(err, errlen,
                                    "%s: '%s' is not a duration (e.g. 30s, 500ms, 5min)",
                                    key, value);
                if (key[0] == 'A')
                        c->attr_lease_ms = v;
                else if (key[0] == 'B')
                        c->backing_timeout_ms = v;
                else
                        c->hoard_interval_ms = v;
                return 0;
        }
        if (!strcmp(key, "CacheFiles")) {
                r = volume_config_parse_size(value, &v);
                if (r < 0)
                        return fail(err, errlen, "%s: '%s' is not a number of files", key, value);
                c->cache_files = v;
                return 0;
        }
        if (!strcmp(key, "Threads")) {
                r = volume_config_parse_size(value, &v);
                if (r < 0 || v < 1 || v > 64)
                        return fail(err, errlen, "%s: '%s' is not a number from 1 to 64",
                                    key, value);
                c->threads = (unsigned)v;
                return 0;
        }
        if (!strcmp(key, "Metered")) {
                if (strcmp(value, "pause") && strcmp(value, "ignore"))
                        return fail(err, errlen, "%s: '%s' is neither pause (hoard walks wait "
                                    "while the connection is metered) nor ignore", key, value);
                c->metered_ignore = value[0] == 'i';
                return 0;
        }
        if (!strcmp(key, "WriteBack")) {
                for (int m = WRITE_BACK_NO; m <= WRITE_BACK_AUTO; m++)
                        if (!strcmp(value, volume_config_write_back_name(m))) {
                                c->write_back = m;
                                return 0;
                        }
                return fail(err, errlen, "%s: '%s' is none of no (changes go to the server as "
                            "they are made), yes (acknowledged locally, shipped in the "
                            "background) and auto (write-back while the connection is metered)",
                            key, value);
        }
        if (!strcmp(key, "FetchThreads")) {
                r = volume_config_parse_size(value, &v);
                if (r < 0 || v < 1 || v > 64)
                        return fail(err, errlen, "%s: '%s' is not a number from 1 to 64",
                                    key, value);
                c->fetch_threads = (unsigned)v;
                return 0;
        }
        if (!strcmp(key, "ReconnectDeleteLimit"))
                return parse_delete_limit(c, key, value, err, errlen);
        return fail(err, errlen, "%s: unknown key", key);
}

static char *strip(char *s)
{
        char *e;

        while (isspace((unsigned char)*s))
                s++;
        e = s + strlen(s);
        while (e > s && isspace((unsigned char)e[-1]))
                *--e = 0;
        return s;
}

int volume_config_load(struct volume_config *c, const char *path, char *err, size_t errlen)
{
        char *line = NULL, *msg = NULL;
        size_t cap = 0;
        unsigned lineno = 0;
        uint32_t seen = 0;
        int r = 0;
        FILE *f = fopen(path, "re");
        static const char *const keys[] = {
                "Backing", "Mountpoint", "CacheDir", "Server", "CacheSize", "Reserve",
                "AttrLease", "BackingTimeout", "HoardInterval", "Threads", "CacheFiles",
                "FetchThreads", "ReconnectDeleteLimit",
        };

        if (!f) {
                r = -errno;
                snprintf(err, errlen, "%s: cannot open: %s", path, strerror(-r));
                return r;
        }
        msg = malloc(errlen ? errlen : 1);
        if (!msg) {
                fclose(f);
                return -ENOMEM;
        }
        while (getline(&line, &cap, f) >= 0) {
                char *s = strip(line), *eq, *key, *value;
                unsigned i;

                lineno++;
                if (!*s || *s == '#' || *s == ';')
                        continue;
                if (*s == '[') {
                        if (strcmp(s, "[Volume]")) {
                                snprintf(err, errlen, "%s:%u: %s: unknown section", path,
                                         lineno, s);
                                r = -EINVAL;
                                break;
                        }
                        continue;
                }
                eq = strchr(s, '=');
                if (!eq) {
                        snprintf(err, errlen, "%s:%u: '%s': not a Key=Value line", path,
                                 lineno, s);
                        r = -EINVAL;
                        break;
                }
                *eq = 0;
                key = strip(s);
                value = strip(eq + 1);
                for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
                        if (!strcmp(keys[i], key))
                                break;
                if (i < sizeof(keys) / sizeof(keys[0])) {
                        if (seen & (1u << i)) {
                                snprintf(err, errlen, "%s:%u: %s: set twice", path, lineno,
                                         key);
                                r = -EINVAL;
                                break;
                        }
                        seen |= 1u << i;
                }
                r = volume_config_set(c, key, value, msg, errlen);
                if (r < 0) {
                        snprintf(err, errlen, "%s:%u: %s", path, lineno, msg);
                        break;
                }
        }
        free(line);
        free(msg);
        fclose(f);
        return r;
}

int volume_config_validate(const struct volume_config *c, char *err, size_t errlen)
{
        if (!c->backing)
                return fail(err, errlen, "Backing: missing (the directory to serve)");
        if (!c->mountpoint)
                return fail(err, errlen, "Mountpoint: missing");
        if (!c->cache_dir)
                return fail(err, errlen, "CacheDir: missing");
        if (c->reserve >= c->cache_size)
                return fail(err, errlen,
                            "Reserve: %" PRIu64 " bytes leaves no room in CacheSize %" PRIu64,
                            c->reserve, c->cache_size);
        if (!strcmp(c->backing, c->mountpoint))
                return fail(err, errlen, "Mountpoint: same directory as Backing");
        return 0;
}
