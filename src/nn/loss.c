/*
 * loss.c - softmax cross-entropy and mean squared error, with their gradients.
 *
 * Design: softmax cross-entropy works row by row on the logits, subtracting the row maximum
 * before exponentiating (log-sum-exp), so no logit is too large; the loss is summed in
 * double. Its gradient of the mean is (softmax - onehot) / n, written in the same pass that
 * computes the exponentials. Labels are all checked before anything is written, so a bad
 * label leaves dlogits untouched. Both functions run on the calling thread: n * k is small
 * next to the layers' work (64 x 10 for MNIST).
 */
#include <math.h>

#include "dtrain/nn.h"

dt_err dt_loss_softmax_cross_entropy(const float *logits, const int32_t *labels, int64_t n,
                                     int64_t k, double *loss, float *dlogits, int64_t *correct) {
    if (n <= 0 || k <= 0)
        return dt_err_set(DT_ERR_ARG, "softmax cross-entropy: %lld samples of %lld classes",
                          (long long)n, (long long)k);
    for (int64_t i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= k)
            return dt_err_set(DT_ERR_ARG, "label %ld of sample %lld is outside [0, %lld)",
                              (long)labels[i], (long long)i, (long long)k);
    double total = 0.0;
    int64_t hits = 0;
    float inv_n = 1.0f / (float)n;
    for (int64_t i = 0; i < n; i++) {
        const float *z = logits + i * k;
        int64_t arg = 0;
        for (int64_t j = 1; j < k; j++)
            if (z[j] > z[arg]) arg = j;
        float mx = z[arg];
        double sum = 0.0;
        if (dlogits) {
            float *d = dlogits + i * k;
            for (int64_t j = 0; j < k; j++) {
                d[j] = expf(z[j] - mx);
                sum += d[j];
            }
            float scale = (float)(1.0 / sum) * inv_n;
            for (int64_t j = 0; j < k; j++)
                d[j] *= scale;
            d[labels[i]] -= inv_n;
        } else {
            for (int64_t j = 0; j < k; j++)
                sum += expf(z[j] - mx);
        }
        total += (double)mx + log(sum) - (double)z[labels[i]];
        hits += arg == labels[i];
    }
    if (loss) *loss = total / (double)n;
    if (correct) *correct = hits;
    return DT_OK;
}

void dt_loss_mse(const float *y, const float *t, int64_t n, int64_t k, double *loss, float *dy) {
    int64_t m = n * k;
    double total = 0.0;
    float g = m > 0 ? 2.0f / (float)m : 0.0f;
    for (int64_t i = 0; i < m; i++) {
        float d = y[i] - t[i];
        total += (double)d * (double)d;
        if (dy) dy[i] = g * d;
    }
    if (loss) *loss = m > 0 ? total / (double)m : 0.0;
}
