/*
 * spec-impl.h - the training spec's parser, for callers that read the same document for more
 * than the training part (src/job: a TrainJob is a training spec plus replicas and a
 * strategy under `spec:`).
 *
 * dt__spec_parse_doc reads one document's root into a dt_spec made by dt__spec_new. The
 * extra keys are allowed (and not read) besides the training spec's own: a caller that
 * understands them reads them from the same root itself. dt_spec_load / dt_spec_parse pass
 * dt__spec_job_extra, so `dtrain train` runs a TrainJob job file and ignores its job keys.
 */
#ifndef DTRAIN_SPEC_IMPL_H
#define DTRAIN_SPEC_IMPL_H

#include "dtrain/spec.h"
#include "spec/yaml_doc-impl.h"

typedef struct dt__spec_extra {
    const char *const *spec_keys;     /* NULL-terminated; more keys allowed under spec: */
    const char *const *metadata_keys; /* NULL-terminated; more keys allowed under metadata: */
} dt__spec_extra;

/* What a TrainJob job adds: spec.{replicas, strategy, runPolicy, successPolicy,
 * elasticPolicy, pytorchEnv} and metadata.namespace. */
extern const dt__spec_extra dt__spec_job_extra;

/* A zeroed spec with the documented defaults and sp->path = path (which must be shorter than
 * DT_PATH_MAX). Caller frees with dt_spec_free. */
dt_err dt__spec_new(dt_spec **out, const char *path);

/* Validate root (apiVersion dtrain/v1, kind TrainJob, metadata, spec) into sp. Relative data
 * paths are joined to base_dir when it is not NULL. extra may be NULL. On error sp holds
 * whatever was read so far; the caller frees it. */
dt_err dt__spec_parse_doc(dt_spec *sp, const dt__yval *root, const char *base_dir,
                          const dt__spec_extra *extra);

/* The directory part of path into dir (DT_PATH_MAX bytes): "a/b.yaml" -> "a", "/b.yaml" ->
 * "/"; returns dir, or NULL when path has no '/'. */
const char *dt__spec_base_dir(const char *path, char *dir);
/* A spec file's path must fit DT_PATH_MAX: DT_ERR_ARG "PATH...: path too long" otherwise. */
dt_err dt__spec_check_path(const char *path);

#endif
