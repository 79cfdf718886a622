/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * view-main.c: fcache-view, the data-plane process of one fcache volume.
 *
 *   fcache-view NAME                    volume from /etc/fcache/volumes.d/NAME.conf
 *   fcache-view --config FILE           volume from FILE
 *   fcache-view --backing DIR --mountpoint DIR --cache-dir DIR [--set Key=Value]...
 *
 * The process started this way is the holder: it mounts the view (it opens
 * /dev/fuse and mounts with allow_other,default_permissions), keeps the
 * /dev/fuse descriptor, and runs the worker (the same binary, re-executed
 * with --worker-fd) that serves it.  When the worker dies (kill -9, a crash,
 * SIGTERM for an upgrade) the holder starts a new worker with --takeover on
 * the same connection, so the mount never goes away.  SIGTERM to the holder
 * unmounts and stops.  --no-holder serves in this process (no restart).
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "view.h"

static void usage(void)
{
        fprintf(stderr,
                "Usage: fcache-view NAME | --config FILE | --backing DIR --mountpoint DIR"
                " --cache-dir DIR\n"
                "       [--name NAME] [--set Key=Value]... [--no-holder] [--debug]\n"
                "Keys: Backing Mountpoint CacheDir CacheSize CacheFiles Reserve Server\n"
                "      AttrLease BackingTimeout HoardInterval Threads\n");
}

static volatile sig_atomic_t holder_stop;

static void holder_signal(int sig)
{
        holder_stop = sig;
}

static bool fcache_mounted(const char *path)
{
        dev_t dev;

        return view_mount_find(path, &dev) == 0;
}

static int do_mount(const struct volume_config *cfg, int fd)
{
        char opts[256], src[256];
        struct statfs sf;
        struct stat st;

        /* statfs always reaches the filesystem: a dead FUSE connection left
         * by a crash answers ENOTCONN or ECONNABORTED; replace it. */
        for (int i = 0; i < 16; i++) {
                if (statfs(cfg->mountpoint, &sf) == 0) {
                        if (fcache_mounted(cfg->mountpoint))
                                return log_error("%s is already served by a live fcache view",
                                                 cfg->mountpoint), -EBUSY;
                        break;
                }
                if (errno != ENOTCONN && errno != ECONNABORTED)
                        return log_error("Mountpoint %s: %m", cfg->mountpoint), -errno;
                log_warn("Replacing the stale mount on %s", cfg->mountpoint);
                if (umount2(cfg->mountpoint, MNT_DETACH) < 0)
                        return log_error("Failed to unmount stale %s: %m", cfg->mountpoint), -errno;
        }
        if (stat(cfg->mountpoint, &st) < 0)
                return log_error("Mountpoint %s: %m", cfg->mountpoint), -errno;
        if (!S_ISDIR(st.st_mode))
                return log_error("Mountpoint %s is not a directory", cfg->mountpoint), -ENOTDIR;
        snprintf(opts, sizeof(opts), "fd=%d,rootmode=40000,user_id=0,group_id=0,"
                 "allow_other,default_permissions", fd);
        snprintf(src, sizeof(src), "fcache:%s", cfg->name ? cfg->name : cfg->backing);
        if (mount(src, cfg->mountpoint, "fuse.fcache", MS_NOSUID | MS_NODEV, opts) < 0)
                return log_error("Failed to mount %s: %m", cfg->mountpoint), -errno;
        return 0;
}

static pid_t start_worker(char **argv, int argc, int fd, int ready_fd, int store_fd,
                          bool takeover)
{
        char fdarg[32], readyarg[32], storearg[32];
        char **args = calloc((size_t)argc + 6, sizeof(*args));
        pid_t pid;
        int n = 0;

        if (!args)
                return -1;
        args[n++] = argv[0];
        for (int i = 1; i < argc; i++)
                args[n++] = argv[i];
        snprintf(fdarg, sizeof(fdarg), "--worker-fd=%d", fd);
        args[n++] = fdarg;
        snprintf(readyarg, sizeof(readyarg), "--ready-fd=%d", ready_fd);
        args[n++] = readyarg;
        if (store_fd >= 0) {
                snprintf(storearg, sizeof(storearg), "--fdstore-fd=%d", store_fd);
                args[n++] = storearg;
        }
        if (takeover)
                args[n++] = (char *)"--takeover";
        args[n] = NULL;
        pid = fork();
        if (pid == 0) {
                signal(SIGTERM, SIG_DFL);
                signal(SIGINT, SIG_DFL);
                execv("/proc/self/exe", args);
                log_error("Failed to execute the worker: %m");
                _exit(127);
        }
        free(args);
        return pid;
}

static int holder_run(struct volume_config *cfg, int argc, char **argv)
{
        unsigned early_deaths = 0, crashes = 0;
        time_t first_crash = 0;
        bool takeover = false;
        int fd, status, r, ready[2], store_fd = -1;
        pid_t pid;
        char c;

        fd = open("/dev/fuse", O_RDWR);         /* inherited by every worker */
        if (fd < 0)
                return log_error("Failed to open /dev/fuse: %m"), 1;
        if (do_mount(cfg, fd) < 0)
                return 1;
        /* A worker writes one byte here once it serves; one that dies before
         * that counts towards giving up. */
        if (pipe2(ready, O_NONBLOCK) < 0)
                return log_error("Failed to create a pipe: %m"), 1;
        fcntl(ready[0], F_SETFD, FD_CLOEXEC);
        /* Without it a successor cannot reach an open file without a name. */
        r = fdstore_holder_start(&store_fd);
        if (r < 0)
                log_warn("Failed to start keeping descriptors for the workers: %s",
                         strerror(-r));
        else
                fcntl(store_fd, F_SETFD, 0);    /* inherited by every worker */
        log_info("Mounted %s on %s", cfg->backing, cfg->mountpoint);
        {
                /* No SA_RESTART: the signal must interrupt waitpid(). */
                struct sigaction sa = { .sa_handler = holder_signal };

                sigemptyset(&sa.sa_mask);
                sigaction(SIGTERM, &sa, NULL);
                sigaction(SIGINT, &sa, NULL);
        }
        signal(SIGPIPE, SIG_IGN);
        for (;;) {
                pid = start_worker(argv, argc, fd, ready[1], store_fd, takeover);
                if (pid < 0) {
                        log_error("Failed to start a worker: %m");
                        break;
                }
                while ((r = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
                        if (holder_stop) {
                                log_info("Stopping: unmounting %s", cfg->mountpoint);
                                if (umount2(cfg->mountpoint, 0) < 0)
                                        umount2(cfg->mountpoint, MNT_DETACH);
                                kill(pid, SIGTERM);
                        }
                }
                if (holder_stop)
                        break;
                if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
                        log_info("The view was unmounted");
                        close(fd);
                        return 0;
                }
                if (WIFSIGNALED(status))
                        log_warn("Worker %d killed by signal %d; a new worker takes over",
                                 (int)pid, WTERMSIG(status));
                else
                        log_warn("Worker %d exited with status %d; a new worker takes over",
                                 (int)pid, WEXITSTATUS(status));
                /* A worker that crashes by itself (not killed from outside)
                 * three times within a minute is likely fed the same poison
                 * request again and again by the resend: give up. */
                if (!WIFSIGNALED(status) || (WTERMSIG(status) != SIGKILL &&
                                             WTERMSIG(status) != SIGTERM)) {
                        time_t now = time(NULL);

                        if (now - first_crash > 60) {
                                first_crash = now;
                                crashes = 0;
                        }
                        if (++crashes >= 3) {
                                log_error("Workers keep crashing; unmounting %s",
                                          cfg->mountpoint);
                                umount2(cfg->mountpoint, MNT_DETACH);
                                break;
                        }
                }
                /* Give up after 5 workers in a row died before serving. */
                if (read(ready[0], &c, 1) == 1) {
                        while (read(ready[0], &c, 1) == 1)
                                ;
                        early_deaths = 0;
                } else if (++early_deaths >= 5) {
                        log_error("Workers keep dying before they serve; unmounting %s",
                                  cfg->mountpoint);
                        umount2(cfg->mountpoint, MNT_DETACH);
                        break;
                } else {
                        usleep(200000 * early_deaths);
                }
                takeover = true;
        }
        close(fd);
        return holder_stop ? 0 : 1;
}

/*
 * Backing= could not be opened in time (a dead hard mount hangs there; the
 * helper stays stuck, the worker does not): a volume that has seen its
 * backing starts on its local copy, offline, and probes for the server.
 */
static int start_on_stand_in(struct view *v, int err)
{
        struct stat st;

        v->root_fd = backing_stand_in(v, -err);
        if (v->root_fd < 0)
                return log_error("Failed to open Backing %s: %s", v->cfg->backing,
                                 strerror(-v->root_fd)), v->root_fd;
        v->mount_fd = openat(v->root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (v->mount_fd < 0 || fstat(v->root_fd, &st) < 0)
                return -errno;
        v->backing_dev = st.st_dev;
        v->root_ino = st.st_ino;
        /* Whatever comes back is treated as a server: its calls are bounded. */
        v->backing_local = false;
        return 0;
}

/* A takeover's nodes and open files go back into their tables. */
static const struct state_restorer restorer = {
        .node = vnode_restore,
        .aliases = vnode_restore_aliases,
        .file = vfile_restore,
};

static int worker_setup(struct view *v, struct volume_config *cfg, bool takeover)
{
        struct backing_root b;
        bool wrong_backing;
        GString *why;
        int r;

        v->cfg = cfg;
        v->takeover = takeover;
        v->lease_s = (double)cfg->attr_lease_ms / 1000.0;
        v->control_fd = -1;
        umask(0);       /* the kernel already applied the caller's umask */
        why = g_string_new(NULL);
        r = backing_open_root(v, &b);
        if (r < 0) {
                backing_root_why(v, r, why);
                r = start_on_stand_in(v, r);
                if (r < 0) {
                        g_string_free(why, TRUE);
                        return r;
                }
        } else {
                v->root_fd = b.root_fd;
                v->mount_fd = b.mount_fd;
                v->backing_dev = b.st.st_dev;
                v->root_ino = b.st.st_ino;
                v->backing_local = b.local;
                v->handles = b.handles;
                v->names_identify = b.names_identify;
                log_info("Backing %s %s file handles", cfg->backing,
                         v->handles ? "has" : "has no (nodes re-resolve by parent and name)");
        }
        r = store_open(&v->store, cfg->cache_dir, cfg->cache_size, cfg->reserve,
                       cfg->cache_files);
        if (r < 0) {
                g_string_free(why, TRUE);
                return r;
        }
        view_dry_run_sweep(v);
        /* Before the log records the root: a stand-in must not become its base. */
        wrong_backing = why->len || backing_identity_compare(v, &b.id, why) < 0;
        r = view_oplog_open(v, !wrong_backing);
        if (r >= 0 && !wrong_backing)
                backing_numbering_check(v, &b);
        if (r >= 0 && wrong_backing)
                view_start_offline(v, why->str);
        if (r >= 0)
                view_start_writeback(v);
        g_string_free(why, TRUE);
        if (r < 0)
                return r;
        r = vnode_table_init(v);
        if (r < 0)
                return r;
        pthread_mutex_init(&v->ftab_lock, NULL);
        v->files = g_hash_table_new(g_int64_hash, g_int64_equal);
        v->next_fh = 1;
        r = state_open(v, takeover, &restorer);
        if (r >= 0 && takeover) {
                vfile_take_kept(v);
                vfile_adopt_restored(v);
                vfile_strand_unopened_writers(v);
        }
        if (r >= 0)
                view_reindex_start(v);
        return r;
}

int main(int argc, char **argv)
{
        static const struct option opts[] = {
                { "config", required_argument, NULL, 'c' },
                { "backing", required_argument, NULL, 'b' },
                { "mountpoint", required_argument, NULL, 'm' },
                { "cache-dir", required_argument, NULL, 'd' },
                { "name", required_argument, NULL, 'n' },
                { "set", required_argument, NULL, 's' },
                { "no-holder", no_argument, NULL, 'H' },
                { "debug", no_argument, NULL, 'D' },
                { "worker-fd", required_argument, NULL, 'W' },
                { "takeover", no_argument, NULL, 'T' },
                { "ready-fd", required_argument, NULL, 'R' },
                { "fdstore-fd", required_argument, NULL, 'F' },
                { "help", no_argument, NULL, 'h' },
                {}
        };
        struct volume_config cfg;
        struct view v = { .ready_fd = -1, .server_gone = view_server_gone_hook };
        char err[512], path[4096];
        bool no_holder = false, takeover = false;
        const char *conf_path = NULL;
        int c, worker_fd = -1, r;

        volume_config_init(&cfg);
        while ((c = getopt_long(argc, argv, "h", opts, NULL)) >= 0) {
                const char *key = NULL;
                char *eq;

                switch (c) {
                case 'c':
                        conf_path = optarg;
                        if (volume_config_load(&cfg, optarg, err, sizeof(err)) < 0) {
                                fprintf(stderr, "fcache-view: %s\n", err);
                                r = 2;
                                goto out;
                        }
                        break;
                case 'b': key = "Backing"; break;
                case 'm': key = "Mountpoint"; break;
                case 'd': key = "CacheDir"; break;
                case 'n':
                        free(cfg.name);
                        cfg.name = strdup(optarg);
                        break;
                case 's':
                        eq = strchr(optarg, '=');
                        if (!eq) {
                                fprintf(stderr, "fcache-view: --set %s: expected Key=Value\n",
                                        optarg);
                                r = 2;
                                goto out;
                        }
                        *eq = 0;
                        r = volume_config_set(&cfg, optarg, eq + 1, err, sizeof(err));
                        *eq = '=';
                        if (r < 0) {
                                fprintf(stderr, "fcache-view: --set: %s\n", err);
                                r = 2;
                                goto out;
                        }
                        break;
                case 'H': no_holder = true; break;
                case 'D': view_log_level = 7; break;
                case 'W': worker_fd = atoi(optarg); break;
                case 'T': takeover = true; break;
                case 'R': v.ready_fd = atoi(optarg); break;
                case 'F':
                        fcntl(atoi(optarg), F_SETFD, FD_CLOEXEC);
                        fdstore_attach(atoi(optarg));
                        break;
                case 'h': usage(); return 0;
                default:
                        usage();
                        r = 2;
                        goto out;
                }
                if (key && volume_config_set(&cfg, key, optarg, err, sizeof(err)) < 0) {
                        fprintf(stderr, "fcache-view: %s\n", err);
                        r = 2;
                        goto out;
                }
        }
        if (optind < argc) {
                if (optind + 1 != argc || strchr(argv[optind], '/')) {
                        usage();
                        r = 2;
                        goto out;
                }
                snprintf(path, sizeof(path), "%s/%s.conf", VOLUME_CONFIG_DIR, argv[optind]);
                if (volume_config_load(&cfg, path, err, sizeof(err)) < 0) {
                        fprintf(stderr, "fcache-view: %s\n", err);
                        r = 2;
                        goto out;
                }
                free(cfg.name);
                cfg.name = strdup(argv[optind]);
                conf_path = path;
        }
        if (volume_config_validate(&cfg, err, sizeof(err)) < 0) {
                fprintf(stderr, "fcache-view: %s%s%s\n", conf_path ? conf_path : "",
                        conf_path ? ": " : "", err);
                r = 2;
                goto out;
        }
        view_log_identify(cfg.name, NULL);
        if (!no_holder && worker_fd < 0) {
                view_log_identify(NULL, " holder");
                r = holder_run(&cfg, argc, argv);
                volume_config_free(&cfg);
                return r;
        }
        view_log_identify(NULL, takeover ? " worker*" : " worker");
        signal(SIGPIPE, SIG_IGN);
        if (worker_fd < 0) {
                worker_fd = open("/dev/fuse", O_RDWR | O_CLOEXEC);
                if (worker_fd < 0 || do_mount(&cfg, worker_fd) < 0) {
                        r = 1;
                        goto out;
                }
        }
        fcntl(worker_fd, F_SETFD, FD_CLOEXEC);
        r = worker_setup(&v, &cfg, takeover);
        if (r < 0) {
                log_error("Failed to start the volume: %s", strerror(-r));
                r = 3;
                goto out;
        }
        view_probe_resume(&v);
        view_writeback_start(&v);
        r = view_worker_run(&v, worker_fd);
        if (no_holder && r == 1) {
                umount2(cfg.mountpoint, MNT_DETACH);
                r = 0;  /* stopped on request */
        }
        /* FUSE threads may still be inside the store: leave without tearing it
         * down (every store commit is already durable in the WAL). */
        fflush(stderr);
        _exit(r < 0 ? 3 : r);
out:
        volume_config_free(&cfg);
        return r;
}
