/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * volumes.c: the registry of fcache volumes, their fcache-view processes,
 * and forwarding commands to a volume's control socket (volumes.h).
 *
 * Main-loop side: loading, starting, restarting, adding, removing.  Worker
 * side: fcd_volume_forward(), which only reads the mountpoint and socket
 * path of a volume under vols->lock.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <glib/gstdio.h>

#include "ctlmsg.h"
#include "volume-config.h"
#include "volume-link.h"
#include "volumes.h"

#define RESTARTS_MAX 5             /* deaths in a row before a volume is given up */
#define FORWARD_TIMEOUT_S 600      /* longest answer wait (a recursive pin) */

struct volume {
        struct fcd_volumes *vols;
        struct volume_config cfg;
        char *conf_path;
        char *socket_path;
        GPid pid;                  /* the holder we started, 0 if adopted or stopped */
        guint child_watch;
        guint restart_timer;
        unsigned deaths;
        bool removing;
        struct volume_link *link;  /* reachability of its server (volume-link.h) */
};

struct fcd_volumes {
        GMutex lock;               /* the list, for fcd_volume_forward() */
        GPtrArray *list;           /* struct volume * */
        char *dir;
        char *view_exe;
        fcd_volume_state_fn on_state;  /* fcd_volumes_set_state_hook() */
        void *on_state_data;
};

static void volume_start(struct volume *vol);

static void volume_free(struct volume *vol)
{
        if (vol->child_watch)
                g_source_remove(vol->child_watch);
        if (vol->restart_timer)
                g_source_remove(vol->restart_timer);
        volume_link_free(vol->link);
        volume_config_free(&vol->cfg);
        g_free(vol->conf_path);
        g_free(vol->socket_path);
        g_free(vol);
}

struct job_watch {
        struct fcd_progress *progress;
        const volatile int *cancel;
};

static void on_job_progress(void *userdata, uint64_t done, uint64_t total, uint64_t bytes)
{
        struct job_watch *w = userdata;

        if (w->progress) /* the view's admission walk has counted the files already */
                fcd_progress_set(w->progress, done, total, bytes, TRUE);
}

static bool job_cancelled(void *userdata)
{
        struct job_watch *w = userdata;

        return w->cancel && *w->cancel;
}

/*
 * One request on the control socket (proto/ctlmsg.h), on @target_fd (an
 * O_PATH descriptor in the volume's mount, resolved as the caller; -1 for
 * the volume root) and, with @name, that directory's entry: the answer's
 * results go to *lines as "key=value" (the view's error as "error=...").
 * Returns the answer's status (0 or -errno), or -errno of the exchange
 * itself.  With @cancel, the command runs as a job of the view: its progress
 * goes to @progress, and *cancel set cancels it.
 */
static int control_call_job(const char *socket_path, const char *command, int target_fd,
                            const char *name, GPtrArray *lines, struct fcd_progress *progress,
                            const volatile int *cancel)
{
        struct job_watch w = { progress, cancel };
        struct ctl_call c = {
                .command = command, .target_fd = target_fd, .name = name,
                .run_as_job = cancel != NULL, .idle_timeout_ms = FORWARD_TIMEOUT_S * 1000,
                .on_progress = on_job_progress, .cancel_requested = job_cancelled,
                .userdata = &w,
        };
        struct ctl_answer a;
        int r = ctl_call(socket_path, &c, &a);

        if (a.error)
                g_ptr_array_add(lines, g_strconcat("error=", a.error, NULL));
        for (size_t i = 0; i < a.n; i++)
                g_ptr_array_add(lines, g_strconcat(a.keys[i], "=", a.values[i], NULL));
        ctl_answer_clear(&a);
        return r;
}

int fcd_control_call(const char *socket_path, const char *command, int target_fd,
                     const char *name, GPtrArray *lines)
{
        return control_call_job(socket_path, command, target_fd, name, lines, NULL, NULL);
}

/* A view is already serving this volume (an fcached before us started it). */
static bool volume_adopt(struct volume *vol)
{
        g_autoptr(GPtrArray) lines = g_ptr_array_new_with_free_func(g_free);
        g_autofree char *want = g_strdup_printf("mountpoint=%s", vol->cfg.mountpoint);

        if (fcd_control_call(vol->socket_path, "query state", -1, NULL, lines) < 0)
                return false;
        for (guint i = 0; i < lines->len; i++)
                if (!strcmp(lines->pdata[i], want))
                        return true;
        return false;
}

static gboolean on_restart_timer(gpointer data)
{
        struct volume *vol = data;

        vol->restart_timer = 0;
        volume_start(vol);
        return G_SOURCE_REMOVE;
}

static void on_view_exit(GPid pid, gint status, gpointer data)
{
        struct volume *vol = data;

        g_spawn_close_pid(pid);
        vol->child_watch = 0;
        vol->pid = 0;
        if (vol->removing)
                return;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
                g_message("Volume %s: its view stopped", vol->cfg.name);
                return;
        }
        if (++vol->deaths > RESTARTS_MAX) {
                g_warning("Volume %s: its view died %u times in a row; given up (see the log "
                          "above for why)", vol->cfg.name, vol->deaths - 1);
                return;
        }
        g_warning("Volume %s: its view (pid %d) %s %d; starting it again", vol->cfg.name, pid,
                  WIFSIGNALED(status) ? "was killed by signal" : "exited with status",
                  WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
        vol->restart_timer = g_timeout_add_seconds(1, on_restart_timer, vol);
}

static void on_link_state(void *userdata, const char *name, const char *state,
                          const char *reason)
{
        struct fcd_volumes *vols = userdata;

        if (vols->on_state)
                vols->on_state(vols->on_state_data, name, state, reason);
}

static void volume_start(struct volume *vol)
{
        const char *argv[] = { vol->vols->view_exe, "--config", vol->conf_path, NULL };
        g_autoptr(GError) error = NULL;

        if (!vol->link)
                vol->link = volume_link_new(vol->cfg.name, vol->cfg.server, vol->socket_path,
                                            on_link_state, vol->vols);
        volume_link_sync(vol->link);
        if (volume_adopt(vol)) {
                g_message("Volume %s: adopted the view serving %s", vol->cfg.name,
                          vol->cfg.mountpoint);
                return;
        }
        if (!g_spawn_async(NULL, (char **)argv, NULL,
                           G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_LEAVE_DESCRIPTORS_OPEN,
                           NULL, NULL, &vol->pid, &error)) {
                g_warning("Volume %s: cannot start %s: %s", vol->cfg.name, argv[0],
                          error->message);
                return;
        }
        vol->child_watch = g_child_watch_add(vol->pid, on_view_exit, vol);
        g_message("Volume %s: started its view (pid %d) on %s", vol->cfg.name, vol->pid,
                  vol->cfg.mountpoint);
}

/* The parent process of @pid, from /proc (0 if unknown). */
static int parent_of(int pid)
{
        g_autofree char *path = g_strdup_printf("/proc/%d/stat", pid), *text = NULL;
        const char *p;
        int ppid = 0;

        if (!g_file_get_contents(path, &text, NULL, NULL) || !(p = strrchr(text, ')')))
                return 0;
        return sscanf(p, ") %*c %d", &ppid) == 1 ? ppid : 0;
}

static struct volume *find_locked(struct fcd_volumes *vols, const char *name,
                                  const char *mountpoint)
{
        for (guint i = 0; i < vols->list->len; i++) {
                struct volume *vol = vols->list->pdata[i];
                if ((name && !strcmp(vol->cfg.name, name)) ||
                    (mountpoint && !strcmp(vol->cfg.mountpoint, mountpoint)))
                        return vol;
        }
        return NULL;
}

/* Parses @conf_path into a new volume and registers it; -errno with @e set. */
static int volume_load(struct fcd_volumes *vols, const char *conf_path, struct volume **out,
                       struct fc_error *e)
{
        struct volume *vol = g_new0(struct volume, 1);
        g_autofree char *base = g_path_get_basename(conf_path);
        char err[512] = "";
        int r;

        vol->vols = vols;
        vol->conf_path = g_strdup(conf_path);
        volume_config_init(&vol->cfg);
        *strrchr(base, '.') = '\0';
        vol->cfg.name = g_strdup(base);
        r = volume_config_load(&vol->cfg, conf_path, err, sizeof(err));
        if (r == 0)
                r = volume_config_validate(&vol->cfg, err, sizeof(err));
        if (r < 0) {
                fc_error_set(e, -r, "%s", err);
                volume_free(vol);
                return r;
        }
        vol->socket_path = g_build_filename(vol->cfg.cache_dir, "control.sock", NULL);
        g_mutex_lock(&vols->lock);
        if (find_locked(vols, vol->cfg.name, vol->cfg.mountpoint)) {
                g_mutex_unlock(&vols->lock);
                fc_error_set(e, EEXIST, "%s: a volume named %s or mounted on %s exists already",
                             conf_path, vol->cfg.name, vol->cfg.mountpoint);
                volume_free(vol);
                return -EEXIST;
        }
        g_ptr_array_add(vols->list, vol);
        g_mutex_unlock(&vols->lock);
        *out = vol;
        return 0;
}

struct fcd_volumes *fcd_volumes_start(const char *dir, const char *view_exe)
{
        struct fcd_volumes *vols = g_new0(struct fcd_volumes, 1);
        g_autoptr(GError) error = NULL;
        g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);
        GDir *d;

        g_mutex_init(&vols->lock);
        vols->list = g_ptr_array_new();
        vols->dir = g_strdup(dir);
        vols->view_exe = g_strdup(view_exe);
        d = g_dir_open(dir, 0, &error);
        if (!d) {
                if (!g_error_matches(error, G_FILE_ERROR, G_FILE_ERROR_NOENT))
                        g_warning("Volumes: cannot read %s: %s", dir, error->message);
                return vols;
        }
        for (const char *n; (n = g_dir_read_name(d));)
                if (g_str_has_suffix(n, ".conf") && strlen(n) > 5)
                        g_ptr_array_add(names, g_strdup(n));
        g_dir_close(d);
        g_ptr_array_sort(names, (GCompareFunc)g_strcmp0);
        for (guint i = 0; i < names->len; i++) {
                g_autofree char *path = g_build_filename(dir, names->pdata[i], NULL);
                struct fc_error e = { 0 };
                struct volume *vol;

                if (volume_load(vols, path, &vol, &e) < 0) {
                        g_warning("Volume not started: %s", e.text);
                        continue;
                }
                volume_start(vol);
        }
        return vols;
}

void fcd_volumes_free(struct fcd_volumes *vols)
{
        if (!vols)
                return;
        for (guint i = 0; i < vols->list->len; i++)
                volume_free(vols->list->pdata[i]);
        g_ptr_array_unref(vols->list);
        g_mutex_clear(&vols->lock);
        g_free(vols->dir);
        g_free(vols->view_exe);
        g_free(vols);
}

/* NAME of NAME.conf: what a file name and a D-Bus path element can both hold. */
static bool name_valid(const char *name)
{
        if (!*name || strlen(name) > 64 || name[0] == '.' || name[0] == '-')
                return false;
        for (const char *p = name; *p; p++)
                if (!g_ascii_isalnum(*p) && *p != '_' && *p != '-' && *p != '.')
                        return false;
        return true;
}

int fcd_volumes_add(struct fcd_volumes *vols, const char *name, const char *config,
                    struct fc_error *e)
{
        g_autofree char *path = NULL, *tmp = NULL;
        g_autoptr(GError) error = NULL;
        struct volume *vol;
        int r;

        if (!name_valid(name))
                return fc_error_set(e, EINVAL, "'%s' is not a volume name (1 to 64 letters, "
                                    "digits, '_', '-' or '.', not starting with '.' or '-')",
                                    name);
        g_mutex_lock(&vols->lock);
        vol = find_locked(vols, name, NULL);
        g_mutex_unlock(&vols->lock);
        if (vol)
                return fc_error_set(e, EEXIST, "volume %s exists already", name);
        if (g_mkdir_with_parents(vols->dir, 0755) < 0)
                return fc_error_set(e, errno, "%s: %s", vols->dir, g_strerror(errno));
        path = g_strdup_printf("%s/%s.conf", vols->dir, name);
        tmp = g_strdup_printf("%s/.%s.conf.new", vols->dir, name);
        /* Parsed from a temporary first, so a bad config never lands in the directory. */
        if (!g_file_set_contents_full(tmp, config, -1, G_FILE_SET_CONTENTS_CONSISTENT, 0644,
                                      &error))
                return fc_error_set(e, EIO, "%s", error->message);
        r = volume_load(vols, tmp, &vol, e);
        if (r < 0) {
                g_unlink(tmp);
                return r;
        }
        g_free(vol->cfg.name);
        vol->cfg.name = g_strdup(name);
        if (rename(tmp, path) < 0) {
                r = -errno;
                g_unlink(tmp);
                g_mutex_lock(&vols->lock);
                g_ptr_array_remove(vols->list, vol);
                g_mutex_unlock(&vols->lock);
                volume_free(vol);
                return fc_error_set(e, -r, "%s: %s", path, g_strerror(-r));
        }
        g_free(vol->conf_path);
        vol->conf_path = g_steal_pointer(&path);
        volume_start(vol);
        return 0;
}

int fcd_volumes_remove(struct fcd_volumes *vols, const char *name, struct fc_error *e)
{
        g_autoptr(GPtrArray) lines = g_ptr_array_new_with_free_func(g_free);
        struct volume *vol;
        int pid = 0;

        g_mutex_lock(&vols->lock);
        vol = find_locked(vols, name, NULL);
        if (vol)
                g_ptr_array_remove(vols->list, vol);
        g_mutex_unlock(&vols->lock);
        if (!vol)
                return fc_error_set(e, ENOENT, "no volume named %s", name);
        vol->removing = true;
        /* An adopted view is not our child: its holder is the parent of its worker. */
        if (vol->pid)
                pid = vol->pid;
        else if (fcd_control_call(vol->socket_path, "query state", -1, NULL, lines) >= 0)
                for (guint i = 0; i < lines->len; i++) {
                        int worker;
                        if (sscanf(lines->pdata[i], "pid=%d", &worker) == 1)
                                pid = parent_of(worker);
                }
        if (pid > 0)
                kill(pid, SIGTERM);
        else
                g_warning("Volume %s: cannot tell its view's holder; unmount %s by hand", name,
                          vol->cfg.mountpoint);
        if (g_unlink(vol->conf_path) < 0 && errno != ENOENT)
                g_warning("Volume %s: cannot remove %s: %s", name, vol->conf_path,
                          g_strerror(errno));
        g_message("Volume %s: stopped (unmounting %s)", name, vol->cfg.mountpoint);
        /* The child watch, if any, is removed with it; the holder is reaped by init. */
        volume_free(vol);
        return 0;
}

GVariant *fcd_volumes_list(struct fcd_volumes *vols)
{
        GVariantBuilder b;

        g_variant_builder_init(&b, G_VARIANT_TYPE("a(sss)"));
        g_mutex_lock(&vols->lock);
        for (guint i = 0; i < vols->list->len; i++) {
                struct volume *vol = vols->list->pdata[i];
                g_variant_builder_add(&b, "(sss)", vol->cfg.name, vol->cfg.mountpoint,
                                      vol->cfg.backing);
        }
        g_mutex_unlock(&vols->lock);
        return g_variant_builder_end(&b);
}

/* The volume @canonical lies in; copies of its name, mountpoint and socket
 * path (each may be NULL). */
static bool volume_of(struct fcd_volumes *vols, const char *canonical, char **name,
                      char **mountpoint, char **socket_path)
{
        bool found = false;

        if (!vols)
                return false;
        g_mutex_lock(&vols->lock);
        for (guint i = 0; i < vols->list->len && !found; i++) {
                struct volume *vol = vols->list->pdata[i];
                size_t ml = strlen(vol->cfg.mountpoint);
                if (!strncmp(canonical, vol->cfg.mountpoint, ml) &&
                    (canonical[ml] == '/' || !canonical[ml])) {
                        if (name)
                                *name = g_strdup(vol->cfg.name);
                        if (mountpoint)
                                *mountpoint = g_strdup(vol->cfg.mountpoint);
                        if (socket_path)
                                *socket_path = g_strdup(vol->socket_path);
                        found = true;
                }
        }
        g_mutex_unlock(&vols->lock);
        return found;
}

bool fcd_volume_contains(struct fcd_volumes *vols, const char *canonical)
{
        return volume_of(vols, canonical, NULL, NULL, NULL);
}

bool fcd_volume_find(struct fcd_volumes *vols, const char *canonical, char **name,
                     char **mountpoint, char **socket_path)
{
        return volume_of(vols, canonical, name, mountpoint, socket_path);
}

char *fcd_volume_socket(struct fcd_volumes *vols, const char *name)
{
        struct volume *vol;
        char *socket_path = NULL;

        if (!vols)
                return NULL;
        g_mutex_lock(&vols->lock);
        vol = find_locked(vols, name, NULL);
        if (vol)
                socket_path = g_strdup(vol->socket_path);
        g_mutex_unlock(&vols->lock);
        return socket_path;
}

struct manual {
        struct fcd_volumes *vols;
        char *name;
        bool disconnect;
        bool force;             /* reconnect force */
};

/* Main loop: a manual disconnect or reconnect reaches the volume's link. */
static gboolean on_manual(gpointer data)
{
        struct manual *m = data;
        struct volume *vol;

        g_mutex_lock(&m->vols->lock);
        vol = find_locked(m->vols, m->name, NULL);
        g_mutex_unlock(&m->vols->lock);
        if (vol)
                volume_link_manual(vol->link, m->disconnect, m->force);
        g_free(m->name);
        return G_SOURCE_REMOVE;
}

void fcd_volumes_set_state_hook(struct fcd_volumes *vols, fcd_volume_state_fn fn, void *userdata)
{
        vols->on_state = fn;
        vols->on_state_data = userdata;
}

GVariant *fcd_volumes_states(struct fcd_volumes *vols)
{
        GVariantBuilder b;

        g_variant_builder_init(&b, G_VARIANT_TYPE("a{ss}"));
        g_mutex_lock(&vols->lock);
        for (guint i = 0; i < vols->list->len; i++) {
                struct volume *vol = vols->list->pdata[i];

                g_variant_builder_add(&b, "{ss}", vol->cfg.name, volume_link_state(vol->link));
        }
        g_mutex_unlock(&vols->lock);
        return g_variant_builder_end(&b);
}

static void volume_info_clear(gpointer p)
{
        struct fcd_volume_info *vi = p;

        g_free(vi->name);
        g_free(vi->mountpoint);
        g_free(vi->backing);
        g_free(vi->socket_path);
        g_free(vi->state);
        g_free(vi->reason);
}

GArray *fcd_volumes_info(struct fcd_volumes *vols)
{
        GArray *out = g_array_new(FALSE, TRUE, sizeof(struct fcd_volume_info));

        g_array_set_clear_func(out, volume_info_clear);
        if (!vols)
                return out;
        g_mutex_lock(&vols->lock);
        for (guint i = 0; i < vols->list->len; i++) {
                struct volume *vol = vols->list->pdata[i];
                struct fcd_volume_info vi = {
                        .name = g_strdup(vol->cfg.name),
                        .mountpoint = g_strdup(vol->cfg.mountpoint),
                        .backing = g_strdup(vol->cfg.backing),
                        .socket_path = g_strdup(vol->socket_path),
                        .state = g_strdup(volume_link_state(vol->link)),
                        .reason = g_strdup(volume_link_reason(vol->link)),
                        .metered = volume_link_metered(vol->link),
                };
                if (!vol->removing)
                        g_array_append_val(out, vi);
                else
                        volume_info_clear(&vi);
        }
        g_mutex_unlock(&vols->lock);
        return out;
}

bool fcd_volume_forward(struct fcd_volumes *vols, const char *canonical, int target_fd,
                        const char *cmd_text, struct fcd_progress *progress,
                        const volatile int *cancel, struct fc_result *res, struct fc_error *e,
                        int *r)
{
        g_autoptr(GPtrArray) lines = g_ptr_array_new_with_free_func(g_free);
        g_autofree char *socket_path = NULL, *name = NULL;
        const char *error = NULL;

        if (!volume_of(vols, canonical, &name, NULL, &socket_path))
                return false;
        if (!strcmp(cmd_text, "disconnect") || !strcmp(cmd_text, "reconnect") ||
            g_str_has_prefix(cmd_text, "reconnect ")) {
                struct manual *m = g_new0(struct manual, 1);

                /* The link must know, or it would undo a manual disconnect. */
                m->vols = vols;
                m->name = g_strdup(name);
                m->disconnect = cmd_text[0] == 'd';
                m->force = !strcmp(cmd_text, "reconnect force");
                g_main_context_invoke_full(NULL, G_PRIORITY_DEFAULT, on_manual, m, g_free);
        }
        *r = control_call_job(socket_path, cmd_text, target_fd, NULL, lines, progress, cancel);
        fc_result_add_str(res, "volume", name);
        for (guint i = 0; i < lines->len; i++) {
                char *line = lines->pdata[i], *eq = strchr(line, '=');
                if (!eq)
                        continue;
                *eq = '\0';
                if (!strcmp(line, "error"))
                        error = eq + 1;
                else
                        fc_result_add_str(res, line, eq + 1);
        }
        if (*r < 0)
                *r = fc_error_set(e, -*r, "%s: volume %s: %s", canonical, name,
                                  error ? error : g_strerror(-*r));
        return true;
}

/* Each volume's control socket and name, copied: the calls run without the lock. */
static void volumes_targets(struct fcd_volumes *vols, GPtrArray *sockets, GPtrArray *names)
{
        if (!vols)
                return;
        g_mutex_lock(&vols->lock);
        for (guint i = 0; i < vols->list->len; i++) {
                struct volume *vol = vols->list->pdata[i];
                g_ptr_array_add(sockets, g_strdup(vol->socket_path));
                g_ptr_array_add(names, g_strdup(vol->cfg.name));
        }
        g_mutex_unlock(&vols->lock);
}

int fcd_volumes_flush_all(struct fcd_volumes *vols, struct fc_result *res)
{
        g_autoptr(GPtrArray) sockets = g_ptr_array_new_with_free_func(g_free);
        g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);
        guint64 flushed = 0;
        int failed = 0;

        if (!vols)
                return 0;
        volumes_targets(vols, sockets, names);
        for (guint i = 0; i < sockets->len; i++) {
                g_autoptr(GPtrArray) lines = g_ptr_array_new_with_free_func(g_free);
                int r = fcd_control_call(sockets->pdata[i], "flush volume", -1, NULL, lines);
                const char *n = fcd_control_value(lines, "flushed");

                if (r < 0) {
                        failed++;
                        g_warning("flush all: volume %s: %s", (char *)names->pdata[i],
                                  g_strerror(-r));
                        continue;
                }
                flushed += n ? g_ascii_strtoull(n, NULL, 10) : 0;
                fc_result_add_str(res, "flushed_volume", names->pdata[i]);
        }
        fc_result_add_u64(res, "volume_objects_flushed", flushed);
        if (failed)
                fc_result_add_u64(res, "volumes_failed", (uint64_t)failed);
        return 0;
}

const char *fcd_control_value(GPtrArray *lines, const char *key)
{
        size_t n = strlen(key);

        for (guint k = 0; k < lines->len; k++)
                if (!strncmp(lines->pdata[k], key, n) && ((char *)lines->pdata[k])[n] == '=')
                        return (char *)lines->pdata[k] + n + 1;
        return NULL;
}

int fcd_volumes_sync_all(struct fcd_volumes *vols, struct fc_result *res, struct fc_error *e)
{
        g_autoptr(GPtrArray) sockets = g_ptr_array_new_with_free_func(g_free);
        g_autoptr(GPtrArray) names = g_ptr_array_new_with_free_func(g_free);
        g_autoptr(GString) why = g_string_new(NULL);
        guint64 synced = 0;
        int failed = 0, last = 0;

        volumes_targets(vols, sockets, names);
        for (guint i = 0; i < sockets->len; i++) {
                g_autoptr(GPtrArray) lines = g_ptr_array_new_with_free_func(g_free);
                int r = fcd_control_call(sockets->pdata[i], "sync", -1, NULL, lines);
                const char *n = fcd_control_value(lines, "synced");

                if (r < 0) {
                        const char *msg = fcd_control_value(lines, "error");

                        failed++;
                        last = r;
                        g_string_append_printf(why, "%svolume %s: %s", why->len ? "; " : "",
                                               (char *)names->pdata[i],
                                               msg ? msg : g_strerror(-r));
                        fc_result_add_str(res, "failed_volume", names->pdata[i]);
                        continue;
                }
                synced += n ? g_ascii_strtoull(n, NULL, 10) : 0;
                fc_result_add_str(res, "synced_volume", names->pdata[i]);
        }
        fc_result_add_u64(res, "volumes", sockets->len);
        fc_result_add_u64(res, "synced", synced);
        if (failed)
                return fc_error_set(e, -last, "sync: %d of %u volumes did not get their changes to"
                                    " the server: %s", failed, sockets->len, why->str);
        return 0;
}
