/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * admin.c: fcachectl status and fcachectl volume (admin.h), over fcached's
 * D-Bus API: Manager1's properties and ListVolumes, AddVolume, RemoveVolume,
 * and the Volume1 objects of the ObjectManager at /org/fcache (which show a
 * user only the volumes it may read).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <systemd/sd-bus.h>
#include <unistd.h>

#include "admin.h"
#include "escape.h"
#include "output.h"
#include "polkit-agent.h"
#include "table.h"

#define BUS_NAME "org.fcache.Manager1"
#define MANAGER_PATH "/org/fcache/Manager1"
#define MANAGER_IFACE "org.fcache.Manager1"
#define ROOT_PATH "/org/fcache"
#define VOLUME_IFACE "org.fcache.Volume1"
#define KMOD_SYSFS "/sys/module/fcache"
#define CALL_TIMEOUT_US (120ull * 1000000ull)
#define CONFIG_MAX (64u << 10)
#define PROPS_MAX 32
#define VOLUMES_MAX 256

/* One object's properties, as read (strings, numbers and booleans). */
struct props {
        size_t n;
        struct {
                char *name;
                char *s;        /* a string's value, or NULL */
                uint64_t v;     /* a number's or boolean's */
        } p[PROPS_MAX];
};

static void props_free(struct props *ps)
{
        for (size_t i = 0; i < ps->n; i++) {
                free(ps->p[i].name);
                free(ps->p[i].s);
        }
        ps->n = 0;
}

static const char *prop_s(const struct props *ps, const char *name)
{
        for (size_t i = 0; i < ps->n; i++)
                if (!strcmp(ps->p[i].name, name) && ps->p[i].s)
                        return ps->p[i].s;
        return "";
}

static uint64_t prop_v(const struct props *ps, const char *name)
{
        for (size_t i = 0; i < ps->n; i++)
                if (!strcmp(ps->p[i].name, name))
                        return ps->p[i].v;
        return 0;
}

/* The a{sv} at @m's position into @ps (other types skipped); 0 or -errno. */
static int read_props(sd_bus_message *m, struct props *ps)
{
        int r = sd_bus_message_enter_container(m, 'a', "{sv}");

        if (r < 0)
                return r;
        while ((r = sd_bus_message_enter_container(m, 'e', "sv")) > 0) {
                const char *name, *contents, *s;
                uint64_t t = 0;
                uint32_t u = 0;
                int b = 0;

                if ((r = sd_bus_message_read(m, "s", &name)) < 0 ||
                    (r = sd_bus_message_peek_type(m, NULL, &contents)) < 0 ||
                    (r = sd_bus_message_enter_container(m, 'v', contents)) < 0)
                        return r;
                if (ps->n < PROPS_MAX && strchr("stub", contents[0]) && !contents[1]) {
                        ps->p[ps->n].name = strdup(name);
                        ps->p[ps->n].s = NULL;
                        switch (contents[0]) {
                        case 's':
                                r = sd_bus_message_read(m, "s", &s);
                                ps->p[ps->n].s = r < 0 ? NULL : strdup(s);
                                break;
                        case 't':
                                r = sd_bus_message_read(m, "t", &t);
                                ps->p[ps->n].v = t;
                                break;
                        case 'u':
                                r = sd_bus_message_read(m, "u", &u);
                                ps->p[ps->n].v = u;
                                break;
                        default:
                                r = sd_bus_message_read(m, "b", &b);
                                ps->p[ps->n].v = (uint64_t)b;
                        }
                        ps->n++;
                } else {
                        r = sd_bus_message_skip(m, contents);
                }
                if (r < 0 || (r = sd_bus_message_exit_container(m)) < 0 ||
                    (r = sd_bus_message_exit_container(m)) < 0)
                        return r;
        }
        return r < 0 ? r : sd_bus_message_exit_container(m);
}

static int fail(const char *what, const sd_bus_error *err, int r)
{
        fprintf(stderr, "fcachectl: %s: ", what);
        fc_fputs_display(err && err->message ? err->message : strerror(-r), stderr);
        if (sd_bus_error_has_names(err, SD_BUS_ERROR_SERVICE_UNKNOWN,
                                   SD_BUS_ERROR_NAME_HAS_NO_OWNER) ||
            (!(err && err->name) && (r == -ENOENT || r == -ECONNREFUSED)))
                fputs(" (is fcached running?)", stderr);
        fputc('\n', stderr);
        return 1;
}

static int open_bus(sd_bus **bus, bool interactive)
{
        int r = sd_bus_open_system(bus);

        if (r < 0) {
                fprintf(stderr, "fcachectl: the system bus cannot be reached: %s\n",
                        strerror(-r));
                return r;
        }
        sd_bus_set_method_call_timeout(*bus, CALL_TIMEOUT_US);
        if (interactive)
                sd_bus_set_allow_interactive_authorization(*bus, 1);
        return 0;
}

/* The Volume1 objects the caller may see, into @vols (@max at most); how many, or -errno. */
static int read_volumes(sd_bus *bus, struct props *vols, int max, sd_bus_error *err)
{
        sd_bus_message *reply = NULL;
        int r, n = 0;

        r = sd_bus_call_method(bus, BUS_NAME, ROOT_PATH, "org.freedesktop.DBus.ObjectManager",
                               "GetManagedObjects", err, &reply, NULL);
        if (r < 0)
                return r;
        r = sd_bus_message_enter_container(reply, 'a', "{oa{sa{sv}}}");
        while (r >= 0 && (r = sd_bus_message_enter_container(reply, 'e', "oa{sa{sv}}")) > 0) {
                const char *object, *iface;

                if ((r = sd_bus_message_read(reply, "o", &object)) < 0 ||
                    (r = sd_bus_message_enter_container(reply, 'a', "{sa{sv}}")) < 0)
                        break;
                while ((r = sd_bus_message_enter_container(reply, 'e', "sa{sv}")) > 0) {
                        if ((r = sd_bus_message_read(reply, "s", &iface)) < 0)
                                break;
                        if (!strcmp(iface, VOLUME_IFACE) && n < max)
                                r = read_props(reply, &vols[n++]);
                        else
                                r = sd_bus_message_skip(reply, "a{sv}");
                        if (r < 0 || (r = sd_bus_message_exit_container(reply)) < 0)
                                break;
                }
                if (r < 0 || (r = sd_bus_message_exit_container(reply)) < 0 ||
                    (r = sd_bus_message_exit_container(reply)) < 0)
                        break;
        }
        sd_bus_message_unref(reply);
        return r < 0 ? r : n;
}

static int by_name(const void *a, const void *b)
{
        return strcmp(prop_s(a, "Name"), prop_s(b, "Name"));
}

/* ---- status ---- */


static void json_volume(FILE *f, const struct props *v)
{
        static const char *const strs[][2] = {
                { "name", "Name" }, { "mountpoint", "Mountpoint" }, { "backing", "Backing" },
                { "state", "State" }, { "state_reason", "StateReason" },
        };
        static const char *const nums[][2] = {
                { "pending", "Pending" }, { "conflicts", "Conflicts" },
                { "cache_size", "CacheSize" }, { "cache_used", "CacheUsed" },
                { "cache_pinned", "CachePinned" }, { "cache_free", "CacheFree" },
                { "reintegration_done", "ReintegrationDone" },
                { "reintegration_total", "ReintegrationTotal" },
        };

        fputc('{', f);
        for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++) {
                fprintf(f, "%s\"%s\":", i ? "," : "", strs[i][0]);
                fc_json_str(f, prop_s(v, strs[i][1]));
        }
        for (size_t i = 0; i < sizeof(nums) / sizeof(nums[0]); i++)
                fprintf(f, ",\"%s\":%" PRIu64, nums[i][0], prop_v(v, nums[i][1]));
        fprintf(f, ",\"metered\":%s}", prop_v(v, "Metered") ? "true" : "false");
}

static int cmd_status(bool json)
{
        sd_bus_error err = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL;
        sd_bus *bus = NULL;
        struct props mgr = { 0 }, *vols = calloc(VOLUMES_MAX, sizeof(*vols));
        bool running, kmod;
        int r, n = 0;
        char a[32], b[32], c[32];

        if (!vols)
                return 1;
        /* Without a bus or fcached, the overview still says so, and whether fcache.ko is there. */
        r = sd_bus_open_system(&bus);
        if (r >= 0) {
                sd_bus_set_method_call_timeout(bus, CALL_TIMEOUT_US);
                r = sd_bus_call_method(bus, BUS_NAME, MANAGER_PATH,
                                       "org.freedesktop.DBus.Properties", "GetAll", &err, &reply,
                                       "s", MANAGER_IFACE);
        }
        running = r >= 0 && read_props(reply, &mgr) >= 0;
        if (running && (n = read_volumes(bus, vols, VOLUMES_MAX, &err)) < 0) {
                r = fail("status: reading the volumes", &err, n);
                goto out;
        }
        qsort(vols, (size_t)n, sizeof(*vols), by_name);
        kmod = running ? prop_v(&mgr, "KmodLoaded") : access(KMOD_SYSFS, F_OK) == 0;
        if (json) {
                fputs("{\"command\":\"status\",\"result\":{\"fcached\":{\"running\":", stdout);
                fputs(running ? "true,\"version\":" : "false,\"version\":", stdout);
                fc_json_str(stdout, prop_s(&mgr, "Version"));
                printf("},\"kmod_loaded\":%s", kmod ? "true" : "false");
                printf(",\"pins\":{\"count\":%" PRIu64 ",\"bytes\":%" PRIu64
                       ",\"resident_bytes\":%" PRIu64 ",\"budget_bytes\":%" PRIu64 "}",
                       prop_v(&mgr, "PinCount"), prop_v(&mgr, "PinnedBytes"),
                       prop_v(&mgr, "ResidentBytes"), prop_v(&mgr, "BudgetBytes"));
                fputs(",\"volumes\":[", stdout);
                for (int i = 0; i < n; i++) {
                        fputs(i ? "," : "", stdout);
                        json_volume(stdout, &vols[i]);
                }
                fputs("]}}\n", stdout);
                r = 0;
                goto out;
        }
        printf("%-10s %s%s\n", "fcached:", running ? "running, version " : "not running",
               prop_s(&mgr, "Version"));
        printf("%-10s %s\n", "fcache.ko:", kmod ? "loaded" : "not loaded");
        if (running) {
                fc_format_bytes(a, sizeof(a), prop_v(&mgr, "PinnedBytes"));
                fc_format_bytes(b, sizeof(b), prop_v(&mgr, "ResidentBytes"));
                fc_format_bytes(c, sizeof(c), prop_v(&mgr, "BudgetBytes"));
                printf("%-10s %" PRIu64 " (%s; %s of %s resident in memory)\n", "pins:",
                       prop_v(&mgr, "PinCount"), a, b, c);
                printf("%-10s %d\n", "volumes:", n);
        }
        if (n) {
                static const struct fc_table_column cols[] = {
                        { "VOLUME", false }, { "STATE", false }, { "REASON", false },
                        { "PENDING", true }, { "CONFLICTS", true }, { "USED", true },
                        { "SIZE", true }, { "METERED", false }, { "MOUNTPOINT", false },
                };
                struct fc_table *t = fc_table_new(cols, 9);

                putchar('\n');
                fflush(stdout);
                for (int i = 0; i < n; i++) {
                        char pend[24], conf[24];
                        const char *row[9];

                        snprintf(pend, sizeof(pend), "%" PRIu64, prop_v(&vols[i], "Pending"));
                        snprintf(conf, sizeof(conf), "%" PRIu64, prop_v(&vols[i], "Conflicts"));
                        fc_format_bytes(a, sizeof(a), prop_v(&vols[i], "CacheUsed"));
                        fc_format_bytes(b, sizeof(b), prop_v(&vols[i], "CacheSize"));
                        row[0] = prop_s(&vols[i], "Name");
                        row[1] = prop_s(&vols[i], "State");
                        row[2] = prop_s(&vols[i], "StateReason");
                        row[3] = pend;
                        row[4] = conf;
                        row[5] = a;
                        row[6] = b;
                        row[7] = prop_v(&vols[i], "Metered") ? "yes" : "no";
                        row[8] = prop_s(&vols[i], "Mountpoint");
                        fc_table_row(t, row);
                }
                if (fc_table_print(t, stdout) < 0) {
                        r = 2;
                        goto out;
                }
        }
        r = 0;
out:
        for (int i = 0; i < VOLUMES_MAX; i++)
                props_free(&vols[i]);
        free(vols);
        props_free(&mgr);
        sd_bus_error_free(&err);
        sd_bus_message_unref(reply);
        sd_bus_flush_close_unref(bus);
        return r;
}

/* ---- volume ---- */

static int cmd_volume_list(bool json)
{
        sd_bus_error err = SD_BUS_ERROR_NULL;
        sd_bus_message *reply = NULL, *states = NULL;
        sd_bus *bus = NULL;
        static const struct fc_table_column cols[] = {
                { "VOLUME", false }, { "STATE", false }, { "MOUNTPOINT", false }, { "BACKING", false },
        };
        struct props st = { 0 }, *vols = calloc(VOLUMES_MAX, sizeof(*vols));
        struct fc_table *t = NULL;
        const char *name, *mp, *backing;
        int r, n = 0;

        if (!vols)
                return 1;

        if (open_bus(&bus, false) < 0)
                return 1;
        r = sd_bus_call_method(bus, BUS_NAME, MANAGER_PATH, MANAGER_IFACE, "ListVolumes", &err,
                               &reply, NULL);
        if (r < 0) {
                r = fail("volume list", &err, r);
                goto out;
        }
        /* The states as a dictionary: read into name -> state pairs. */
        if (sd_bus_get_property(bus, BUS_NAME, MANAGER_PATH, MANAGER_IFACE, "VolumeStates",
                                &err, &states, "a{ss}") >= 0 &&
            sd_bus_message_enter_container(states, 'a', "{ss}") >= 0) {
                const char *k, *v;

                while (st.n < PROPS_MAX && sd_bus_message_read(states, "{ss}", &k, &v) > 0) {
                        st.p[st.n].name = strdup(k);
                        st.p[st.n].s = strdup(v);
                        st.n++;
                }
        }
        sd_bus_error_free(&err);
        if ((r = sd_bus_message_enter_container(reply, 'a', "(sss)")) < 0)
                goto bad;
        while (n < VOLUMES_MAX && (r = sd_bus_message_read(reply, "(sss)", &name, &mp,
                                                           &backing)) > 0) {
                const char *vals[4] = { name, *prop_s(&st, name) ? prop_s(&st, name) : "unknown",
                                        mp, backing };
                static const char *const keys[4] = { "Name", "State", "Mountpoint", "Backing" };

                for (int k = 0; k < 4; k++) {
                        vols[n].p[k].name = strdup(keys[k]);
                        vols[n].p[k].s = strdup(vals[k]);
                }
                vols[n++].n = 4;
        }
        if (r < 0)
                goto bad;
        qsort(vols, (size_t)n, sizeof(*vols), by_name);
        if (json)
                fputs("{\"command\":\"volume list\",\"result\":[", stdout);
        else if (n)
                t = fc_table_new(cols, 4);
        for (int i = 0; i < n; i++) {
                static const char *const keys[4] = { "Name", "State", "Mountpoint", "Backing" };
                const char *row[4];

                for (int k = 0; k < 4; k++)
                        row[k] = prop_s(&vols[i], keys[k]);
                if (json) {
                        fputs(i ? ",{\"name\":" : "{\"name\":", stdout);
                        fc_json_str(stdout, row[0]);
                        fputs(",\"state\":", stdout);
                        fc_json_str(stdout, row[1]);
                        fputs(",\"mountpoint\":", stdout);
                        fc_json_str(stdout, row[2]);
                        fputs(",\"backing\":", stdout);
                        fc_json_str(stdout, row[3]);
                        fputc('}', stdout);
                } else {
                        fc_table_row(t, row);
                }
        }
        r = 0;
        if (json)
                fputs("]}\n", stdout);
        else if (t)
                r = fc_table_print(t, stdout) < 0 ? 2 : 0;
        else
                puts("no volumes");
        goto out;
bad:
        fprintf(stderr, "fcachectl: volume list: fcached sent a bad reply: %s\n", strerror(-r));
        r = 1;
out:
        for (int i = 0; i < n; i++)
                props_free(&vols[i]);
        free(vols);
        props_free(&st);
        sd_bus_error_free(&err);
        sd_bus_message_unref(reply);
        sd_bus_message_unref(states);
        sd_bus_flush_close_unref(bus);
        return r;
}

/* The NAME.conf text from @words: one FILE ("-": standard input) or KEY=VALUE words. */
static char *config_text(char **words, int n)
{
        char *text;
        size_t len = 0, cap = 0;
        FILE *f;

        if (n == 1 && !strchr(words[0], '=')) {
                f = strcmp(words[0], "-") ? fopen(words[0], "re") : stdin;
                if (!f) {
                        fprintf(stderr, "fcachectl: volume add: cannot read %s: %s\n", words[0],
                                strerror(errno));
                        return NULL;
                }
                text = malloc(CONFIG_MAX + 1);
                if (text)
                        len = fread(text, 1, CONFIG_MAX + 1, f);
                if (f != stdin)
                        fclose(f);
                if (!text || len > CONFIG_MAX) {
                        fprintf(stderr, "fcachectl: volume add: %s is larger than %u bytes\n",
                                words[0], CONFIG_MAX);
                        free(text);
                        return NULL;
                }
                text[len] = '\0';
                return text;
        }
        f = open_memstream(&text, &cap);
        if (!f)
                return NULL;
        fputs("[Volume]\n", f);
        for (int i = 0; i < n; i++) {
                const char *eq = strchr(words[i], '=');

                if (!eq || eq == words[i] || strchr(words[i], '\n')) {
                        fprintf(stderr, "fcachectl: volume add: '%s' is not KEY=VALUE (or give "
                                "one NAME.conf file, or - for standard input)\n", words[i]);
                        fclose(f);
                        free(text);
                        return NULL;
                }
                fprintf(f, "%s\n", words[i]);
        }
        fclose(f);
        return text;
}

static int cmd_volume_change(char **words, int n, bool interactive)
{
        sd_bus_error err = SD_BUS_ERROR_NULL;
        sd_bus *bus = NULL;
        bool add = !strcmp(words[0], "add");
        char *config = NULL, what[320];
        pid_t agent = 0;
        int r;

        if (add ? n < 3 : n != 2) {
                fprintf(stderr, "fcachectl: volume %s: %s\n", words[0], add ?
                        "needs NAME and a NAME.conf file, - or KEY=VALUE words" :
                        "needs one NAME");
                return 2;
        }
        if (add && !(config = config_text(words + 2, n - 2)))
                return 1;
        if (open_bus(&bus, interactive) < 0) {
                free(config);
                return 1;
        }
        if (interactive)
                agent = fc_polkit_agent_open();
        r = add ? sd_bus_call_method(bus, BUS_NAME, MANAGER_PATH, MANAGER_IFACE, "AddVolume",
                                     &err, NULL, "ss", words[1], config)
                : sd_bus_call_method(bus, BUS_NAME, MANAGER_PATH, MANAGER_IFACE,
                                     "RemoveVolume", &err, NULL, "s", words[1]);
        fc_polkit_agent_close(agent);
        snprintf(what, sizeof(what), "volume %s %s", words[0], words[1]);
        r = r < 0 ? fail(what, &err, r) : 0;
        free(config);
        sd_bus_error_free(&err);
        sd_bus_flush_close_unref(bus);
        return r;
}

bool fc_admin_command(const char *word)
{
        return !strcmp(word, "status") || !strcmp(word, "volume");
}

int fc_admin_run(char **words, int n, bool json, bool interactive)
{
        if (!strcmp(words[0], "status")) {
                if (n > 1) {
                        fprintf(stderr, "fcachectl: status takes no PATH or word ('%s')\n",
                                words[1]);
                        return 2;
                }
                return cmd_status(json);
        }
        if (n < 2 || (strcmp(words[1], "list") && strcmp(words[1], "add") &&
                      strcmp(words[1], "remove"))) {
                fprintf(stderr, "fcachectl: volume: %s%s%s: list, add or remove\n",
                        n < 2 ? "missing word" : "unknown word '", n < 2 ? "" : words[1],
                        n < 2 ? "" : "'");
                return 2;
        }
        if (!strcmp(words[1], "list")) {
                if (n > 2) {
                        fprintf(stderr, "fcachectl: volume list takes no more words ('%s')\n",
                                words[2]);
                        return 2;
                }
                return cmd_volume_list(json);
        }
        if (json) {
                fprintf(stderr, "fcachectl: volume %s: --json is for list and status\n",
                        words[1]);
                return 2;
        }
        return cmd_volume_change(words + 1, n - 1, interactive);
}
