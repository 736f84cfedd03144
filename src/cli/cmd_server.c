/*
 * cmd_server.c - `dtrain server`: run the job server (src/server/, docs/SERVER.md) in the
 * foreground until SIGTERM or Ctrl-C; the jobs it started keep running.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli-impl.h"
#include "server/server-impl.h"

static const char usage[] =
    "Usage: dtrain server [--bind ADDR] [--port P] [--dir DIR] [--cpus N] [--memory SIZE]\n"
    "                     [--token T] [--no-auth]\n"
    "\n"
    "Run a job server on this machine: it takes jobs (dtrain submit --server URL, POST\n"
    "/v1/jobs, the seed's GET /create), queues them by priority and submit order, starts\n"
    "each whole when its demand fits the free capacity, suspends and resumes them, and\n"
    "survives its own restart (docs/SERVER.md). It writes DIR/server.json ({url, token,\n"
    "pid}, mode 0600) once listening; clients find its token there.\n"
    "\n"
    "Options:\n"
    "  --bind ADDR     address to listen on (default 127.0.0.1)\n"
    "  --port P        port (default: any free port; see server.json)\n"
    "  --dir DIR       the server's directory (default $DTRAIN_HOME/server, DTRAIN_HOME\n"
    "                  default ~/.dtrain): journal, specs, job dirs\n"
    "  --cpus N        CPUs the jobs may use at once (default: the online CPUs)\n"
    "  --memory SIZE   memory the jobs may use at once: bytes or 512Mi, 4Gi, 2G\n"
    "                  (default: MemTotal)\n"
    "  --token T       the token clients send (default: the one DIR/server.json had, else\n"
    "                  a new random one)\n"
    "  --no-auth       no token needed (for clients that send none, as the seed's)\n"
    "  -h, --help      show this help\n"
    "\n"
    "SIGTERM or Ctrl-C stops the server; the jobs it started keep running and a server\n"
    "started again on DIR watches them again. Exit status: 0 after a signal, 1 on error.\n";

static int run(int argc, char **argv) {
    const dt__cli_cmd *cmd = &dt__cmd_server;
    enum { OPT_BIND = 256, OPT_PORT, OPT_DIR, OPT_CPUS, OPT_MEMORY, OPT_TOKEN, OPT_NO_AUTH };
    static const struct option longopts[] = {
        {"bind", required_argument, NULL, OPT_BIND},   {"port", required_argument, NULL, OPT_PORT},
        {"dir", required_argument, NULL, OPT_DIR},     {"cpus", required_argument, NULL, OPT_CPUS},
        {"memory", required_argument, NULL, OPT_MEMORY}, {"token", required_argument, NULL, OPT_TOKEN},
        {"no-auth", no_argument, NULL, OPT_NO_AUTH},   {NULL, 0, NULL, 0},
    };
    dt__server_opts o = {0};
    int64_t v;
    opterr = 0;
    optind = 1;
    int c;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case OPT_BIND:
            o.bind_addr = optarg;
            break;
        case OPT_PORT:
            if (dt__cli_parse_i64(optarg, 1, 65535, &v))
                return dt__cli_usage_error(cmd, "--port: expected 1..65535, got '%s'", optarg);
            o.port = (int)v;
            break;
        case OPT_DIR:
            o.dir = optarg;
            break;
        case OPT_CPUS: {
            char *end;
            o.cpus = strtod(optarg, &end);
            if (end == optarg || *end || !(o.cpus > 0) || o.cpus > 1e6)
                return dt__cli_usage_error(cmd, "--cpus: expected a positive number, got '%s'", optarg);
            break;
        }
        case OPT_MEMORY: {
            double q = dt__quantity(optarg);
            if (q < 1 || q > 9e18)
                return dt__cli_usage_error(cmd, "--memory: expected a size such as 4Gi, got '%s'", optarg);
            o.mem = (int64_t)q;
            break;
        }
        case OPT_TOKEN:
            o.token = optarg;
            break;
        case OPT_NO_AUTH:
            o.no_auth = 1;
            break;
        case ':':
            return dt__cli_usage_error(cmd, "%s needs a value", argv[optind - 1]);
        default:
            return dt__cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind != argc) return dt__cli_usage_error(cmd, "unexpected argument '%s'", argv[optind]);
    if (dt__server_run(&o)) {
        fprintf(stderr, "dtrain server: %s\n", dt_errmsg());
        return DT_EXIT_FAILED;
    }
    return DT_EXIT_OK;
}

const dt__cli_cmd dt__cmd_server = {
    .name = "server",
    .summary = "Run a job server: a queue of jobs on this machine",
    .usage = usage,
    .run = run,
};
