/*
 * registry-impl.h - where `dtrain list`, `status JOB`, `logs JOB` and `stop JOB` find jobs.
 *
 * The registry is a directory of symbolic links, $DTRAIN_HOME/jobs/<job name> -> the job
 * dir (DTRAIN_HOME defaults to ~/.dtrain). A master adds its job when it starts; a newer
 * job of the same name replaces the link once the older one's master has ended (while it
 * runs, the newer one is refused). Stale links (the job dir is gone, or the job
 * finished longer ago than its ttlSecondsAfterFinished) are pruned by dt__registry_list.
 */
#ifndef DTRAIN_REGISTRY_IMPL_H
#define DTRAIN_REGISTRY_IMPL_H

#include <stddef.h>

#include "dtrain/err.h"

/* Is a master running the job in job_dir (it holds job_dir/master.lock)? Its pid (the lock
 * file's text) into pid when pid is not NULL. */
int dt__master_live(const char *job_dir, char *pid, size_t cap);
/* Record name -> job_dir (absolute). DT_ERR_STATE "a job named NAME is running in DIR
 * (master pid P): ..." when name is registered to another dir whose master runs (holds its
 * master.lock): that job stays registered. Other failures are not fatal to a job: they
 * return an error the caller may print as a warning. */
dt_err dt__registry_add(const char *name, const char *job_dir);
/* The job dir of name into dir (cap bytes); DT_ERR_NOTFOUND when not registered. */
dt_err dt__registry_lookup(const char *name, char *dir, size_t cap);
/* Call fn(ctx, name, job_dir) for every registered job, sorted by name. */
dt_err dt__registry_list(void (*fn)(void *ctx, const char *name, const char *job_dir), void *ctx);
/* Remove name from the registry (no error when absent). */
void dt__registry_remove(const char *name);

#endif
