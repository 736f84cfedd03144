/*
 * progress.c - training progress for people: a bar redrawn in place on a TTY, plain
 * lines (at most one every two seconds, plus one per epoch) otherwise, so logs stay short.
 */
#include <time.h>

#include "train/train-impl.h"

#define PLAIN_INTERVAL 2.0
#define BAR_INTERVAL 0.1
#define BAR_WIDTH 24

double dt__now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fmt_eta(char *buf, size_t len, double s) {
    if (s < 0 || s > 359999) s = 0;
    int t = (int)(s + 0.5);
    snprintf(buf, len, "%d:%02d:%02d", t / 3600, t / 60 % 60, t % 60);
}

void dt__progress_epoch_start(dt__progress *p) {
    p->epoch_start = p->last_print = dt__now();
    p->epoch_samples = 0;
}

void dt__progress_step(dt__progress *p, int64_t epoch, int64_t batch, int64_t samples,
                       double loss) {
    p->epoch_samples += samples;
    double now = dt__now();
    int last = batch + 1 == p->steps_per_epoch;
    if (!last && now - p->last_print < (p->bar ? BAR_INTERVAL : PLAIN_INTERVAL)) return;
    p->last_print = now;
    double el = now - p->epoch_start;
    double rate = el > 0 ? (double)p->epoch_samples / el : 0;
    int64_t done = batch + 1;
    double per_step = done > 0 ? el / (double)done : 0; /* batches of this session */
    char eta[32];
    fmt_eta(eta, sizeof eta, per_step * (double)(p->steps_per_epoch - done));
    if (p->bar) {
        int fill = (int)(BAR_WIDTH * done / (p->steps_per_epoch ? p->steps_per_epoch : 1));
        char bar[BAR_WIDTH + 1];
        for (int i = 0; i < BAR_WIDTH; i++)
            bar[i] = i < fill ? '=' : (i == fill ? '>' : ' ');
        bar[BAR_WIDTH] = '\0';
        fprintf(p->out, "\r\033[Kepoch %lld/%lld [%s] %lld/%lld loss %.4f %.0f samples/s ETA %s",
                (long long)epoch + 1, (long long)p->epochs, bar, (long long)done,
                (long long)p->steps_per_epoch, loss, rate, eta);
    } else {
        fprintf(p->out, "epoch %lld/%lld step %lld/%lld loss %.4f samples/s %.0f eta %s\n",
                (long long)epoch + 1, (long long)p->epochs, (long long)done,
                (long long)p->steps_per_epoch, loss, rate, eta);
    }
    fflush(p->out);
}

void dt__progress_epoch_end(dt__progress *p, int64_t epoch, double train_loss, double eval_loss,
                            double eval_acc, double seconds) {
    if (p->bar) fprintf(p->out, "\r\033[K");
    fprintf(p->out,
            "epoch %lld/%lld done: train loss %.4f, eval loss %.4f, eval accuracy %.4f (%.1fs)\n",
            (long long)epoch + 1, (long long)p->epochs, train_loss, eval_loss, eval_acc, seconds);
    fflush(p->out);
}
