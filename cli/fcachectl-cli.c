/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * fcachectl-cli.c: the fcachectl(1) command.
 *
 *   fcachectl [OPTIONS] COMMAND... [PATH...]
 *
 * The command words are the grammar of fcachectl(3); the words after the
 * longest valid command are paths (use -- before a path that looks like a
 * command word). Exit status: 0 done, 1 failed or incomplete on some path,
 * 2 bad usage or command, 130 interrupted.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "admin.h"
#include "command.h"
#include "escape.h"
#include "fcachectl.h"
#include "output.h"
#include "polkit-agent.h"
#include "table.h"

#define RESULT_MAX (1u << 20)

static volatile int interrupted;

static void on_sigint(int sig)
{
        interrupted = 1;
}

static void usage(FILE *f)
{
        fputs("Usage: fcachectl [OPTIONS] COMMAND... [PATH...]\n"
              "\n"
              "Query and control what filesystems keep in their caches.\n"
              "\n"
              "Commands:\n"
              "  query cached [recursive]   pages of PATH in the page cache (a directory: its\n"
              "                             files; recursive: its whole subtree)\n"
              "  query dirty [recursive]    dirty and writeback pages, as above\n"
              "  query cache                page-cache and FS-Cache totals, PATH's filesystem\n"
              "  flush                      write back, then drop PATH's cached pages (a\n"
              "                             directory: its subtree)\n"
              "  flush volume               the same for every file of PATH's mount\n"
              "  flush all                  the same for every network filesystem mounted\n"
              "  flush callbacks            force PATH to be revalidated with its server\n"
              "  prefetch [recursive]       read PATH into the page cache\n"
              "  pin [recursive] [priority N] [dry-run] | unpin [recursive]\n"
              "  query pinned | query state | query conflicts | query reintegration\n"
              "  set cache-size SIZE | set cacheable on|off | set reserve SIZE | set cache NAME\n"
              "  disconnect | reconnect [force]  (these need fcached; force: even when the\n"
              "                             server lost more of the pinned copy than\n"
              "                             ReconnectDeleteLimit allows)\n"
              "  sync                       wait until PATH's changes made in write-back are\n"
              "                             on the server (no PATH: every volume's)\n"
              "\n"
              "Commands on fcached itself (no PATH):\n"
              "  status                     fcached, fcache.ko, pins and each volume: state,\n"
              "                             pending changes, conflicts, cache use, metered\n"
              "  volume list                the volumes fcached runs\n"
              "  volume add NAME FILE|-|KEY=VALUE...  add one from a NAME.conf text (a file,\n"
              "                             standard input, or its [Volume] keys) and start it\n"
              "  volume remove NAME         stop it and remove its NAME.conf (its store stays)\n"
              "\n"
              "Options:\n"
              "  -j, --json          print results as JSON (see fcachectl(1) for the format)\n"
              "  -P, --no-follow     act on a symbolic link itself, not on its target\n"
              "  -A, --no-automount  never trigger an automount at PATH\n"
              "  -w, --workers=N     parallel workers for directory trees\n"
              "  -q, --quiet         no progress line\n"
              "      --no-legend     tables without their header line\n"
              "      --force         with reconnect: reconnect force\n"
              "  -o, --output=COLS   tables with these columns only, in this order (names as\n"
              "                     in the header, comma-separated)\n"
              "      --no-ask-password  never ask for a password (on a terminal, polkit may\n"
              "                     ask for one, through pkttyagent, when fcached needs it)\n"
              "  -h, --help          show this help\n"
              "  -V, --version       show the version\n"
              "\n"
              "PATH defaults to / for 'query cache' and 'flush all'. Results are key=value\n"
              "pairs documented in fcachectl(3). Exit status: 0 done, 1 failed or incomplete\n"
              "on some PATH, 2 bad usage or command, 130 interrupted.\n", f);
}

struct progress_state {
        struct timespec start;
        int shown;
};

static double elapsed(const struct timespec *start)
{
        struct timespec now;

        clock_gettime(CLOCK_MONOTONIC, &now);
        return (double)(now.tv_sec - start->tv_sec) + (double)(now.tv_nsec - start->tv_nsec) / 1e9;
}

/* A one-line progress report on stderr; only on a terminal, only once the work takes a while. */
static void show_progress(const struct fcachectl_progress *p, void *userdata)
{
        struct progress_state *s = userdata;
        double t = elapsed(&s->start);
        char done[32], rate[32], eta[32] = "";

        if (t < 0.5)
                return;
        fc_format_bytes(done, sizeof(done), p->bytes_done);
        fc_format_bytes(rate, sizeof(rate), (unsigned long long)((double)p->bytes_done / t));
        if (p->walk_done && p->files_done && p->files_seen > p->files_done) {
                double left = t * (double)(p->files_seen - p->files_done) / (double)p->files_done;
                snprintf(eta, sizeof(eta), "  ETA %d:%02d", (int)left / 60, (int)left % 60);
        }
        fprintf(stderr, "\r\033[K%llu/%llu%s files  %s  %s/s%s",
                (unsigned long long)p->files_done, (unsigned long long)p->files_seen,
                p->walk_done ? "" : "+", done, rate, eta);
        s->shown = 1;
}

int main(int argc, char **argv)
{
        static const struct option longopts[] = {
                { "json", no_argument, NULL, 'j' },
                { "no-follow", no_argument, NULL, 'P' },
                { "no-automount", no_argument, NULL, 'A' },
                { "workers", required_argument, NULL, 'w' },
                { "quiet", no_argument, NULL, 'q' },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },
                { "no-ask-password", no_argument, NULL, 'N' },
                { "no-legend", no_argument, NULL, 'L' },
                { "output", required_argument, NULL, 'o' },
                { "force", no_argument, NULL, 'F' },
                { NULL, 0, NULL, 0 },
        };
        bool json = false, quiet = false, ask_password = true, no_legend = false, force = false;
        const char *output = NULL;
        pid_t agent = 0;
        unsigned atflags = 0, workers = 0;
        struct fc_command cmd;
        struct fc_error e = { 0 };
        char text[FCACHECTL_CMD_MAX + 1];
        int opt, used, failed = 0;

        while ((opt = getopt_long(argc, argv, "jPAw:qhVo:", longopts, NULL)) != -1) {
                switch (opt) {
                case 'j': json = true; break;
                case 'P': atflags |= AT_SYMLINK_NOFOLLOW; break;
                case 'A': atflags |= AT_NO_AUTOMOUNT; break;
                case 'q': quiet = true; break;
                case 'N': ask_password = false; break;
                case 'L': no_legend = true; break;
                case 'o': output = optarg; break;
                case 'F': force = true; break;
                case 'w': {
                        char *end;
                        long v = strtol(optarg, &end, 10);
                        if (*end || v < 1 || v > 64) {
                                fprintf(stderr, "fcachectl: --workers: '%s' is not a number "
                                        "from 1 to 64\n", optarg);
                                return 2;
                        }
                        workers = (unsigned)v;
                        break;
                }
                case 'h': usage(stdout); return 0;
                case 'V': printf("fcachectl %s\n", FCACHE_VERSION); return 0;
                default:
                        fputs("Try 'fcachectl --help'.\n", stderr);
                        return 2;
                }
        }
        if (optind >= argc) {
                usage(stderr);
                return 2;
        }
        fc_table_options(no_legend, output);
        if (fc_admin_command(argv[optind]))
                return fc_admin_run(argv + optind, argc - optind, json,
                                    ask_password && isatty(STDIN_FILENO));
        if (fc_command_parse_words(argv + optind, argc - optind, &cmd, &used, &e) < 0) {
                fprintf(stderr, "fcachectl: %s\n", e.text);
                return 2;
        }
        if (force) {
                if (cmd.op != FC_OP_RECONNECT) {
                        fprintf(stderr, "fcachectl: --force applies to reconnect only\n");
                        return 2;
                }
                cmd.mods |= FC_MOD_FORCE;
        }
        fc_command_format(&cmd, text, sizeof(text));
        char **paths = argv + optind + used;
        int npaths = argc - optind - used;
        if (npaths > 0 && !strcmp(paths[0], "--")) {
                paths++;
                npaths--;
        }
        static char *root[] = { "/" };
        if (npaths == 0) {
                /* sync with no PATH: every volume (fcached takes "/" so) */
                if (cmd.op != FC_OP_QUERY_CACHE && cmd.op != FC_OP_FLUSH_ALL &&
                    cmd.op != FC_OP_SYNC) {
                        fprintf(stderr, "fcachectl: %s: missing PATH\n", text);
                        return 2;
                }
                paths = root;
                npaths = 1;
        }

        struct sigaction sa = { .sa_handler = on_sigint };
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGTERM, &sa, NULL);

        struct progress_state ps = { 0 };
        struct fcachectl_options o = {
                .size = sizeof(o), .workers = workers, .cancel = &interrupted,
                .progress = !quiet && isatty(STDERR_FILENO) ? show_progress : NULL,
                .userdata = &ps,
        };
        /* Queries need no password (polkit org.fcache.query is yes for all); the rest may,
         * when there is someone at a terminal to type it. */
        if (ask_password && isatty(STDIN_FILENO) && fc_op_name(cmd.op) &&
            strncmp(fc_op_name(cmd.op), "query", 5)) {
                o.flags |= FCACHECTL_F_INTERACTIVE;
                agent = fc_polkit_agent_open();
        }
        struct fc_outcome *outs = calloc((size_t)npaths, sizeof(*outs));
        char *buf = malloc(RESULT_MAX);
        char **texts = calloc((size_t)npaths, sizeof(*texts));
        if (!outs || !buf || !texts) {
                fputs("fcachectl: out of memory\n", stderr);
                return 1;
        }
        for (int i = 0; i < npaths && !interrupted; i++) {
                size_t len = RESULT_MAX;

                outs[i].path = paths[i];
                clock_gettime(CLOCK_MONOTONIC, &ps.start);
                ps.shown = 0;
                int r = fcachectl_ex(AT_FDCWD, paths[i], atflags, text, buf, &len, &o);
                if (ps.shown)
                        fputs("\r\033[K", stderr);
                if (r < 0) {
                        outs[i].err = errno;
                        outs[i].message = strdup(fcachectl_error());
                        /* The message names the path: escaped, as on standard output. */
                        fputs("fcachectl: ", stderr);
                        fc_fputs_display(fcachectl_error(), stderr);
                        fputc('\n', stderr);
                        failed = 1;
                        continue;
                }
                texts[i] = strdup(buf);
                if (!texts[i] || fc_outcome_parse(&outs[i], texts[i]) < 0) {
                        fputs("fcachectl: out of memory\n", stderr);
                        return 1;
                }
                const char *errors = fc_outcome_get(&outs[i], "errors");
                if (errors && strcmp(errors, "0")) {
                        const char *first = fc_outcome_get(&outs[i], "first_error");
                        fputs("fcachectl: ", stderr);
                        fc_fputs_display(paths[i], stderr);
                        fprintf(stderr, ": %s files or directories could not be handled; "
                                "the first: ", errors);
                        fc_fputs_display(first ? first : "?", stderr);
                        fputc('\n', stderr);
                        failed = 1;
                }
        }
        fc_polkit_agent_close(agent);
        if (json)
                fc_print_json(stdout, text, outs, (size_t)npaths);
        else if (fc_print_table(stdout, &cmd, outs, (size_t)npaths) < 0)
                failed = 2;
        for (int i = 0; i < npaths; i++) {
                fc_outcome_free(&outs[i]);
                free(texts[i]);
        }
        free(texts);
        free(outs);
        free(buf);
        if (interrupted) {
                fputs("fcachectl: interrupted\n", stderr);
                return 130;
        }
        return failed;
}
