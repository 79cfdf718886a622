/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * store.h: the persistent local store of one fcache volume.
 *
 * Layout under CacheDir:
 *   store.db            SQLite (WAL): objects, blocks, pins, facts
 *   objects/XX/INO      content of backing inode INO, sparse, block-addressed
 *
 * An object is one backing regular file, keyed by its inode number and
 * carrying the identity it was cached from (size, mtime, ctime) and when that
 * identity was last checked.  Content is kept in blocks of STORE_BLOCK bytes;
 * a block is present only once its data is in the content file and its row
 * (length, CRC-32C) is committed, so a crash leaves at worst a block that is
 * absent (fetched again) or whose checksum does not match (detected on read,
 * dropped and fetched again).  Corrupt content is never served.
 *
 * Containers: an object's content may instead live whole in a file outside
 * the block store, its container (the mirror's file of a file pinned or
 * cached whole; the store keeps its path, relative to the mirror).  The store
 * then holds no block of it: reads are served from the container as long as
 * the view's container function finds one holding exactly the object's
 * identity, its size counts as used (and pinned, when pinned), and culling
 * never touches a pinned one (an unpinned one is culled: see below).
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#define STORE_BLOCK (128 * 1024)

struct store;
struct sobj;

/* The backing identity an object's content is of. */
struct store_identity {
        uint64_t ino;
        int64_t size, mtime_ns, ctime_ns;
        const char *path;       /* the container's, as given to store_set_container() */
};
/* Opens (O_RDONLY) the container of @id holding exactly that content, or -errno. */
typedef int (*store_container_fn)(void *ud, const struct store_identity *id);

struct store_stats {
        uint64_t cache_size;    /* CacheSize */
        uint64_t reserve;       /* Reserve: never used for cached copies */
        uint64_t capacity;      /* cache_size - reserve */
        uint64_t used;          /* bytes of present blocks */
        uint64_t pinned;        /* bytes of present blocks of pinned objects */
        uint64_t free;          /* capacity - used */
        uint64_t brun, bcull, bstop; /* free-space thresholds, bytes */
        uint64_t objects;       /* objects with content */
        uint64_t files_limit;   /* CacheFiles, 0 = no limit */
        uint64_t files_free;    /* files_limit - objects */
        uint64_t frun, fcull, fstop; /* free-files thresholds */
        uint64_t culled;        /* objects culled since start */
        uint64_t corrupt;       /* blocks found corrupt since start */
};

struct sobj_info {
        uint64_t ino, size, bytes, validated_ns;
        uint32_t blocks_present, blocks_total;
        int pin;                /* priority, or -1 */
        bool complete;
        bool container;         /* the content is in its container, not in blocks */
};

int store_open(struct store **out, const char *dir, uint64_t cache_size, uint64_t reserve,
               uint64_t max_files);
void store_close(struct store *s);
/* Why the index was found damaged at start and made anew (the cache and its
 * pins lost), or NULL when it opened as it was. */
const char *store_fault(struct store *s);
int store_set_limits(struct store *s, uint64_t cache_size, uint64_t reserve);
void store_get_stats(struct store *s, struct store_stats *st);

/*
 * Returns the object of the backing file described by st, creating it if
 * create is set (else -ENOENT when the store has none).  If the recorded
 * identity differs from st, the old content is dropped first.  *unchanged is
 * set when the copy was already valid for st (the kernel may keep its cache).
 * A copy validated less than lease_ns ago is trusted without comparing.
 */
int store_obj_get(struct store *s, const struct stat *st, bool create, uint64_t lease_ns,
                  bool *unchanged, struct sobj **out);
void store_obj_put(struct store *s, struct sobj *o);
/* Closes o's content descriptors (opened again when needed) if it has no
 * more than @keepers references: for an object kept in memory unused. */
void store_obj_close_idle(struct store *s, struct sobj *o, unsigned keepers);
/* Another reference to an object already held. */
void store_obj_ref(struct store *s, struct sobj *o);
/* Pin priority of the object, or -1 when it is not pinned. */
int store_obj_pin(struct sobj *o);
/* The object of inode ino as recorded, without validation; -ENOENT if none. */
int store_obj_find(struct store *s, uint64_t ino, struct sobj **out);
/* Same, only if the object is in use (in memory): never touches the database. */
int store_obj_find_loaded(struct store *s, uint64_t ino, struct sobj **out);
/* True when the identity was last checked more than lease_ns ago. */
bool store_obj_stale(struct sobj *o, uint64_t now, uint64_t lease_ns);
/* Compares with a fresh stat of the backing; drops content if it changed.
 * @used: the object is being used (opened, read): that dates its last use,
 * which orders culling; a revalidation alone does not. */
int store_obj_revalidate(struct store *s, struct sobj *o, const struct stat *st, bool used,
                         bool *unchanged);

/*
 * Reads [off, off+size) of the object into buf, from present blocks, and
 * fetches absent (or corrupt) blocks from the backing descriptor bfd into
 * the store when there is room.  Returns bytes read or -errno.
 */
ssize_t store_obj_read(struct store *s, struct sobj *o, int bfd, char *buf, size_t size,
                       off_t off);
/* Fetches every absent block; *fetched gets the bytes brought in. */
int store_obj_fill(struct store *s, struct sobj *o, int bfd, uint64_t *fetched);
/* After a write through the view reached the backing: patch present blocks. */
int store_obj_written(struct store *s, struct sobj *o, const char *buf, size_t size,
                      off_t off, const struct stat *st);
/* After truncate/fallocate reached the backing: drop what changed. */
int store_obj_changed_range(struct store *s, struct sobj *o, off_t off, off_t len,
                            const struct stat *st);
int store_obj_set_pin(struct store *s, struct sobj *o, int prio);
void store_obj_info(struct sobj *o, struct sobj_info *info);

/* Drops the content of inode ino (unlink, flush).  Pinned copies are kept
 * unless even_pinned.  Returns 1 if something was dropped, 0 if not, -errno. */
int store_drop_ino(struct store *s, uint64_t ino, bool even_pinned);
/* Same as store_drop_ino for every object; returns the number dropped. */
int store_drop_all(struct store *s, bool even_pinned);
int store_info_ino(struct store *s, uint64_t ino, struct sobj_info *info);

/*
 * The rows a pin changes (marks, containers) go in one transaction per batch
 * of files rather than one per row: begin opens one if none is open, commit
 * ends it.  Other changes made meanwhile are in it too; a crash before the
 * commit loses them all, which the crash rules allow (a block whose row is
 * lost is absent, an object not marked is pinned again by the hoard walk).
 */
void store_batch_begin(struct store *s);
void store_batch_commit(struct store *s);
void store_set_container_fn(struct store *s, store_container_fn fn, void *ud);
/* The container at @path now holds the content of backing file @st (st's
 * identity): the store's blocks of it go. */
int store_set_container(struct store *s, const struct stat *st, const char *path);
/* Unpins the object; content in a container becomes the store's own (the
 * file is linked into objects/, its blocks checksummed), so it stays
 * cached, and cullable, when the mirror lets the container go. */
int store_obj_unpin(struct store *s, struct sobj *o);
/* Forgets the containers the container function no longer finds; those
 * store_set_container() was given since store_containers_note_begin() are
 * taken as found (a resync just put or found them in place) and not
 * reopened.  Ends the noting. */
void store_check_containers(struct store *s);
/* From now on store_set_container() notes what it was given, for the next
 * store_check_containers() (or until store_containers_note_end()). */
void store_containers_note_begin(struct store *s);
void store_containers_note_end(struct store *s);

/*
 * Unpinned containers: an unpinned object whose content becomes complete in
 * blocks (a full read, a prefetch) is told to complete(ud, ino), once, from
 * the reading thread with the object locked (it must only queue the work).
 * The view then calls store_make_container(): with the object locked, if it
 * is still complete, unpinned and of identity @st, place(pud, dirfd, name)
 * links the store's content file dirfd/name into the mirror at @path (no
 * copy) and the object's blocks go; -EAGAIN when it no longer qualifies.
 * Such a container is the store's own: culled (remove(ud, id) deletes it
 * while it holds that identity), dropped when the backing's copy changes
 * or is written, like blocks.  A pin of the object just marks it pinned.
 */
typedef void (*store_complete_fn)(void *ud, uint64_t ino);
typedef int (*store_place_fn)(void *pud, int dirfd, const char *name);
void store_set_unpinned_fns(struct store *s, store_complete_fn complete, store_container_fn remove);
int store_make_container(struct store *s, const struct stat *st, const char *path,
                         store_place_fn place, void *pud);
/* A read-only open of o: told to complete() if o is whole in blocks (written
 * through the view since it was read; reads passed through to a local file
 * never reach the store). */
void store_obj_opened_ro(struct store *s, struct sobj *o);
/* complete() could not take inode ino's content now (the server did not
 * answer, the volume went offline): it is told again at a later open. */
void store_complete_untold(struct store *s, uint64_t ino);
/* Drops (and removes) every unpinned container for which on_server(ud, id)
 * says -ESTALE (after a reconnect: the server's copy changed meanwhile or is
 * gone; any other answer keeps it), after remove_stale(ud, id) under the
 * object's lock; on_server is called with no lock held.  Returns how many. */
int store_check_unpinned(struct store *s, store_container_fn on_server,
                         store_container_fn remove_stale);

/*
 * After the index was made anew (damaged or deleted at start) the mirror
 * still holds the unpinned containers: the view finds them again and gives
 * each back to the store.  unindexed: the index does not yet record that
 * this was done (a new index, or a walk cut short).  reindex: the container
 * at id->path holds id's identity; it becomes an unpinned own container
 * (counted, culled), validated now or, when @validated is false (found
 * offline), compared with the backing at its first use online.  Returns 1
 * when indexed, 0 when the store holds that object already (content or a
 * pin), -errno.
 */
bool store_containers_unindexed(struct store *s);
int store_containers_indexed(struct store *s);
/* Whether the rows' inode numbers are those @mount gave (a backing that
 * numbers its files anew at each mount: sshfs). */
bool store_numbered_by(struct store *s, const char *mount);
/* The backing numbers its files as @mount does now: every copy is dropped
 * (unpinned containers removed, pinned ones left to the mirror, which
 * indexes them again by name), as one number may now be another file's,
 * and with no object in use (at start) every row.  Returns how many
 * objects had a copy, or -errno. */
int store_renumbered(struct store *s, const char *mount);
/*
 * The backing numbers its files as @mount does now, found under a running
 * worker (mounted again while offline): until store_numbers_settle(), a row
 * reached by a number for the first time is forgotten (its content, with an
 * unpinned container; its identity and pin mark), as that number may be
 * another file's now, of the same size and times.  A row the resync
 * confirms (the mirror's file at a path, store_set_container(); an unpinned
 * container the server still has at its path) is the new number's.  The
 * numbering recorded stays the old one meanwhile: a successor drops every
 * row.
 */
int store_numbers_unsure(struct store *s, const char *mount);
/* Whether they are (between the two calls). */
bool store_numbers_unsure_now(struct store *s);
/* After a resync: the rows not reached since are dropped, and the numbering
 * recorded.  Returns 1 (*dropped: how many rows went), 0 when the numbers
 * were sure, -errno. */
int store_numbers_settle(struct store *s, unsigned *dropped);
int store_reindex_container(struct store *s, const struct store_identity *id, bool validated);
/* Object @ino was last used at @used_ns (wall-clock ns, CLOCK_REALTIME, as
 * the rows keep their times), unless its row records a use already: the
 * cull's order of a container indexed again. */
int store_set_last_use(struct store *s, uint64_t ino, int64_t used_ns);

/* set cacheable off|on on a directory (or file) inode. */
int store_set_nocache(struct store *s, uint64_t ino, bool nocache);
bool store_is_nocache(struct store *s, uint64_t ino);

/* Pins (hoarding roots), by path relative to the volume root. */
int store_pin_add(struct store *s, const char *path, int prio);
int store_pin_remove(struct store *s, const char *path);
/* Calls fn for every pin; stops early on a negative return. */
int store_pin_foreach(struct store *s, int (*fn)(void *ud, const char *path, int prio),
                      void *ud);
/* How many pins a store that started without any took back from the pins
 * file (its index made anew): the hoard walk should fetch them again. */
uint64_t store_pins_restored(struct store *s);

/* store-pins.c: the pins file beside the index (CacheDir/pins). */
struct pins_entry {
        const char *path;
        int prio;
};
int pins_file_save(const char *dir, const struct pins_entry *pins, size_t n);
/* -ENOENT without a file, -EUCLEAN for one that is not a pins file. */
int pins_file_load(const char *dir, int (*fn)(void *ud, const char *path, int prio), void *ud);

/* Culls unpinned objects, least recently used first, while free < bcull. */
void store_cull(struct store *s);

/* store-crc.c */
uint32_t store_crc32c(uint32_t crc, const void *buf, size_t len);
