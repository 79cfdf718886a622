/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * syscall-filter NR... -- PROGRAM [ARG...]: runs PROGRAM under a seccomp
 * filter that allows exactly the system calls numbered NR (of this
 * machine's native architecture) and makes every other fail with EPERM:
 * what systemd does for fcached.service (SystemCallFilter= with
 * SystemCallErrorNumber=EPERM and SystemCallArchitectures=native), so a
 * test can run the view as the service runs it without systemd.
 *
 * Exit status: PROGRAM's (by exec), 2 for bad arguments, 77 on an
 * architecture this tool does not know.
 */
#include <errno.h>
#include <limits.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#if defined(__x86_64__)
#define NATIVE_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define NATIVE_ARCH AUDIT_ARCH_AARCH64
#endif

#define X32_SYSCALL_BIT 0x40000000u
#define MAX_ALLOWED 1000

static int usage(const char *why)
{
        fprintf(stderr, "syscall-filter: %s\n"
                "usage: syscall-filter NR... -- PROGRAM [ARG...]\n", why);
        return 2;
}

int main(int argc, char **argv)
{
#ifndef NATIVE_ARCH
        (void)argc;
        (void)argv;
        fprintf(stderr, "syscall-filter: this architecture is not known here\n");
        return 77;
#else
        static struct sock_filter prog[8 + 2 * MAX_ALLOWED];
        const struct sock_filter deny = BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM);
        unsigned n = 0, allowed = 0;
        int i;

        prog[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                                 offsetof(struct seccomp_data, arch));
        prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, NATIVE_ARCH, 1, 0);
        prog[n++] = deny;
        prog[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
                                                 offsetof(struct seccomp_data, nr));
        prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, X32_SYSCALL_BIT, 0, 1);
        prog[n++] = deny;
        for (i = 1; i < argc && strcmp(argv[i], "--"); i++) {
                char *end;
                unsigned long nr;

                errno = 0;
                nr = strtoul(argv[i], &end, 10);
                if (errno || end == argv[i] || *end || nr >= X32_SYSCALL_BIT)
                        return usage("a system call number is a decimal number below 2^30");
                if (++allowed > MAX_ALLOWED)
                        return usage("too many system calls");
                /* Two instructions each: a jump's offset is 8 bits, so no
                 * common "allow" at the end of a long list. */
                prog[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, nr, 0, 1);
                prog[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
        }
        if (i >= argc - 1)
                return usage("no '--' followed by a program");
        prog[n++] = deny;

        struct sock_fprog fprog = { .len = (unsigned short)n, .filter = prog };

        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) ||
            prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fprog)) {
                perror("syscall-filter: seccomp");
                return 1;
        }
        execv(argv[i + 1], argv + i + 1);
        perror("syscall-filter: exec");
        return 127;
#endif
}
