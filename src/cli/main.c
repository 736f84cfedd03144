/*
 * main.c - the dtrain binary: dispatch argv[1] through the command table.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli-impl.h"

static const dt__cli_cmd *const commands[] = {
    &dt__cmd_plan,
    &dt__cmd_train,
    &dt__cmd_role,
    &dt__cmd_run,
    &dt__cmd_status,
    &dt__cmd_logs,
    &dt__cmd_stop,
    &dt__cmd_scale,
    &dt__cmd_list,
    &dt__cmd_operator,
    &dt__cmd_predict,
    &dt__cmd_export,
    &dt__cmd_serve,
    &dt__cmd_server,
    &dt__cmd_submit,
    &dt__cmd_suspend,
    &dt__cmd_resume,
    &dt__cmd_tune,
    &dt__cmd_version,
};
#define NCOMMANDS (sizeof commands / sizeof commands[0])

int dt__cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

int dt__cli_is_help(const char *arg) {
    return !strcmp(arg, "-h") || !strcmp(arg, "--help");
}

int dt__cli_usage_error(const dt__cli_cmd *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "dtrain %s: ", cmd->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nSee 'dtrain %s --help'.\n", cmd->name);
    return DT_EXIT_USAGE;
}

static void print_help(FILE *out) {
    fprintf(out, "dtrain - distributed training in one C program\n\n"
                 "Usage: dtrain COMMAND [ARGS...]\n\nCommands:\n");
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(out, "  %-10s %s\n", commands[i]->name, commands[i]->summary);
    fprintf(out, "  %-10s %s\n", "help", "Show this help, or a command's: dtrain help COMMAND");
    fprintf(out, "\nRun 'dtrain COMMAND --help' for a command's options.\n");
}

static const dt__cli_cmd *find(const char *name) {
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (!strcmp(commands[i]->name, name)) return commands[i];
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        print_help(stderr);
        return DT_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (!strcmp(name, "help") || dt__cli_is_help(name)) {
        if (argc > 2 && !dt__cli_is_help(name)) {
            const dt__cli_cmd *c = find(argv[2]);
            if (!c) {
                fprintf(stderr, "dtrain: unknown command '%s'\n", argv[2]);
                return DT_EXIT_USAGE;
            }
            fputs(c->usage, stdout);
            return DT_EXIT_OK;
        }
        print_help(stdout);
        return DT_EXIT_OK;
    }
    if (!strcmp(name, "--version")) name = "version";
    const dt__cli_cmd *c = find(name);
    if (!c) {
        fprintf(stderr, "dtrain: unknown command '%s'\n\n", name);
        print_help(stderr);
        return DT_EXIT_USAGE;
    }
    for (int i = 2; i < argc; i++) {
        if (!strcmp(argv[i], "--")) break;
        if (dt__cli_is_help(argv[i])) {
            fputs(c->usage, stdout);
            return DT_EXIT_OK;
        }
    }
    return c->run(argc - 1, argv + 1);
}
