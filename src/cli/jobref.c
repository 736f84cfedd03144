/*
 * jobref.c - find a job named on the command line and reach its master.
 *
 * A job is named by its job dir or by its name in the registry ($DTRAIN_HOME/jobs). Its
 * master, when one runs, holds an exclusive flock on DIR/master.lock and has written its
 * URL and token to DIR/master.json (mode 0600); a job without a live master is read from
 * DIR/status.json, which the master kept current.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "cli/cli-impl.h"
#include "master/registry-impl.h"
#include "net/http-impl.h"

static int master_live(const char *dir) {
    char path[4200];
    snprintf(path, sizeof path, "%s/master.lock", dir);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    int live = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
    close(fd);
    return live;
}

int dt__jobref_resolve(const dt__cli_cmd *cmd, const char *arg, dt__jobref *out) {
    memset(out, 0, sizeof *out);
    struct stat sb;
    char journal[4200];
    if (stat(arg, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        if (!realpath(arg, out->dir)) snprintf(out->dir, sizeof out->dir, "%s", arg);
    } else if (dt__registry_lookup(arg, out->dir, sizeof out->dir) != DT_OK) {
        fprintf(stderr, "dtrain %s: %s: no such job or job directory (see 'dtrain list')\n",
                cmd->name, arg);
        return 1;
    }
    snprintf(journal, sizeof journal, "%s/journal.jsonl", out->dir);
    if (stat(journal, &sb) != 0) {
        fprintf(stderr, "dtrain %s: %s is not a job directory (it has no journal.jsonl)\n",
                cmd->name, out->dir);
        return 1;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/master.json", out->dir);
    json_t *mj = json_load_file(path, 0, NULL);
    const char *s;
    if ((s = json_string_value(json_object_get(mj, "url"))))
        snprintf(out->url, sizeof out->url, "%s", s);
    if ((s = json_string_value(json_object_get(mj, "token"))))
        snprintf(out->token, sizeof out->token, "%s", s);
    if ((s = json_string_value(json_object_get(mj, "name"))))
        snprintf(out->name, sizeof out->name, "%s", s);
    json_decref(mj);
    out->live = out->url[0] && master_live(out->dir);
    return 0;
}

json_t *dt__jobref_status(const dt__cli_cmd *cmd, const dt__jobref *ref) {
    if (ref->live) {
        dt__http_client *c = NULL;
        char route[160];
        snprintf(route, sizeof route, "/v1/jobs/%s", ref->name);
        long status = 0;
        char *body = NULL;
        size_t len = 0;
        if (dt__http_client_init(&c, ref->url, ref->token, 5000) == DT_OK &&
            dt__http_client_request(c, "GET", route, NULL, 0, &status, &body, &len) == DT_OK &&
            status == 200) {
            json_t *j = json_loadb(body, len, 0, NULL);
            free(body);
            dt__http_client_free(c);
            if (j) return j;
        } else {
            free(body);
            dt__http_client_free(c);
        }
        /* The master went away meanwhile: fall back to the file it kept. */
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/status.json", ref->dir);
    json_error_t err;
    json_t *j = json_load_file(path, 0, &err);
    if (!j) fprintf(stderr, "dtrain %s: %s: %s\n", cmd->name, path, err.text);
    return j;
}

double dt__cli_age(const char *t) {
    struct tm tm = {0};
    if (!t || !strptime(t, "%Y-%m-%dT%H:%M:%S", &tm)) return 0;
    time_t then = timegm(&tm);
    return difftime(time(NULL), then);
}
