/* cli-impl.h - the subcommands of the dtrain binary, one file each, dispatched by table. */
#ifndef DTRAIN_CLI_IMPL_H
#define DTRAIN_CLI_IMPL_H

/* Exit codes shared by every subcommand. */
enum {
    DT_EXIT_OK = 0,
    DT_EXIT_FAILED = 1, /* the job or operation failed */
    DT_EXIT_USAGE = 2,  /* bad command line or malformed spec */
};

typedef struct dt__cli_cmd {
    const char *name;
    const char *summary;               /* one line for `dtrain help` */
    const char *usage;                 /* the full text of `dtrain CMD --help` */
    int (*run)(int argc, char **argv); /* argv[0] is the command name */
} dt__cli_cmd;

extern const dt__cli_cmd dt__cmd_plan;
extern const dt__cli_cmd dt__cmd_train;
extern const dt__cli_cmd dt__cmd_version;

/* Is `arg` -h or --help? */
int dt__cli_is_help(const char *arg);
/* Print "dtrain CMD: message" plus a hint to see --help, return DT_EXIT_USAGE. */
int dt__cli_usage_error(const dt__cli_cmd *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
