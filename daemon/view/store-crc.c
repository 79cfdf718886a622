/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * store-crc.c: CRC-32C (Castagnoli) of store blocks, with the SSE4.2
 * instruction where the CPU has it and a table otherwise.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "store.h"

static uint32_t table[256];
static int have_table;

static void make_table(void)
{
        for (uint32_t i = 0; i < 256; i++) {
                uint32_t c = i;

                for (int k = 0; k < 8; k++)
                        c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
                table[i] = c;
        }
        __atomic_store_n(&have_table, 1, __ATOMIC_RELEASE);
}

static uint32_t crc_sw(uint32_t crc, const unsigned char *p, size_t len)
{
        if (!__atomic_load_n(&have_table, __ATOMIC_ACQUIRE))
                make_table();
        while (len--)
                crc = table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
        return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t crc_hw(uint32_t crc, const unsigned char *p, size_t len)
{
        uint64_t c = crc;

        while (len >= 8) {
                uint64_t w;

                memcpy(&w, p, 8);
                c = __builtin_ia32_crc32di(c, w);
                p += 8;
                len -= 8;
        }
        crc = (uint32_t)c;
        while (len--)
                crc = __builtin_ia32_crc32qi(crc, *p++);
        return crc;
}
#endif

uint32_t store_crc32c(uint32_t crc, const void *buf, size_t len)
{
        crc = ~crc;
#if defined(__x86_64__)
        if (__builtin_cpu_supports("sse4.2"))
                return ~crc_hw(crc, buf, len);
#endif
        return ~crc_sw(crc, buf, len);
}
