/*
 * fuzz_job_spec.c - libFuzzer harness: job manifests (TrainJob, TFJob, PyTorchJob) through
 * dt_job_spec_parse, the entry point of `dtrain run/submit` and of the job server.
 */
#include "dtrain/job.h"
#include "fuzz-impl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dt_job_spec *job = NULL;
    if (dt_job_spec_parse(&job, (const char *)data, size, "fuzz.yaml") == DT_OK)
        dt_job_spec_free(job);
    dt_err_clear();
    return 0;
}
