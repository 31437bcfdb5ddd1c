/* fuzz_dir.h — the directory harnesses' shared part (fuzz_orbax.c, fuzz_lerobot_dir.c): an input is a directory as
 * records of u16 LE name length, name, u32 LE data length, data; each record is a file (a relative path of
 * [A-Za-z0-9._-] components joined by '/', no "." or ".." component, at most 4 deep; other names are skipped).
 * fuzz_dir_fresh makes a scratch directory once per process; fuzz_dir_write empties dir, writes the records into it
 * and returns how many files it wrote; fuzz_dir_remove deletes it. */
#ifndef PI0_FUZZ_DIR_H
#define PI0_FUZZ_DIR_H
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int fuzz_name_ok(const char *n, size_t len) {
    if (!len || len > 200 || n[len - 1] == '/') return 0;
    int depth = 0;
    for (size_t i = 0; i < len;) {
        size_t j = i;
        for (; j < len && n[j] != '/'; j++)
            if (!isalnum((unsigned char)n[j]) && n[j] != '.' && n[j] != '_' && n[j] != '-') return 0;
        size_t cl = j - i;
        if (!cl || ++depth > 4 || (cl <= 2 && n[i] == '.' && n[j - 1] == '.')) return 0;   /* empty, ".", ".." */
        i = j + 1;
    }
    return 1;
}

static void fuzz_rm_tree(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            char p[1024];
            snprintf(p, sizeof p, "%s/%s", path, e->d_name);
            struct stat sb;
            if (lstat(p, &sb) == 0 && S_ISDIR(sb.st_mode)) fuzz_rm_tree(p);
            else unlink(p);
        }
        closedir(d);
    }
    rmdir(path);
}

static int fuzz_write_file(const char *dir, const char *name, const uint8_t *data, size_t n) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    for (char *s = p + strlen(dir) + 1; (s = strchr(s, '/')); s++) {   /* the parent directories */
        *s = 0;
        if (mkdir(p, 0700) != 0 && errno != EEXIST) return 0;
        *s = '/';
    }
    FILE *f = fopen(p, "wb");   /* a name that is already a directory (or the reverse) fails here: skipped */
    if (!f) return 0;
    int ok = fwrite(data, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

static void fuzz_dir_fresh(char *base, size_t n, const char *what) {
    const char *tmp = getenv("TMPDIR");
    snprintf(base, n, "%s/pi0-fuzz-%s-XXXXXX", tmp && *tmp ? tmp : "/tmp", what);
    if (!mkdtemp(base)) { perror("mkdtemp"); exit(1); }
}

static void fuzz_dir_remove(const char *dir) { fuzz_rm_tree(dir); }

static int fuzz_dir_write(const char *dir, const uint8_t *data, size_t size) {
    fuzz_rm_tree(dir);
    if (mkdir(dir, 0700) != 0) return -1;
    int files = 0;
    for (size_t at = 0; at + 2 <= size && files < 256;) {
        size_t nl = (size_t)data[at] | (size_t)data[at + 1] << 8;
        at += 2;
        if (nl > size - at || size - at - nl < 4) break;
        const char *name = (const char *)data + at;
        at += nl;
        size_t dl = (size_t)data[at] | (size_t)data[at + 1] << 8 | (size_t)data[at + 2] << 16 | (size_t)data[at + 3] << 24;
        at += 4;
        if (dl > size - at) break;
        char nm[256];
        if (fuzz_name_ok(name, nl)) {
            memcpy(nm, name, nl);
            nm[nl] = 0;
            files += fuzz_write_file(dir, nm, data + at, dl);
        }
        at += dl;
    }
    return files;
}
#endif
