/* export_src.c - what a trained model's export is made of (include/dtrain/export.h). */
#include "dtrain/export.h"
#include "train/train-impl.h"

void dt__export_src_init(dt_export_src *src, const dt_spec *s, dt_model *model,
                         const dt_dataset *train, const char *spec_text, size_t spec_len,
                         int64_t step, int64_t epoch) {
    *src = (dt_export_src){.model = model,
                           .spec_text = spec_text,
                           .spec_len = spec_len,
                           .step = step,
                           .epoch = epoch,
                           .seed = s->seed};
    if (train->norm_scale)
        src->norm = (dt_input_norm){.n = dt_dataset_row(train),
                                    .scale = train->norm_scale,
                                    .shift = train->norm_shift};
    if (s->num_class_names) {
        src->class_names = s->class_names;
        src->num_classes = s->num_class_names;
    } else if (train->class_names) {
        src->class_names = train->class_names;
        src->num_classes = train->num_classes;
    }
}
