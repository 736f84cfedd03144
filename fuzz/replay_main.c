/*
 * replay_main.c - the corpus replay: runs every file under the directories (or files) given
 * through the harness it is linked with, once each. Built with the normal compiler in every
 * build, so each corpus file (seeds, and every input that once crashed a parser) stays a
 * regression test in ctest; under DT_SANITIZE=ON the replay runs with ASan and UBSan.
 *
 *   fuzz_replay_<harness> DIR|FILE...      exit 0 when every input ran, 1 on a read error
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz-impl.h"

static int run_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        return -1;
    }
    size_t cap = 4096, len = 0;
    uint8_t *buf = malloc(cap);
    size_t n;
    while (buf && (n = fread(buf + len, 1, cap - len, f)) > 0) {
        len += n;
        if (len == cap) {
            uint8_t *nb = realloc(buf, cap *= 2);
            if (!nb) free(buf);
            buf = nb;
        }
    }
    fclose(f);
    if (!buf) {
        fprintf(stderr, "%s: out of memory\n", path);
        return -1;
    }
    /* an exact-size copy, so ASan sees a read past the input's end */
    uint8_t *in = malloc(len ? len : 1);
    if (!in) {
        free(buf);
        return -1;
    }
    memcpy(in, buf, len);
    free(buf);
    LLVMFuzzerTestOneInput(in, len);
    free(in);
    return 0;
}

static int cmp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
    int failed = 0, ran = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            perror(argv[i]);
            failed = 1;
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            failed |= run_file(argv[i]) != 0;
            ran++;
            continue;
        }
        DIR *d = opendir(argv[i]);
        if (!d) {
            perror(argv[i]);
            failed = 1;
            continue;
        }
        char **names = NULL;
        size_t nn = 0;
        struct dirent *e;
        while ((e = readdir(d))) {
            if (e->d_name[0] == '.') continue;
            char **nb = realloc(names, (nn + 1) * sizeof *names);
            if (!nb || !(nb[nn] = malloc(strlen(argv[i]) + strlen(e->d_name) + 2))) {
                fprintf(stderr, "out of memory\n");
                return 1;
            }
            names = nb;
            sprintf(names[nn++], "%s/%s", argv[i], e->d_name);
        }
        closedir(d);
        qsort(names, nn, sizeof *names, cmp);
        for (size_t k = 0; k < nn; k++) {
            failed |= run_file(names[k]) != 0;
            ran++;
            free(names[k]);
        }
        free(names);
    }
    printf("%d inputs replayed\n", ran);
    if (!ran) {
        fprintf(stderr, "no inputs: an empty corpus tests nothing\n");
        return 1;
    }
    return failed;
}
