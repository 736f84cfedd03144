/* ps_test.c - the parameter-server data plane over real sockets on 127.0.0.1: servers and
 * clients in this process, on threads, every server on a free port. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "dtrain/checkpoint.h"
#include "dtrain/ps.h"
#include "core/shm-impl.h"
#include "ps/ps-impl.h"
#include "ps/wire-impl.h"
#include "testing/dt_test.h"

/* ---- fixtures ---- */

typedef struct model {
    dt_param *p[8];
    int n;
} model;

static dt_param *param_new(const char *name, int ndim, const int64_t *dims, int decay) {
    dt_param *p = calloc(1, sizeof *p);
    if (!p) abort();
    snprintf(p->name, sizeof p->name, "%s", name);
    p->value.shape = dt_shape_make(ndim, dims);
    p->grad.shape = p->value.shape;
    size_t n = (size_t)dt_shape_numel(&p->value.shape);
    if (posix_memalign((void **)&p->value.data, 64, n * 4 + 64) ||
        posix_memalign((void **)&p->grad.data, 64, n * 4 + 64))
        abort();
    memset(p->value.data, 0, n * 4);
    memset(p->grad.data, 0, n * 4);
    p->decay = decay;
    return p;
}

/* The test model: fc1/kernel [2,3], fc1/bias [3], fc2/kernel [3,4], fc2/bias [4]. */
static void model_make(model *m) {
    m->n = 4;
    m->p[0] = param_new("fc1/kernel", 2, (int64_t[]){2, 3}, 1);
    m->p[1] = param_new("fc1/bias", 1, (int64_t[]){3}, 0);
    m->p[2] = param_new("fc2/kernel", 2, (int64_t[]){3, 4}, 1);
    m->p[3] = param_new("fc2/bias", 1, (int64_t[]){4}, 0);
}

static void model_free(model *m) {
    for (int i = 0; i < m->n; i++) {
        free(m->p[i]->value.data);
        free(m->p[i]->grad.data);
        free(m->p[i]);
    }
    m->n = 0;
}

static int64_t numel(const dt_param *p) {
    return dt_shape_numel(&p->value.shape);
}

/* Deterministic values: f(seed, param, element). */
static float val(int seed, int i, int64_t j) {
    return (float)((seed * 131 + i * 17 + (int)j * 7) % 29 - 14) / 8.0f;
}

static void fill_values(model *m, int seed) {
    for (int i = 0; i < m->n; i++)
        for (int64_t j = 0; j < numel(m->p[i]); j++)
            m->p[i]->value.data[j] = val(seed, i, j);
}

static void fill_grads(model *m, int seed) {
    for (int i = 0; i < m->n; i++)
        for (int64_t j = 0; j < numel(m->p[i]); j++)
            m->p[i]->grad.data[j] = val(seed, i, j) / 3.0f;
}

static int same_values(const model *a, const model *b) {
    for (int i = 0; i < a->n; i++)
        if (memcmp(a->p[i]->value.data, b->p[i]->value.data, (size_t)numel(a->p[i]) * 4)) return 0;
    return 1;
}

static dt_optim_conf optim_of(dt_optim_kind kind, float wd) {
    dt_optim_conf c = {
        .kind = kind, .learning_rate = kind == DT_OPTIM_ADAM ? 0.01f : 0.1f, .weight_decay = wd};
    dt_optim_conf_defaults(&c);
    return c;
}

static FILE *open_log(const char *name, char *path, size_t len) {
    snprintf(path, len, "%s/%s", dt_test_tmpdir(), name);
    FILE *f = fopen(path, "w+");
    if (!f) abort();
    return f;
}

/* Whether the file at path contains text, waiting up to 10 s for it to appear. */
static int log_has(const char *path, const char *text) {
    for (int tries = 0; tries < 1000; tries++) {
        char *data = NULL;
        FILE *f = fopen(path, "r");
        if (f) {
            data = calloc(1, 1 << 20);
            size_t n = data ? fread(data, 1, (1 << 20) - 1, f) : 0;
            (void)n;
            fclose(f);
        }
        int found = data && strstr(data, text);
        free(data);
        if (found) return 1;
        struct timespec ts = {0, 10000000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

static dt_ps_server_conf server_conf(int index, int nps, dt_optim_conf optim, FILE *log) {
    return (dt_ps_server_conf){.host = "127.0.0.1",
                               .token = "secret",
                               .index = index,
                               .nps = nps,
                               .optim = optim,
                               .log = log};
}

typedef struct addrs {
    char buf[8][64];
    const char *a[8];
} addrs;

static void addrs_of(addrs *ad, dt_ps_server **s, int nps) {
    for (int i = 0; i < nps; i++) {
        snprintf(ad->buf[i], sizeof ad->buf[i], "127.0.0.1:%d", dt_ps_server_port(s[i]));
        ad->a[i] = ad->buf[i];
    }
}

static dt_ps_client_conf client_conf(const addrs *ad, int nps, const char *replica, FILE *log) {
    return (dt_ps_client_conf){.addrs = ad->a,
                               .nps = nps,
                               .token = "secret",
                               .replica = replica,
                               .retry_ms = 10000,
                               .log = log};
}

/* *s: one PS (partition 0 of 1, optimizer oc) over m, given m's values by a client "chief"
 * that is closed again; *ad gets its address. */
static void one_ps_initialized(model *m, dt_optim_conf oc, FILE *log, dt_ps_server **s,
                               addrs *ad) {
    dt_ps_server_conf sc = server_conf(0, 1, oc, log);
    DT_CHECK_OK(dt_ps_server_start(s, &sc, m->p, m->n));
    addrs_of(ad, s, 1);
    dt_ps_client_conf cc = client_conf(ad, 1, "chief", log);
    dt_ps_client *init = NULL;
    int taken = 0;
    DT_CHECK_OK(dt_ps_client_open(&init, &cc, m->p, m->n));
    DT_CHECK_OK(dt_ps_client_init(init, &taken));
    DT_CHECK(taken == 1);
    dt_ps_client_close(init);
}

/* ---- partition ---- */

static void test_partition_rule(void) {
    int64_t n[] = {10, 50, 50, 5, 100, 1};
    int owner[6], again[6];
    dt_ps_partition(n, 6, 2, owner);
    /* 100 -> 0; 50 -> 1; 50 -> 1 (100 vs 50); 10 -> 0 (tie: lowest); 5 -> 1; 1 -> 1 */
    int want[6] = {0, 1, 1, 1, 0, 1};
    for (int i = 0; i < 6; i++)
        DT_CHECK(owner[i] == want[i]);
    dt_ps_partition(n, 6, 2, again);
    DT_CHECK(!memcmp(owner, again, sizeof owner));
    /* more PS than variables: the last ones hold nothing */
    int64_t two[] = {3, 3};
    int o2[2];
    dt_ps_partition(two, 2, 4, o2);
    DT_CHECK(o2[0] == 0 && o2[1] == 1);
    dt_ps_partition(n, 0, 3, NULL);
}

static void test_partition_balance(void) {
    enum { N = 200, NPS = 5 };
    int64_t n[N];
    int owner[N], again[N];
    uint64_t x = 12345;
    int64_t biggest = 0;
    for (int i = 0; i < N; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        n[i] = (int64_t)(x >> 40) % 100000 + 1;
        if (n[i] > biggest) biggest = n[i];
    }
    dt_ps_partition(n, N, NPS, owner);
    dt_ps_partition(n, N, NPS, again);
    DT_CHECK(!memcmp(owner, again, sizeof owner));
    int64_t load[NPS] = {0};
    for (int i = 0; i < N; i++) {
        DT_CHECK(owner[i] >= 0 && owner[i] < NPS);
        load[owner[i]] += n[i];
    }
    int64_t lo = load[0], hi = load[0];
    for (int j = 1; j < NPS; j++) {
        if (load[j] < lo) lo = load[j];
        if (load[j] > hi) hi = load[j];
    }
    DT_CHECK(hi - lo <= biggest); /* greedy largest-first never leaves a wider gap */
}

/* ---- basic operations ---- */

static void test_init_then_pull(void) {
    char lp[512];
    FILE *log = open_log("init_pull.log", lp, sizeof lp);
    model a = {0}, b = {0};
    model_make(&a);
    model_make(&b);
    fill_values(&a, 1);
    dt_ps_server *s = NULL;
    dt_ps_client *ca = NULL, *cb = NULL;
    dt_ps_server_conf sc = server_conf(0, 1, optim_of(DT_OPTIM_SGD, 0), log);
    DT_CHECK_OK(dt_ps_server_start(&s, &sc, a.p, a.n));
    DT_CHECK(dt_ps_server_step(s) == -1);
    addrs ad;
    addrs_of(&ad, &s, 1);
    dt_ps_client_conf cc = client_conf(&ad, 1, "worker-0", log);
    DT_CHECK_OK(dt_ps_client_open(&ca, &cc, a.p, a.n));
    cc.replica = "worker-1";
    DT_CHECK_OK(dt_ps_client_open(&cb, &cc, b.p, b.n));
    int taken = -1;
    DT_CHECK_OK(dt_ps_client_init(ca, &taken));
    DT_CHECK(taken == 1);
    DT_CHECK(dt_ps_server_step(s) == 0);
    int64_t step = -5;
    DT_CHECK_OK(dt_ps_client_pull(cb, &step));
    DT_CHECK(step == 0);
    DT_CHECK(same_values(&a, &b));
    /* a second init does not overwrite */
    fill_values(&b, 2);
    DT_CHECK_OK(dt_ps_client_init(cb, &taken));
    DT_CHECK(taken == 0);
    DT_CHECK_OK(dt_ps_client_pull(cb, &step));
    DT_CHECK(same_values(&a, &b));
    dt_ps_client_close(ca);
    dt_ps_client_close(cb);
    dt_ps_server_stop(s);
    model_free(&a);
    model_free(&b);
    fclose(log);
}

/* Tensors' path in check_async_exact: the shared-memory lane, TCP because the client does
 * not offer it, or TCP because the PS declines it. */
/* LANE_ZERO_COPY: the shared-memory lane with the client's zero_copy (the params' data in
 * the segment while connected) */
enum lane { LANE_SHM, LANE_TCP_CLIENT, LANE_TCP_PS, LANE_ZERO_COPY };

/* Whether every param's value and grad points at its own buffer (own: 2 per param). */
static int own_buffers(const model *m, float *const *own) {
    for (int i = 0; i < m->n; i++)
        if (m->p[i]->value.data != own[2 * i] || m->p[i]->grad.data != own[2 * i + 1]) return 0;
    return 1;
}

/* Whether a's values are b's rounded to bfloat16 (exactly), and some differ from b's. */
static int same_values_bf16(const model *a, const model *b) {
    int rounded = 0;
    for (int i = 0; i < a->n; i++)
        for (int64_t j = 0; j < numel(a->p[i]); j++) {
            float v = b->p[i]->value.data[j];
            float r = dt__bf16_to_f32(dt__bf16_from_f32(v));
            if (memcmp(&a->p[i]->value.data[j], &r, 4)) return 0;
            rounded += r != v;
        }
    return rounded > 0;
}

/* Round every gradient of m to bfloat16 and back (what a bfloat16 push delivers); returns
 * how many changed. */
static int round_grads_bf16(model *m) {
    int changed = 0;
    for (int i = 0; i < m->n; i++)
        for (int64_t j = 0; j < numel(m->p[i]); j++) {
            float g = m->p[i]->grad.data[j];
            float r = dt__bf16_to_f32(dt__bf16_from_f32(g));
            changed += r != g;
            m->p[i]->grad.data[j] = r;
        }
    return changed;
}

/* nps servers over m; client c (pushing its gradients as `dtype`); local reference r with
 * its own optimizer over the same steps: every push_pull must give bit-identical values,
 * whichever lane carries them. A bfloat16 client's TCP pushes arrive rounded (the
 * reference rounds its gradients the same way) and its push_pull's values come back
 * rounded, while a pull gives the PS's float32 values exactly; the shared-memory lane does
 * not convert. */
static void check_async_dtype(dt_optim_kind kind, int nps, enum lane lane, dt_ps_wire_dtype dtype) {
    char lp[512];
    FILE *log = open_log("async.log", lp, sizeof lp);
    model w = {0}, r = {0};
    model_make(&w);
    model_make(&r);
    fill_values(&w, 3);
    fill_values(&r, 3);
    dt_optim_conf oc = optim_of(kind, 0.01f);
    dt_ps_server *s[8] = {0};
    dt_ps_client *c = NULL;
    dt_optim *ref = NULL;
    int shm = lane == LANE_SHM || lane == LANE_ZERO_COPY;
    int narrow = dtype == DT_PS_WIRE_BF16 && !shm;
    float *own[16];
    for (int i = 0; i < w.n; i++) {
        own[2 * i] = w.p[i]->value.data;
        own[2 * i + 1] = w.p[i]->grad.data;
    }
    for (int i = 0; i < nps; i++) {
        dt_ps_server_conf sc = server_conf(i, nps, oc, log);
        sc.threads = i + 1; /* results must not depend on the thread count */
        sc.no_shm = lane == LANE_TCP_PS;
        DT_CHECK_OK(dt_ps_server_start(&s[i], &sc, w.p, w.n));
    }
    addrs ad;
    addrs_of(&ad, s, nps);
    dt_ps_client_conf cc = client_conf(&ad, nps, "worker-0", log);
    cc.no_shm = lane == LANE_TCP_CLIENT;
    cc.wire_dtype = dtype;
    cc.zero_copy = lane == LANE_ZERO_COPY;
    DT_CHECK_OK(dt_ps_client_open(&c, &cc, w.p, w.n));
    DT_CHECK_OK(dt_optim_init(&ref, &oc, r.p, r.n));
    int taken = 0;
    DT_CHECK_OK(dt_ps_client_init(c, &taken));
    DT_CHECK(taken == nps);
    /* zero copy: connected, the params' data live in the segments (the test's gradients
     * are written there, the values read from there); otherwise they never move */
    DT_CHECK(own_buffers(&w, own) == (lane != LANE_ZERO_COPY));
    for (int it = 0; it < 4; it++) {
        fill_grads(&w, 10 + it);
        fill_grads(&r, 10 + it);
        /* the test's gradients are not all bfloat16 numbers: rounding them shows */
        if (narrow) DT_CHECK(round_grads_bf16(&r) > 0);
        int64_t step = -1;
        if (it % 2 == 0) {
            DT_CHECK_OK(dt_ps_client_push_pull(c, &step));
            if (narrow) {
                /* the reply came as bfloat16: the PS's values rounded, the PS's own exact */
                dt_optim_step(ref, NULL);
                DT_CHECK(step == it + 1);
                DT_CHECK(same_values_bf16(&w, &r));
                DT_CHECK_OK(dt_ps_client_pull(c, &step));
                DT_CHECK(step == it + 1);
                DT_CHECK(same_values(&w, &r));
                continue;
            }
        } else {
            DT_CHECK_OK(dt_ps_client_push(c, &step));
            DT_CHECK(step == it + 1);
            DT_CHECK_OK(dt_ps_client_pull(c, &step));
        }
        DT_CHECK(step == it + 1);
        dt_optim_step(ref, NULL);
        DT_CHECK(same_values(&w, &r));
    }
    for (int i = 0; i < nps; i++)
        DT_CHECK(dt_ps_server_step(s[i]) == 4);
    fflush(log);
    if (shm)
        DT_CHECK(log_has(lp, "worker-0 (127.0.0.1:") &&
                 log_has(lp, "): tensors through shared memory ("));
    if (lane == LANE_TCP_PS)
        DT_CHECK(log_has(lp, "worker-0: ps-0 (127.0.0.1:") &&
                 log_has(lp, ") declined shared memory (shared memory is off on this PS); "
                             "tensors go over TCP"));
    if (!shm) {
        char *data = NULL;
        size_t len = 0;
        FILE *f = fopen(lp, "r");
        DT_CHECK(f);
        data = calloc(1, 1 << 20);
        len = data ? fread(data, 1, (1 << 20) - 1, f) : 0;
        fclose(f);
        DT_CHECK(len > 0 && !strstr(data, "tensors through shared memory"));
        free(data);
    }
    dt_ps_client_close(c);
    /* closed: the caller's buffers again, holding the last values */
    DT_CHECK(own_buffers(&w, own));
    DT_CHECK(same_values(&w, &r));
    for (int i = 0; i < nps; i++)
        dt_ps_server_stop(s[i]);
    dt_optim_free(ref);
    model_free(&w);
    model_free(&r);
    fclose(log);
}

static void check_async_exact(dt_optim_kind kind, int nps, enum lane lane) {
    check_async_dtype(kind, nps, lane, DT_PS_WIRE_F32);
}

static void test_async_sgd_exact(void) {
    check_async_exact(DT_OPTIM_SGD, 1, LANE_SHM);
    check_async_exact(DT_OPTIM_SGD, 1, LANE_TCP_CLIENT);
}
static void test_async_adam_exact(void) {
    check_async_exact(DT_OPTIM_ADAM, 1, LANE_SHM);
    check_async_exact(DT_OPTIM_ADAM, 1, LANE_TCP_CLIENT);
    check_async_exact(DT_OPTIM_ADAM, 1, LANE_TCP_PS);
    check_async_exact(DT_OPTIM_ADAM, 1, LANE_ZERO_COPY);
}
static void test_two_ps_split(void) {
    check_async_exact(DT_OPTIM_ADAM, 2, LANE_SHM);
    check_async_exact(DT_OPTIM_ADAM, 2, LANE_ZERO_COPY);
    check_async_exact(DT_OPTIM_ADAM, 2, LANE_TCP_CLIENT);
}
static void test_more_ps_than_variables(void) {
    check_async_exact(DT_OPTIM_MOMENTUM, 6, LANE_SHM); /* 4 variables over 6 PS: two hold nothing */
    check_async_exact(DT_OPTIM_MOMENTUM, 6, LANE_ZERO_COPY);
}

/* ---- bfloat16 gradients on the wire ---- */

static float f32_of(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The conversion: round to nearest even (ties included), NaN, infinities, overflow; and the
 * in-place widening the PS uses gives back each rounded value, within bfloat16's precision
 * of the float32 it came from (8 significant bits, rounded to nearest: a relative error of
 * at most 2^-8). */
static void test_bf16_conversion(void) {
    struct {
        uint32_t in;
        uint16_t out;
    } cases[] = {
        {0x3f800000u, 0x3f80}, /* 1.0 */
        {0x3f808000u, 0x3f80}, /* 1 + 2^-8: a tie, to the even 0x3f80 */
        {0x3f818000u, 0x3f82}, /* a tie between 0x3f81 and 0x3f82: to the even one */
        {0x3f808001u, 0x3f81}, /* just above the tie: up */
        {0x3f807fffu, 0x3f80}, /* just below: down */
        {0xbf808001u, 0xbf81}, /* negative: the same, by magnitude */
        {0x80000000u, 0x8000}, /* -0 */
        {0x7f800000u, 0x7f80}, /* +inf */
        {0xff800000u, 0xff80}, /* -inf */
        {0x7f7fffffu, 0x7f80}, /* FLT_MAX rounds to +inf */
        {0x00000001u, 0x0000}, /* the smallest subnormal: to 0 */
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        uint16_t got = dt__bf16_from_f32(f32_of(cases[k].in));
        if (got != cases[k].out)
            DT_FAIL("0x%08x -> 0x%04x, expected 0x%04x", cases[k].in, got, cases[k].out);
    }
    uint16_t nan = dt__bf16_from_f32(f32_of(0x7f800001u)); /* a NaN whose payload is low */
    DT_CHECK((nan & 0x7f80) == 0x7f80 && (nan & 0x7f) != 0);
    DT_CHECK(dt__bf16_to_f32(0x3f81) == 1.0078125f);

    enum { N = 1000 };
    float *x = malloc(N * sizeof *x), *buf = malloc(N * sizeof *buf);
    uint16_t *h = malloc(N * sizeof *h);
    DT_CHECK(x && buf && h);
    uint32_t seed = 12345;
    for (int i = 0; i < N; i++) {
        seed = seed * 1664525u + 1013904223u;
        /* magnitudes from 1e-6 to 1e3, both signs */
        double m = (double)(seed >> 8) / (double)(1u << 24);
        x[i] = (float)((seed & 1 ? -1 : 1) * pow(10.0, -6.0 + 9.0 * m));
    }
    dt__bf16_narrow(h, x, N);
    /* the narrow values in the upper half of the floats' room, as the PS reads them */
    memcpy((uint8_t *)buf + 2 * N, h, 2 * N);
    dt__bf16_widen_tail(buf, N);
    for (int i = 0; i < N; i++) {
        if (buf[i] != dt__bf16_to_f32(h[i]))
            DT_FAIL("element %d: widened %g, expected %g", i, buf[i], dt__bf16_to_f32(h[i]));
        if (fabsf(buf[i] - x[i]) > fabsf(x[i]) * (1.0f / 256))
            DT_FAIL("element %d: %.9g became %.9g (more than 2^-8 off)", i, x[i], buf[i]);
    }
    free(x);
    free(buf);
    free(h);
}

/* A bfloat16 client's pushes are the rounded gradients, bit for bit, and its push_pulls'
 * values the PS's rounded, over TCP (either side turning the shared memory off, one PS or
 * two); on the shared-memory lane nothing is rounded. */
static void test_async_bf16(void) {
    check_async_dtype(DT_OPTIM_SGD, 1, LANE_TCP_CLIENT, DT_PS_WIRE_BF16);
    check_async_dtype(DT_OPTIM_ADAM, 2, LANE_TCP_PS, DT_PS_WIRE_BF16);
    check_async_dtype(DT_OPTIM_ADAM, 1, LANE_SHM, DT_PS_WIRE_BF16);
}

/* ---- waiting for values ---- */

typedef struct op_arg {
    dt_ps_client *c;
    int op; /* 0 pull, 1 push_pull, 2 push */
    dt_err err;
    int64_t step;
    char msg[512];
} op_arg;

static void *op_main(void *p) {
    op_arg *a = p;
    a->err = a->op == 0   ? dt_ps_client_pull(a->c, &a->step)
             : a->op == 1 ? dt_ps_client_push_pull(a->c, &a->step)
                          : dt_ps_client_push(a->c, &a->step);
    snprintf(a->msg, sizeof a->msg, "%s", dt_errmsg());
    return NULL;
}

/* ---- concurrent pushes ---- */

/* A model of several pipeline blocks (server.c's BLOCK is 8192 elements): a 96x300 kernel
 * (3 whole blocks and a part), its bias, a small kernel. */
static void big_model_make(model *m) {
    m->n = 3;
    m->p[0] = param_new("big/kernel", 2, (int64_t[]){96, 300}, 1);
    m->p[1] = param_new("big/bias", 1, (int64_t[]){300}, 0);
    m->p[2] = param_new("out/kernel", 2, (int64_t[]){3, 5}, 1);
}

#define CONC_PUSHERS 4
#define CONC_PUSHES 40
#define CONC_STEPS (CONC_PUSHERS * CONC_PUSHES)

typedef struct conc_run {
    const addrs *ad;
    FILE *log;
    int id;      /* pushers 0..CONC_PUSHERS-1; CONC_PUSHERS: the puller */
    float **ref; /* ref[k]: the reference's values after k steps, params one after another */
    _Atomic int *pushing; /* pushers still running */
    int bad, calls;
    int64_t last;
} conc_run;

/* Whether m's values are ref[step] exactly. */
static int is_ref_state(const model *m, float *const *ref, int64_t step) {
    if (step < 0 || step > CONC_STEPS) return 0;
    const float *r = ref[step];
    for (int i = 0; i < m->n; r += numel(m->p[i]), i++)
        if (memcmp(m->p[i]->value.data, r, (size_t)numel(m->p[i]) * 4)) return 0;
    return 1;
}

/* Pushers push the same gradient CONC_PUSHES times (even ones through shared memory, odd
 * ones over TCP); the puller pulls while they do. Every reply must be exactly the state
 * after as many serial steps as its step says. */
static void *conc_main(void *arg) {
    conc_run *r = arg;
    char name[32];
    snprintf(name, sizeof name, "worker-%d", r->id);
    model m = {0};
    big_model_make(&m);
    fill_grads(&m, 10);
    dt_ps_client_conf cc = client_conf(r->ad, 1, name, r->log);
    cc.no_shm = r->id % 2 == 1;
    dt_ps_client *c = NULL;
    if (dt_ps_client_open(&c, &cc, m.p, m.n) != DT_OK) {
        r->bad++;
        model_free(&m);
        return NULL;
    }
    for (int k = 0; r->id < CONC_PUSHERS ? k < CONC_PUSHES : atomic_load(r->pushing) > 0; k++) {
        int64_t step = -1;
        dt_err e = r->id < CONC_PUSHERS ? dt_ps_client_push_pull(c, &step)
                                        : dt_ps_client_pull(c, &step);
        r->calls++;
        if (e != DT_OK || !is_ref_state(&m, r->ref, step) || step < r->last) r->bad++;
        r->last = step;
    }
    if (r->id < CONC_PUSHERS) atomic_fetch_sub(r->pushing, 1);
    dt_ps_client_close(c);
    model_free(&m);
    return NULL;
}

/* Async pushes from several workers at once go through the PS's pipeline one block apart:
 * the result must be that of applying them one after another (Adam, whose state a push
 * that overtook or overlapped another on a block would tear), each reply one such state. */
static void test_concurrent_pushes(void) {
    char lp[512];
    FILE *log = open_log("concurrent.log", lp, sizeof lp);
    model w = {0}, r = {0};
    big_model_make(&w);
    big_model_make(&r);
    fill_values(&w, 3);
    fill_values(&r, 3);
    fill_grads(&r, 10);
    dt_optim_conf oc = optim_of(DT_OPTIM_ADAM, 0.01f);
    size_t total = 0;
    for (int i = 0; i < r.n; i++)
        total += (size_t)numel(r.p[i]);
    float *ref[CONC_STEPS + 1];
    dt_optim *o = NULL;
    DT_CHECK_OK(dt_optim_init(&o, &oc, r.p, r.n));
    for (int k = 0; k <= CONC_STEPS; k++) {
        ref[k] = malloc(total * 4);
        DT_CHECK(ref[k] != NULL);
        float *d = ref[k];
        for (int i = 0; i < r.n; d += numel(r.p[i]), i++)
            memcpy(d, r.p[i]->value.data, (size_t)numel(r.p[i]) * 4);
        dt_optim_step(o, NULL);
    }
    dt_optim_free(o);

    addrs ad;
    dt_ps_server *s = NULL;
    one_ps_initialized(&w, oc, log, &s, &ad);
    dt_ps_client_conf cc = client_conf(&ad, 1, "chief", log);

    _Atomic int pushing = CONC_PUSHERS;
    conc_run runs[CONC_PUSHERS + 1];
    pthread_t th[CONC_PUSHERS + 1];
    for (int i = 0; i <= CONC_PUSHERS; i++) {
        runs[i] = (conc_run){.ad = &ad, .log = log, .id = i, .ref = ref, .pushing = &pushing};
        DT_CHECK(pthread_create(&th[i], NULL, conc_main, &runs[i]) == 0);
    }
    for (int i = 0; i <= CONC_PUSHERS; i++) {
        pthread_join(th[i], NULL);
        DT_CHECK(runs[i].bad == 0);
        DT_CHECK(runs[i].calls > 0);
    }
    DT_CHECK(dt_ps_server_step(s) == CONC_STEPS);
    /* the end: every push applied once, as if one after another */
    dt_ps_client *last = NULL;
    int64_t step = -1;
    DT_CHECK_OK(dt_ps_client_open(&last, &cc, w.p, w.n));
    DT_CHECK_OK(dt_ps_client_pull(last, &step));
    DT_CHECK(step == CONC_STEPS);
    DT_CHECK(is_ref_state(&w, ref, CONC_STEPS));
    dt_ps_client_close(last);
    dt_ps_server_stop(s);
    for (int k = 0; k <= CONC_STEPS; k++)
        free(ref[k]);
    model_free(&w);
    model_free(&r);
    fclose(log);
}

static void test_pull_waits_for_init(void) {
    char lp[512];
    FILE *log = open_log("wait.log", lp, sizeof lp);
    model a = {0}, b = {0};
    model_make(&a);
    model_make(&b);
    fill_values(&a, 4);
    dt_ps_server *s = NULL;
    dt_ps_client *ca = NULL, *cb = NULL;
    dt_ps_server_conf sc = server_conf(0, 1, optim_of(DT_OPTIM_SGD, 0), log);
    DT_CHECK_OK(dt_ps_server_start(&s, &sc, a.p, a.n));
    addrs ad;
    addrs_of(&ad, &s, 1);
    dt_ps_client_conf cc = client_conf(&ad, 1, "worker-1", log);
    DT_CHECK_OK(dt_ps_client_open(&cb, &cc, b.p, b.n));
    cc.replica = "chief-0";
    DT_CHECK_OK(dt_ps_client_open(&ca, &cc, a.p, a.n));
    op_arg arg = {.c = cb, .op = 0};
    pthread_t t;
    pthread_create(&t, NULL, op_main, &arg);
    DT_CHECK(log_has(lp, "has no values yet; waiting")); /* the puller is waiting */
    DT_CHECK_OK(dt_ps_client_init(ca, NULL));
    pthread_join(t, NULL);
    if (arg.err) DT_FAIL("pull: %s", arg.msg);
    DT_CHECK(arg.step == 0);
    DT_CHECK(same_values(&a, &b));
    /* A PS without values (a restart without a checkpoint): a plain client's push waits
     * until someone gives it values; the chief's client (offer_init) gives its own first,
     * so the push is then applied on top of them. */
    char lp2[512];
    FILE *log2 = open_log("wait-push.log", lp2, sizeof lp2);
    dt_ps_server *s2 = NULL;
    dt_ps_client *c2 = NULL, *chief = NULL;
    sc.log = log2;
    DT_CHECK_OK(dt_ps_server_start(&s2, &sc, a.p, a.n));
    addrs ad2;
    addrs_of(&ad2, &s2, 1);
    dt_ps_client_conf cc2 = client_conf(&ad2, 1, "worker-2", log2);
    DT_CHECK_OK(dt_ps_client_open(&c2, &cc2, b.p, b.n));
    op_arg push = {.c = c2, .op = 2};
    pthread_create(&t, NULL, op_main, &push);
    DT_CHECK(log_has(lp2, "has no values yet; waiting")); /* the pusher is waiting */
    cc2.replica = "chief-1";
    cc2.offer_init = 1;
    DT_CHECK_OK(dt_ps_client_open(&chief, &cc2, a.p, a.n));
    int64_t step = -1;
    DT_CHECK_OK(dt_ps_client_push(chief, &step));
    DT_CHECK(log_has(lp2, "had no values: gave it this replica's"));
    pthread_join(t, NULL);
    if (push.err) DT_FAIL("waiting push: %s", push.msg);
    DT_CHECK(step >= 1 && push.step >= 1 && (step == 2 || push.step == 2));
    DT_CHECK(dt_ps_server_step(s2) == 2);
    dt_ps_client_close(chief);
    dt_ps_client_close(c2);
    dt_ps_server_stop(s2);
    fclose(log2);
    dt_ps_client_close(ca);
    dt_ps_client_close(cb);
    dt_ps_server_stop(s);
    model_free(&a);
    model_free(&b);
    fclose(log);
}

/* ---- sync mode ---- */

static void wait_pending(dt_ps_server *s, int n) {
    while (dt__ps_server_pending(s) != n) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
}

static void test_sync_rounds(void) {
    char lp[512];
    FILE *log = open_log("sync.log", lp, sizeof lp);
    model a = {0}, b = {0}, r = {0};
    model_make(&a);
    model_make(&b);
    model_make(&r);
    fill_values(&a, 5);
    fill_values(&r, 5);
    dt_optim_conf oc = optim_of(DT_OPTIM_ADAM, 0);
    dt_ps_server *s = NULL;
    dt_ps_client *ca = NULL, *cb = NULL;
    dt_optim *ref = NULL;
    dt_ps_server_conf sc = server_conf(0, 1, oc, log);
    sc.sync = 1;
    sc.sync_timeout_ms = 60000;
    DT_CHECK_OK(dt_ps_server_start(&s, &sc, a.p, a.n));
    DT_CHECK_OK(dt_optim_init(&ref, &oc, r.p, r.n));
    addrs ad;
    addrs_of(&ad, &s, 1);
    dt_ps_client_conf cc = client_conf(&ad, 1, "worker-0", log);
    DT_CHECK_OK(dt_ps_client_open(&ca, &cc, a.p, a.n));
    cc.replica = "worker-1";
    DT_CHECK_OK(dt_ps_client_open(&cb, &cc, b.p, b.n));
    DT_CHECK_OK(dt_ps_client_init(ca, NULL));
    DT_CHECK_OK(dt_ps_client_pull(cb, NULL));

    /* round 1: only worker-0 is active yet (active = has pushed): applied alone */
    int64_t step = 0;
    fill_grads(&a, 20);
    fill_grads(&r, 20);
    DT_CHECK_OK(dt_ps_client_push_pull(ca, &step));
    DT_CHECK(step == 1);
    dt_optim_step(ref, NULL);
    DT_CHECK(same_values(&a, &r));

    /* round 2: worker-1 joins and waits for worker-0; the mean of both is applied once */
    fill_grads(&b, 21);
    fill_grads(&a, 22);
    op_arg arg = {.c = cb, .op = 1};
    pthread_t t;
    pthread_create(&t, NULL, op_main, &arg);
    wait_pending(s, 1);
    DT_CHECK_OK(dt_ps_client_push_pull(ca, &step));
    pthread_join(t, NULL);
    if (arg.err) DT_FAIL("push_pull: %s", arg.msg);
    DT_CHECK(step == 2 && arg.step == 2);
    for (int i = 0; i < r.n; i++)
        for (int64_t j = 0; j < numel(r.p[i]); j++)
            r.p[i]->grad.data[j] = (b.p[i]->grad.data[j] + a.p[i]->grad.data[j]) / 2.0f;
    dt_optim_step(ref, NULL);
    DT_CHECK(same_values(&a, &r));
    DT_CHECK(same_values(&b, &r));
    DT_CHECK(dt_ps_server_step(s) == 2);
    dt_ps_client_close(ca);
    dt_ps_client_close(cb);
    dt_ps_server_stop(s);
    dt_optim_free(ref);
    model_free(&a);
    model_free(&b);
    model_free(&r);
    fclose(log);
}

static void test_sync_timeout_and_leave(void) {
    char lp[512];
    FILE *log = open_log("sync_timeout.log", lp, sizeof lp);
    model a = {0}, b = {0}, r = {0};
    model_make(&a);
    model_make(&b);
    model_make(&r);
    fill_values(&a, 6);
    fill_values(&r, 6);
    dt_optim_conf oc = optim_of(DT_OPTIM_SGD, 0);
    dt_ps_server *s = NULL;
    dt_ps_client *ca = NULL, *cb = NULL;
    dt_optim *ref = NULL;
    dt_ps_server_conf sc = server_conf(0, 1, oc, log);
    sc.sync = 1;
    sc.sync_timeout_ms = 300;
    DT_CHECK_OK(dt_ps_server_start(&s, &sc, a.p, a.n));
    DT_CHECK_OK(dt_optim_init(&ref, &oc, r.p, r.n));
    addrs ad;
    addrs_of(&ad, &s, 1);
    dt_ps_client_conf cc = client_conf(&ad, 1, "worker-0", log);
    DT_CHECK_OK(dt_ps_client_open(&ca, &cc, a.p, a.n));
    cc.replica = "worker-1";
    DT_CHECK_OK(dt_ps_client_open(&cb, &cc, b.p, b.n));
    DT_CHECK_OK(dt_ps_client_init(ca, NULL));
    /* both become active (rounds 1 and 2 may each hold one or both: not checked) */
    fill_grads(&a, 30);
    fill_grads(&b, 30);
    op_arg arg = {.c = cb, .op = 2};
    pthread_t t;
    pthread_create(&t, NULL, op_main, &arg);
    DT_CHECK_OK(dt_ps_client_push(ca, NULL));
    pthread_join(t, NULL);
    DT_CHECK(arg.err == DT_OK);
    int64_t step0 = dt_ps_server_step(s);
    DT_CHECK_OK(dt_ps_client_pull(ca, NULL));
    for (int i = 0; i < r.n; i++)
        memcpy(r.p[i]->value.data, a.p[i]->value.data, (size_t)numel(a.p[i]) * 4);

    /* worker-1 stays connected but silent: worker-0's push returns after the timeout with
     * its gradient applied alone */
    fill_grads(&a, 31);
    fill_grads(&r, 31);
    int64_t step = 0;
    DT_CHECK_OK(dt_ps_client_push_pull(ca, &step));
    DT_CHECK(step == step0 + 1);
    dt_optim_step(ref, NULL);
    DT_CHECK(same_values(&a, &r));
    DT_CHECK(log_has(lp, "applied with 1 of 2 workers: timed out after 300 ms"));

    /* worker-1 pushes and waits for worker-0, which disconnects: the round is applied with
     * worker-1's gradient at once */
    fill_grads(&b, 32);
    fill_grads(&r, 32);
    op_arg arg2 = {.c = cb, .op = 1};
    pthread_create(&t, NULL, op_main, &arg2);
    wait_pending(s, 1);
    dt_ps_client_close(ca);
    ca = NULL;
    pthread_join(t, NULL);
    if (arg2.err) DT_FAIL("push_pull: %s", arg2.msg);
    DT_CHECK(arg2.step == step0 + 2);
    dt_optim_step(ref, NULL);
    DT_CHECK(same_values(&b, &r));
    DT_CHECK(log_has(lp, "applied with 1 of 1 workers: worker-0"));
    dt_ps_client_close(cb);
    dt_ps_server_stop(s);
    dt_optim_free(ref);
    model_free(&a);
    model_free(&b);
    model_free(&r);
    fclose(log);
}

/* ---- refusals, over raw sockets ---- */

static int raw_dial(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) abort();
    struct timeval tv = {.tv_sec = 10};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static void raw_send(int fd, const void *p, size_t n) {
    if (send(fd, p, n, MSG_NOSIGNAL) != (ssize_t)n) {
        /* the server may already have closed: fine for refusal tests */
    }
}

static void raw_hello(int fd, const char *token, int index, int nps) {
    uint8_t b[256];
    size_t tl = strlen(token), rl = strlen("intruder");
    dt__ps_hdr_encode(b, DT__PS_HELLO, 0, 16 + tl + rl);
    dt__put32(b + 24, (uint32_t)index);
    dt__put32(b + 28, (uint32_t)nps);
    dt__put32(b + 32, (uint32_t)tl);
    memcpy(b + 36, token, tl);
    dt__put32(b + 36 + tl, (uint32_t)rl);
    memcpy(b + 40 + tl, "intruder", rl);
    raw_send(fd, b, 40 + tl + rl);
}

/* Reads frames until the server closes; returns the type of the last frame (0: none) and
 * its text for ERROR. */
static int raw_until_closed(int fd, char *text, size_t len) {
    int last = 0;
    text[0] = '\0';
    for (;;) {
        uint8_t h[DT__PS_HDR];
        size_t got = 0;
        while (got < sizeof h) {
            ssize_t k = recv(fd, h + got, sizeof h - got, 0);
            if (k <= 0) return last;
            got += (size_t)k;
        }
        dt__ps_hdr hd;
        dt__ps_hdr_decode(h, &hd);
        last = hd.type;
        if (hd.len > 4096) return -1;
        char buf[4097];
        got = 0;
        while (got < hd.len) {
            ssize_t k = recv(fd, buf + got, hd.len - got, 0);
            if (k <= 0) return -1;
            got += (size_t)k;
        }
        buf[got] = '\0';
        if (hd.type == DT__PS_ERROR) {
            size_t k = got < len - 1 ? got : len - 1;
            memcpy(text, buf, k);
            text[k] = 0;
        }
    }
}

/* A PUSH frame of one tensor list built from (name, shape) pairs with zero data. */
static size_t build_push(uint8_t *out, int count, const char *const *names,
                         const dt_shape *shapes) {
    size_t n = DT__PS_HDR;
    dt__put32(out + n, (uint32_t)count);
    n += 4;
    for (int i = 0; i < count; i++) {
        n += dt__ps_meta_encode(out + n, names[i], &shapes[i]);
        size_t bytes = (size_t)dt_shape_numel(&shapes[i]) * 4;
        memset(out + n, 0, bytes);
        n += bytes;
    }
    dt__ps_hdr_encode(out, DT__PS_PUSH, 0, n - DT__PS_HDR);
    return n;
}

static void test_refusals(void) {
    char lp[512];
    FILE *log = open_log("refusals.log", lp, sizeof lp);
    model a = {0}, b = {0};
    model_make(&a);
    model_make(&b);
    fill_values(&a, 7);
    dt_ps_server *s = NULL;
    dt_ps_client *ca = NULL;
    dt_ps_server_conf sc = server_conf(0, 1, optim_of(DT_OPTIM_SGD, 0), log);
    DT_CHECK_OK(dt_ps_server_start(&s, &sc, a.p, a.n));
    int port = dt_ps_server_port(s);
    addrs ad;
    addrs_of(&ad, &s, 1);
    dt_ps_client_conf cc = client_conf(&ad, 1, "worker-0", log);
    DT_CHECK_OK(dt_ps_client_open(&ca, &cc, b.p, b.n));
    dt_ps_client *good = NULL;
    DT_CHECK_OK(dt_ps_client_open(&good, &cc, a.p, a.n));
    DT_CHECK_OK(dt_ps_client_init(good, NULL));

    char text[1100];
    uint8_t *frame = malloc(1 << 16);
    DT_CHECK(frame);
    const char *names[4] = {"fc1/kernel", "fc1/bias", "fc2/kernel", "fc2/bias"};
    dt_shape shapes[4];
    for (int i = 0; i < 4; i++)
        shapes[i] = a.p[i]->value.shape;

    struct {
        const char *what, *log_text;
        int hello; /* 0: none, 1: wrong token, 2: empty token, 3: good */
        int kind;  /* 0: nothing more, 1: oversize, 2: unknown name, 3: bad shape,
                      4: truncated, 5: duplicate, 6: missing, 7: PULL before HELLO,
                      8: wrong partition, 9: trailing bytes, 10: unknown dtype,
                      11: INIT in bfloat16, 12: float32 data under a bfloat16 header */
    } cases[] = {
        {"wrong token", "intruder (127.0.0.1:", 1, 0},
        {"empty token", "HELLO: wrong token", 2, 0},
        {"oversize", "PUSH frame of 1099511627776 bytes exceeds the maximum frame size", 3, 1},
        {"unknown name", "): tensor fc9/kernel: no such variable in partition 0 of 1", 3, 2},
        {"bad shape", "push from intruder", 3, 3},
        {"truncated", "): truncated frame: the peer closed after", 3, 4},
        {"duplicate", "): tensor fc1/bias: sent twice", 3, 5},
        {"missing", "): 3 tensors, this partition has 4 variables", 3, 6},
        {"pull first", "expected HELLO, got PULL", 0, 7},
        {"wrong partition", "the client expects ps-1 of 2, this is ps-0 of 1", 3, 8},
        {"trailing", "): 8 bytes after the last tensor", 3, 9},
        {"unknown dtype", "): unknown wire dtype 7 (this PS takes 0 float32, 1 bfloat16)", 3, 10},
        {"bf16 init", "): values come as float32 (dtype 0), not dtype 1", 3, 11},
        {"bf16 sized wrong", "): tensor 1: name length 0 (1 to 63)", 3, 12},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        int fd = raw_dial(port);
        if (cases[k].hello == 1) raw_hello(fd, "guess", 0, 1);
        if (cases[k].hello == 2) raw_hello(fd, "", 0, 1);
        if (cases[k].hello == 3)
            raw_hello(fd, "secret", cases[k].kind == 8 ? 1 : 0, cases[k].kind == 8 ? 2 : 1);
        size_t n = 0;
        switch (cases[k].kind) {
        case 1:
            dt__ps_hdr_encode(frame, DT__PS_PUSH, 0, (uint64_t)1 << 40);
            n = DT__PS_HDR;
            break;
        case 2: {
            const char *bad[4] = {"fc1/kernel", "fc1/bias", "fc9/kernel", "fc2/bias"};
            n = build_push(frame, 4, bad, shapes);
            break;
        }
        case 3: {
            dt_shape sh[4] = {shapes[0], shapes[1], shapes[2], shapes[3]};
            sh[0] = dt_shape_make(2, (int64_t[]){3, 2});
            n = build_push(frame, 4, names, sh);
            break;
        }
        case 4:
            n = build_push(frame, 4, names, shapes) - 10; /* then close */
            break;
        case 5: {
            const char *dup[4] = {"fc1/kernel", "fc1/bias", "fc1/bias", "fc2/bias"};
            dt_shape sh[4] = {shapes[0], shapes[1], shapes[1], shapes[3]};
            n = build_push(frame, 4, dup, sh);
            break;
        }
        case 6:
            n = build_push(frame, 3, names, shapes);
            break;
        case 7:
            dt__ps_hdr_encode(frame, DT__PS_PULL, 0, 0);
            n = DT__PS_HDR;
            break;
        case 9: {
            n = build_push(frame, 4, names, shapes);
            memset(frame + n, 0, 8);
            n += 8;
            dt__ps_hdr_encode(frame, DT__PS_PUSH, 0, n - DT__PS_HDR);
            break;
        }
        case 10: /* a well-formed float32 push whose header names dtype 7 */
            n = build_push(frame, 4, names, shapes);
            dt__ps_hdr_encode(frame, DT__PS_PUSH, 7, n - DT__PS_HDR);
            break;
        case 11:
            n = build_push(frame, 4, names, shapes);
            dt__ps_hdr_encode(frame, DT__PS_INIT, DT__PS_BF16, n - DT__PS_HDR);
            break;
        case 12: /* float32 data under a bfloat16 header: the second half of fc1/kernel's
                  * zeros is read as the next tensor's description */
            n = build_push(frame, 4, names, shapes);
            dt__ps_hdr_encode(frame, DT__PS_PUSH, DT__PS_BF16, n - DT__PS_HDR);
            break;
        }
        if (n) raw_send(fd, frame, n);
        if (cases[k].kind == 4) shutdown(fd, SHUT_WR);
        int last = raw_until_closed(fd, text, sizeof text);
        close(fd);
        if (cases[k].kind != 4 && last != DT__PS_ERROR)
            DT_FAIL("%s: the last frame was %d, not ERROR", cases[k].what, last);
        if (!log_has(lp, cases[k].log_text))
            DT_FAIL("%s: the log lacks \"%s\"", cases[k].what, cases[k].log_text);
        if (cases[k].kind == 3) {
            DT_CHECK(strstr(text, "tensor fc1/kernel: shape [3, 2] does not match [2, 3]"));
            DT_CHECK(log_has(lp, "tensor fc1/kernel: shape [3, 2] does not match [2, 3]"));
        }
        /* values untouched */
        int64_t step = -1;
        DT_CHECK_OK(dt_ps_client_pull(ca, &step));
        DT_CHECK(step == 0);
        DT_CHECK(same_values(&a, &b));
    }
    /* a client with the wrong token gets the PS's refusal as its error */
    dt_ps_client *bad = NULL;
    cc.token = "wrong";
    DT_CHECK_OK(dt_ps_client_open(&bad, &cc, b.p, b.n));
    DT_CHECK_ERR(dt_ps_client_pull(bad, NULL), DT_ERR_STATE, "refused: HELLO: wrong token");
    dt_ps_client_close(bad);
    /* a client whose model differs: the PS names the tensor */
    model c = {0};
    model_make(&c);
    c.p[2]->value.shape = c.p[2]->grad.shape = dt_shape_make(2, (int64_t[]){4, 3});
    cc.token = "secret";
    DT_CHECK_OK(dt_ps_client_open(&bad, &cc, c.p, c.n));
    DT_CHECK_ERR(dt_ps_client_push(bad, NULL), DT_ERR_STATE,
                 "tensor fc2/kernel: shape [4, 3] does not match [3, 4]");
    dt_ps_client_close(bad);
    model_free(&c);
    DT_CHECK(dt_ps_server_step(s) == 0);
    free(frame);
    dt_ps_client_close(ca);
    dt_ps_client_close(good);
    dt_ps_server_stop(s);
    model_free(&a);
    model_free(&b);
    fclose(log);
}

/* Reads one frame's header (and skips its payload). Returns its type, 0 on EOF. */
static int raw_frame(int fd, dt__ps_hdr *hd) {
    uint8_t h[DT__PS_HDR];
    size_t got = 0;
    while (got < sizeof h) {
        ssize_t k = recv(fd, h + got, sizeof h - got, 0);
        if (k <= 0) return 0;
        got += (size_t)k;
    }
    dt__ps_hdr_decode(h, hd);
    uint8_t sink[4096];
    for (uint64_t left = hd->len; left > 0;) {
        ssize_t k = recv(fd, sink, left < sizeof sink ? left : sizeof sink, 0);
        if (k <= 0) return 0;
        left -= (uint64_t)k;
    }
    return hd->type;
}

/* An SHM_ATTACH frame: pid, fd, size, nonce, then the descriptions of (names, shapes). */
static size_t build_attach(uint8_t *out, uint64_t pid, uint64_t fd, uint64_t size,
                           const uint8_t *nonce, int count, const char *const *names,
                           const dt_shape *shapes) {
    size_t n = DT__PS_HDR;
    dt__put64(out + n, pid);
    dt__put64(out + n + 8, fd);
    dt__put64(out + n + 16, size);
    memcpy(out + n + 24, nonce, DT__SHM_NONCE);
    n += DT__PS_SHM_FIXED;
    dt__put32(out + n, (uint32_t)count);
    n += 4;
    for (int i = 0; i < count; i++)
        n += dt__ps_meta_encode(out + n, names[i], &shapes[i]);
    dt__ps_hdr_encode(out, DT__PS_SHM_ATTACH, 0, n - DT__PS_HDR);
    return n;
}

/* The shared-memory lane's frames, sent by hand: a segment that cannot be reached or does
 * not check out is declined and the connection goes on over TCP; descriptions that do not
 * match the partition, a wrong size and lane frames out of turn are refused; the values
 * stay untouched throughout. */
/* ---- bounds before the token is checked ---- */

/* A flood of idle connections, three times the cap of connections waiting for their HELLO:
 * the PS closes the oldest (saying why), and a real client still gets in; authenticated
 * connections have their own cap. */
static void test_pending_connections_bounded(void) {
    char lp[512];
    FILE *log = open_log("pending.log", lp, sizeof lp);
    model a = {0}, b = {0};
    model_make(&a);
    model_make(&b);
    fill_values(&a, 3);
    dt_ps_server *s = NULL;
    dt_ps_server_conf sc = server_conf(0, 1, optim_of(DT_OPTIM_SGD, 0), log);
    sc.max_pending = 4;
    sc.hello_timeout_ms = 120000; /* the cap, not the deadline, must close them */
    sc.max_conns = 2;
    DT_CHECK_OK(dt_ps_server_start(&s, &sc, a.p, a.n));
    int port = dt_ps_server_port(s);
    enum { FLOOD = 12 };
    int fds[FLOOD];
    for (int i = 0; i < FLOOD; i++)
        fds[i] = raw_dial(port);
    /* accepted in the order they connected: the first FLOOD - 4 make room for the others */
    char text[1100];
    for (int i = 0; i < FLOOD - 4; i++) {
        if (raw_until_closed(fds[i], text, sizeof text) != DT__PS_ERROR)
            DT_FAIL("idle connection %d: not closed with an ERROR", i);
        if (!strstr(text, "4 connections were waiting for their HELLO and this was the oldest"))
            DT_FAIL("idle connection %d: \"%s\"", i, text);
    }
    DT_CHECK(log_has(lp, "4 connections wait for their HELLO (the limit); closed the oldest, "
                         "from 127.0.0.1:"));
    /* a real client connects behind them and gets its answers */
    addrs ad;
    addrs_of(&ad, &s, 1);
    dt_ps_client_conf cc = client_conf(&ad, 1, "worker-0", log);
    dt_ps_client *c1 = NULL, *c2 = NULL, *c3 = NULL;
    DT_CHECK_OK(dt_ps_client_open(&c1, &cc, a.p, a.n));
    DT_CHECK_OK(dt_ps_client_init(c1, NULL));
    int64_t step = -1;
    DT_CHECK_OK(dt_ps_client_pull(c1, &step));
    DT_CHECK(step == 0);
    /* the oldest idle one left made room for it */
    DT_CHECK(raw_until_closed(fds[FLOOD - 4], text, sizeof text) == DT__PS_ERROR);
    /* two authenticated connections at most: a third token holder is refused */
    cc.replica = "worker-1";
    DT_CHECK_OK(dt_ps_client_open(&c2, &cc, b.p, b.n));
    DT_CHECK_OK(dt_ps_client_pull(c2, NULL));
    DT_CHECK(same_values(&a, &b));
    cc.replica = "worker-2";
    DT_CHECK_OK(dt_ps_client_open(&c3, &cc, b.p, b.n));
    DT_CHECK_ERR(dt_ps_client_pull(c3, NULL), DT_ERR_STATE,
                 "this PS has 2 connections already (its limit)");
    dt_ps_client_close(c3);
    dt_ps_client_close(c2);
    dt_ps_client_close(c1);
    for (int i = 0; i < FLOOD; i++)
        close(fds[i]);
    dt_ps_server_stop(s);
    model_free(&a);
    model_free(&b);
    fclose(log);
}

/* A burst of real clients, more than the cap of connections waiting for their HELLO, each
 * sending its HELLO as it connects: none is closed to make room (each has its HELLO in
 * hand), every one is answered OK. */
static void test_burst_of_clients_admitted(void) {
    char lp[512];
    FILE *log = open_log("burst.log", lp, sizeof lp);
    model a = {0};
    model_make(&a);
    dt_ps_server *s = NULL;
    dt_ps_server_conf sc = server_conf(0, 1, optim_of(DT_OPTIM_SGD, 0), log);
    sc.max_pending = 2;
    DT_CHECK_OK(dt_ps_server_start(&s, &sc, a.p, a.n));
    enum { BURST = 8 };
    int fds[BURST];
    for (int i = 0; i < BURST; i++) {
        fds[i] = raw_dial(dt_ps_server_port(s));
        raw_hello(fds[i], "secret", 0, 1);
    }
    for (int i = 0; i < BURST; i++) {
        uint8_t h[DT__PS_HDR];
        size_t got = 0;
        while (got < sizeof h) {
            ssize_t k = recv(fds[i], h + got, sizeof h - got, 0);
            if (k <= 0) break;
            got += (size_t)k;
        }
        dt__ps_hdr hd = {0};
        if (got == sizeof h) dt__ps_hdr_decode(h, &hd);
        if (hd.type != DT__PS_OK) DT_FAIL("client %d: answered %d, not OK", i, hd.type);
    }
    for (int i = 0; i < BURST; i++)
        close(fds[i]);
    dt_ps_server_stop(s);
    model_free(&a);
    fclose(log);
}

/* A HELLO that trickles in a byte at a time (never idle for long) is closed at the
 * handshake's deadline, with the reason; a real client still gets in. */
static void test_trickled_hello_closed(void) {
    char lp[512];
    FILE *log = open_log("trickle.log", lp, sizeof lp);
    model a = {0};
    model_make(&a);
    fill_values(&a, 5);
    dt_ps_server *s = NULL;
    dt_ps_server_conf sc = server_conf(0, 1, optim_of(DT_OPTIM_SGD, 0), log);
    sc.hello_timeout_ms = 300;
    DT_CHECK_OK(dt_ps_server_start(&s, &sc, a.p, a.n));
    int fd = raw_dial(dt_ps_server_port(s));
    uint8_t hdr[DT__PS_HDR];
    dt__ps_hdr_encode(hdr, DT__PS_HELLO, 0, DT__PS_HELLO_MAX);
    raw_send(fd, hdr, sizeof hdr);
    /* a byte of the payload each time 20 ms pass without an answer: it would take 80 s */
    size_t sent = 0;
    for (; sent < DT__PS_HELLO_MAX; sent++) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 20) > 0) break; /* the PS answered (or closed) */
        if (send(fd, "x", 1, MSG_NOSIGNAL) != 1) break;
    }
    DT_CHECK(sent < DT__PS_HELLO_MAX);
    char text[1100];
    DT_CHECK(raw_until_closed(fd, text, sizeof text) == DT__PS_ERROR);
    if (!strstr(text, "no HELLO within 300 ms")) DT_FAIL("ERROR text \"%s\"", text);
    DT_CHECK(log_has(lp, "no HELLO within 300 ms"));
    close(fd);
    addrs ad;
    addrs_of(&ad, &s, 1);
    dt_ps_client_conf cc = client_conf(&ad, 1, "worker-0", log);
    dt_ps_client *c = NULL;
    DT_CHECK_OK(dt_ps_client_open(&c, &cc, a.p, a.n));
    DT_CHECK_OK(dt_ps_client_init(c, NULL));
    DT_CHECK_OK(dt_ps_client_pull(c, NULL));
    dt_ps_client_close(c);
    dt_ps_server_stop(s);
    model_free(&a);
    fclose(log);
}

static void test_shm_refusals(void) {
    char lp[512];
    FILE *log = open_log("shm.log", lp, sizeof lp);
    model a = {0}, b = {0};
    model_make(&a);
    model_make(&b);
    fill_values(&a, 5);
    dt_ps_server *s = NULL;
    dt_ps_server_conf sc = server_conf(0, 1, optim_of(DT_OPTIM_SGD, 0), log);
    DT_CHECK_OK(dt_ps_server_start(&s, &sc, a.p, a.n));
    int port = dt_ps_server_port(s);
    addrs ad;
    addrs_of(&ad, &s, 1);
    dt_ps_client_conf cc = client_conf(&ad, 1, "worker-0", log);
    dt_ps_client *ca = NULL;
    DT_CHECK_OK(dt_ps_client_open(&ca, &cc, a.p, a.n));
    DT_CHECK_OK(dt_ps_client_init(ca, NULL));

    const char *names[4] = {"fc1/kernel", "fc1/bias", "fc2/kernel", "fc2/bias"};
    dt_shape shapes[4];
    size_t floats = 0;
    for (int i = 0; i < 4; i++) {
        shapes[i] = a.p[i]->value.shape;
        floats += dt__ps_shm_floats(numel(a.p[i]));
    }
    uint64_t size = dt__ps_lane_size(floats);
    dt__shm seg;
    DT_CHECK_OK(dt__shm_create(&seg, "ps_test", size));
    uint8_t bad_nonce[DT__SHM_NONCE];
    memcpy(bad_nonce, seg.nonce, sizeof bad_nonce);
    bad_nonce[0] ^= 0xff;
    uint8_t frame[DT__PS_HDR];
    char text[1100];
    typedef struct shm_case {
        const char *what, *log_text;
        int kind; /* 0: declined, then a PULL over TCP works; 1: refused and closed */
        size_t n;
        uint8_t frame[1024];
    } shm_case;
    shm_case *cases = calloc(10, sizeof *cases);
    DT_CHECK(cases);
    int nc = 0;
    dt_shape wrong[4] = {shapes[0], shapes[1], shapes[2], shapes[3]};
    wrong[2] = dt_shape_make(2, (int64_t[]){4, 3});
    const uint64_t me = (uint64_t)getpid(), sfd = (uint64_t)seg.fd;
    cases[nc++] = (shm_case){
        "no such fd", "shared memory declined: shared memory: cannot open /proc/", 0, 0, {0}};
    cases[nc - 1].n =
        build_attach(cases[nc - 1].frame, me, 9999, size, seg.nonce, 4, names, shapes);
    cases[nc++] =
        (shm_case){"wrong nonce",
                   "is not the segment announced (its header differs); its tensors come over TCP",
                   0,
                   0,
                   {0}};
    cases[nc - 1].n = build_attach(cases[nc - 1].frame, me, sfd, size, bad_nonce, 4, names, shapes);
    cases[nc++] =
        (shm_case){"wrong shape", "ps-0: shm attach from intruder (127.0.0.1:", 1, 0, {0}};
    cases[nc - 1].n = build_attach(cases[nc - 1].frame, me, sfd, size, seg.nonce, 4, names, wrong);
    const char *order[4] = {names[1], names[0], names[2], names[3]};
    dt_shape oshapes[4] = {shapes[1], shapes[0], shapes[2], shapes[3]};
    cases[nc++] =
        (shm_case){"out of order", "tensor fc1/bias comes 0th, its place is 1", 1, 0, {0}};
    cases[nc - 1].n =
        build_attach(cases[nc - 1].frame, me, sfd, size, seg.nonce, 4, order, oshapes);
    cases[nc++] = (shm_case){
        "wrong size", "SHM_ATTACH: a segment of 64 bytes, the partition needs", 1, 0, {0}};
    cases[nc - 1].n = build_attach(cases[nc - 1].frame, me, sfd, 64, seg.nonce, 4, names, shapes);
    cases[nc++] = (shm_case){"lane before attach",
                             "SHM_PUSH_PULL before SHM_ATTACH: no shared memory on this connection",
                             1,
                             DT__PS_HDR,
                             {0}};
    dt__ps_hdr_encode(cases[nc - 1].frame, DT__PS_SHM_PUSH_PULL, 0, 0);
    cases[nc++] =
        (shm_case){"short attach", "SHM_ATTACH of 8 bytes (at least 44)", 1, DT__PS_HDR + 8, {0}};
    dt__ps_hdr_encode(cases[nc - 1].frame, DT__PS_SHM_ATTACH, 0, 8);
    cases[nc++] = (shm_case){"pull with a payload",
                             "SHM_PULL with a payload of 4 bytes (must be empty)",
                             1,
                             DT__PS_HDR + 4,
                             {0}};
    dt__ps_hdr_encode(cases[nc - 1].frame, DT__PS_SHM_PULL, 0, 4);
    for (int k = 0; k < nc; k++) {
        int fd = raw_dial(port);
        raw_hello(fd, "secret", 0, 1);
        dt__ps_hdr hd;
        DT_CHECK(raw_frame(fd, &hd) == DT__PS_OK);
        raw_send(fd, cases[k].frame, cases[k].n);
        if (cases[k].kind == 0) {
            if (raw_frame(fd, &hd) != DT__PS_SHM_DECLINED)
                DT_FAIL("%s: not answered SHM_DECLINED", cases[k].what);
            /* the connection goes on: a PULL over TCP gets the values */
            dt__ps_hdr_encode(frame, DT__PS_PULL, 0, 0);
            raw_send(fd, frame, DT__PS_HDR);
            if (raw_frame(fd, &hd) != DT__PS_VALUES)
                DT_FAIL("%s: PULL after the decline not answered VALUES", cases[k].what);
        } else {
            int last = raw_until_closed(fd, text, sizeof text);
            if (last != DT__PS_ERROR) DT_FAIL("%s: the last frame was %d", cases[k].what, last);
        }
        close(fd);
        if (!log_has(lp, cases[k].log_text))
            DT_FAIL("%s: the log lacks \"%s\"", cases[k].what, cases[k].log_text);
        DT_CHECK_OK(dt_ps_client_pull(ca, NULL));
    }
    DT_CHECK(log_has(lp, "tensor fc2/kernel: shape [4, 3] does not match [3, 4]"));
    /* nothing was applied, and the values are the initial ones */
    DT_CHECK(dt_ps_server_step(s) == 0);
    dt_ps_client *cb = NULL;
    DT_CHECK_OK(dt_ps_client_open(&cb, &cc, b.p, b.n));
    DT_CHECK_OK(dt_ps_client_pull(cb, NULL));
    DT_CHECK(same_values(&a, &b));
    dt_ps_client_close(cb);
    free(cases);
    dt__shm_free(&seg);
    dt_ps_client_close(ca);
    dt_ps_server_stop(s);
    model_free(&a);
    model_free(&b);
    fclose(log);
}

/* The lane's bells from a raw client that attached a segment of its own: a lane frame on the
 * socket (no ring) is still answered on the socket, a ring by the reply bell with the
 * values in the segment, and a ring of a type that is no lane request is refused (ERROR,
 * closed, logged). */
static void test_shm_bells(void) {
    char lp[512];
    FILE *log = open_log("bells.log", lp, sizeof lp);
    model a = {0};
    model_make(&a);
    fill_values(&a, 5);
    addrs ad;
    dt_ps_server *s = NULL;
    one_ps_initialized(&a, optim_of(DT_OPTIM_SGD, 0), log, &s, &ad);
    const char *names[4] = {"fc1/kernel", "fc1/bias", "fc2/kernel", "fc2/bias"};
    dt_shape shapes[4];
    size_t floats = 0;
    for (int i = 0; i < 4; i++) {
        shapes[i] = a.p[i]->value.shape;
        floats += dt__ps_shm_floats(numel(a.p[i]));
    }
    dt__shm seg;
    DT_CHECK_OK(dt__shm_create(&seg, "ps_test", dt__ps_lane_size(floats)));
    dt__ps_lane_ctl *ctl = dt__ps_lane_ctl_of(&seg);
    const float *vals = dt__ps_lane_grads(&seg) + floats;
    uint8_t frame[1024];
    size_t n = build_attach(frame, (uint64_t)getpid(), (uint64_t)seg.fd, seg.size, seg.nonce, 4,
                            names, shapes);
    int fd = raw_dial(dt_ps_server_port(s));
    raw_hello(fd, "secret", 0, 1);
    dt__ps_hdr hd;
    DT_CHECK(raw_frame(fd, &hd) == DT__PS_OK);
    raw_send(fd, frame, n);
    DT_CHECK(raw_frame(fd, &hd) == DT__PS_OK); /* attached */
    /* a lane frame on the socket: answered there */
    dt__ps_hdr_encode(frame, DT__PS_SHM_PULL, 0, 0);
    raw_send(fd, frame, DT__PS_HDR);
    DT_CHECK(raw_frame(fd, &hd) == DT__PS_SHM_VALUES && hd.arg == 0);
    DT_CHECK(memcmp(vals, a.p[0]->value.data, (size_t)numel(a.p[0]) * 4) == 0);
    /* rung: answered by the reply bell, nothing on the socket */
    memset((void *)vals, 0, (size_t)numel(a.p[0]) * 4);
    dt__ps_bell_ring(&ctl->req, 1, DT__PS_SHM_PULL, 0);
    while (atomic_load(&ctl->rep.count) != 1)
        dt__ps_bell_sleep(&ctl->rep, 0, 10 * 1000 * 1000L);
    DT_CHECK(ctl->rep.type == DT__PS_SHM_VALUES && ctl->rep.arg == 0);
    DT_CHECK(memcmp(vals, a.p[0]->value.data, (size_t)numel(a.p[0]) * 4) == 0);
    struct pollfd pf = {.fd = fd, .events = POLLIN};
    DT_CHECK(poll(&pf, 1, 0) == 0);
    /* a ring that is no lane request */
    dt__ps_bell_ring(&ctl->req, 2, DT__PS_SAVE, 0);
    char text[1100];
    DT_CHECK(raw_until_closed(fd, text, sizeof text) == DT__PS_ERROR);
    DT_CHECK(log_has(lp, "the request bell rung with type 8 (not a lane request)"));
    close(fd);
    DT_CHECK(dt_ps_server_step(s) == 0);
    dt__shm_free(&seg);
    dt_ps_server_stop(s);
    model_free(&a);
    fclose(log);
}

/* A drain (a stopped PS: it reads no more, then saves) ends a lane client's stream of rung
 * pushes, which never give the connection's thread a quiet moment to look at its socket: the
 * drain returns, and no push is applied after it. */
typedef struct drain_pusher {
    const addrs *ad;
    FILE *log;
    _Atomic int pushes;
    int failed; /* its last push failed: the PS is gone */
} drain_pusher;

static void *drain_push_main(void *arg) {
    drain_pusher *d = arg;
    model m = {0};
    model_make(&m);
    fill_grads(&m, 10);
    dt_ps_client_conf cc = client_conf(d->ad, 1, "worker-0", d->log);
    cc.retry_ms = 300; /* the drained PS takes no new connection: give up soon */
    dt_ps_client *c = NULL;
    if (dt_ps_client_open(&c, &cc, m.p, m.n) == DT_OK) {
        int64_t step;
        while (dt_ps_client_push_pull(c, &step) == DT_OK)
            atomic_fetch_add(&d->pushes, 1);
        d->failed = 1;
        dt_ps_client_close(c);
    }
    model_free(&m);
    return NULL;
}

static void test_drain_while_pushing(void) {
    char lp[512];
    FILE *log = open_log("drain.log", lp, sizeof lp);
    model a = {0};
    model_make(&a);
    fill_values(&a, 3);
    addrs ad;
    dt_ps_server *s = NULL;
    one_ps_initialized(&a, optim_of(DT_OPTIM_SGD, 0), log, &s, &ad);
    drain_pusher d = {.ad = &ad, .log = log};
    pthread_t th;
    DT_CHECK(pthread_create(&th, NULL, drain_push_main, &d) == 0);
    while (atomic_load(&d.pushes) < 50) /* pushing through the lane */
        sched_yield();
    int64_t saved = 0;
    DT_CHECK_OK(dt_ps_server_drain(s, &saved, NULL, 0));
    int64_t at_drain = dt_ps_server_step(s);
    pthread_join(th, NULL);
    DT_CHECK(d.failed);
    DT_CHECK(at_drain >= 50 && dt_ps_server_step(s) == at_drain);
    DT_CHECK(log_has(lp, "worker-0 (127.0.0.1:") && log_has(lp, "tensors through shared memory"));
    dt_ps_server_stop(s);
    model_free(&a);
    fclose(log);
}

static void test_client_conf_errors(void) {
    model a = {0};
    model_make(&a);
    dt_ps_client *c = NULL;
    const char *bad_addr[1] = {"localhost"};
    dt_ps_client_conf cc = {.addrs = bad_addr, .nps = 1, .token = "t"};
    DT_CHECK_ERR(dt_ps_client_open(&c, &cc, a.p, a.n), DT_ERR_ARG,
                 "\"localhost\" is not host:port");
    const char *ok[1] = {"127.0.0.1:1"};
    cc.addrs = ok;
    cc.max_frame = 64;
    DT_CHECK_ERR(dt_ps_client_open(&c, &cc, a.p, a.n), DT_ERR_ARG, "exceed max_frame 64");
    cc.max_frame = 0;
    cc.wire_dtype = (dt_ps_wire_dtype)5;
    DT_CHECK_ERR(dt_ps_client_open(&c, &cc, a.p, a.n), DT_ERR_ARG,
                 "wire_dtype 5 is neither float32 nor bfloat16");
    cc.wire_dtype = DT_PS_WIRE_F32;
    /* nothing listens: gives up after retry_ms */
    cc.max_frame = 0;
    cc.retry_ms = 200;
    char lp[512];
    cc.log = open_log("noserver.log", lp, sizeof lp);
    DT_CHECK_OK(dt_ps_client_open(&c, &cc, a.p, a.n));
    DT_CHECK_ERR(dt_ps_client_pull(c, NULL), DT_ERR_NETWORK, "cannot connect");
    dt_ps_client_close(c);
    fclose(cc.log);
    dt_ps_server *s = NULL;
    dt_ps_server_conf sc = server_conf(2, 2, optim_of(DT_OPTIM_SGD, 0), NULL);
    DT_CHECK_ERR(dt_ps_server_start(&s, &sc, a.p, a.n), DT_ERR_ARG, "index 2 of nps 2");
    model_free(&a);
}

/* ---- checkpoints and restarts ---- */

static int count_ckpts(const char *dir) {
    int n = 0;
    char path[600];
    for (int step = 0; step < 20; step++) {
        snprintf(path, sizeof path, "%s/ckpt-%010d.safetensors", dir, step);
        struct stat st;
        n += stat(path, &st) == 0;
    }
    return n;
}

static void test_save_restore(void) {
    char lp[512], dir[512];
    FILE *log = open_log("save.log", lp, sizeof lp);
    snprintf(dir, sizeof dir, "%s/ckpt-ps", dt_test_tmpdir());
    model w = {0}, r = {0};
    model_make(&w);
    model_make(&r);
    fill_values(&w, 8);
    fill_values(&r, 8);
    dt_optim_conf oc = optim_of(DT_OPTIM_ADAM, 0.01f);
    dt_ps_server *s = NULL;
    dt_ps_client *c = NULL;
    dt_optim *ref = NULL;
    dt_ps_server_conf sc = server_conf(0, 1, oc, log);
    sc.ckpt_dir = dir;
    sc.keep = 2;
    DT_CHECK_OK(dt_ps_server_start(&s, &sc, w.p, w.n));
    DT_CHECK_OK(dt_optim_init(&ref, &oc, r.p, r.n));
    addrs ad;
    addrs_of(&ad, &s, 1);
    dt_ps_client_conf cc = client_conf(&ad, 1, "chief-0", log);
    DT_CHECK_OK(dt_ps_client_open(&c, &cc, w.p, w.n));
    DT_CHECK_OK(dt_ps_client_init(c, NULL));
    for (int it = 0; it < 3; it++) {
        fill_grads(&w, 40 + it);
        fill_grads(&r, 40 + it);
        DT_CHECK_OK(dt_ps_client_push_pull(c, NULL));
        dt_optim_step(ref, NULL);
        DT_CHECK_OK(dt_ps_client_save(c));
    }
    DT_CHECK(count_ckpts(dir) == 2); /* keep = 2 of steps 1, 2, 3 */
    dt_ps_client_close(c);
    dt_ps_server_stop(s);

    /* a new server on the same directory: values, slots and step come back */
    model v = {0};
    model_make(&v);
    DT_CHECK_OK(dt_ps_server_start(&s, &sc, w.p, w.n));
    DT_CHECK(dt_ps_server_step(s) == 3);
    addrs_of(&ad, &s, 1);
    DT_CHECK_OK(dt_ps_client_open(&c, &cc, v.p, v.n));
    int64_t step = 0;
    DT_CHECK_OK(dt_ps_client_pull(c, &step));
    DT_CHECK(step == 3);
    DT_CHECK(same_values(&v, &r));
    int taken = -1;
    DT_CHECK_OK(dt_ps_client_init(c, &taken));
    DT_CHECK(taken == 0);
    fill_grads(&v, 50);
    fill_grads(&r, 50);
    DT_CHECK_OK(dt_ps_client_push_pull(c, &step));
    dt_optim_step(ref, NULL);
    DT_CHECK(step == 4);
    DT_CHECK(same_values(&v, &r)); /* Adam's m and v were restored exactly */
    dt_ps_client_close(c);
    dt_ps_server_stop(s);

    /* a model that does not match the checkpoint: refused, naming the tensor */
    model m2 = {0};
    model_make(&m2);
    m2.p[3]->value.shape = m2.p[3]->grad.shape = dt_shape_make(1, (int64_t[]){5});
    s = NULL;
    DT_CHECK_ERR(dt_ps_server_start(&s, &sc, m2.p, m2.n), DT_ERR_FORMAT,
                 "tensor fc2/bias: shape [4] does not match [5]");
    DT_CHECK(s == NULL);
    /* another partition's layout */
    sc.nps = 2;
    DT_CHECK_ERR(dt_ps_server_start(&s, &sc, w.p, w.n), DT_ERR_FORMAT,
                 "a checkpoint of partition 0 of 1, this is partition 0 of 2");
    model_free(&m2);
    model_free(&v);
    dt_optim_free(ref);
    model_free(&w);
    model_free(&r);
    fclose(log);
}

/* A PS restarted from its checkpoint: the client reconnects and the pull brings the saved
 * values back; with zero_copy the params move to the new connection's segment, carrying
 * what they held, and are back in their own buffers at close. */
static void check_client_survives_restart(int zero_copy) {
    char lp[512], clp[512], dir[512];
    FILE *log = open_log("restart.log", lp, sizeof lp);
    FILE *clog = open_log("restart-client.log", clp, sizeof clp);
    snprintf(dir, sizeof dir, "%s/ckpt-restart-%d", dt_test_tmpdir(), zero_copy);
    model w = {0}, v = {0};
    model_make(&w);
    model_make(&v);
    fill_values(&w, 9);
    dt_ps_server *s = NULL;
    dt_ps_client *c = NULL;
    dt_ps_server_conf sc = server_conf(0, 1, optim_of(DT_OPTIM_SGD, 0), log);
    sc.ckpt_dir = dir;
    DT_CHECK_OK(dt_ps_server_start(&s, &sc, w.p, w.n));
    addrs ad;
    addrs_of(&ad, &s, 1);
    dt_ps_client_conf cc = client_conf(&ad, 1, "worker-0", clog);
    cc.zero_copy = zero_copy;
    float *own[16];
    for (int i = 0; i < w.n; i++) {
        own[2 * i] = w.p[i]->value.data;
        own[2 * i + 1] = w.p[i]->grad.data;
    }
    DT_CHECK_OK(dt_ps_client_open(&c, &cc, w.p, w.n));
    DT_CHECK_OK(dt_ps_client_init(c, NULL));
    fill_grads(&w, 60);
    DT_CHECK_OK(dt_ps_client_push_pull(c, NULL));
    DT_CHECK_OK(dt_ps_client_save(c));
    for (int i = 0; i < w.n; i++)
        memcpy(v.p[i]->value.data, w.p[i]->value.data, (size_t)numel(w.p[i]) * 4);
    sc.port = dt_ps_server_port(s);
    dt_ps_server_stop(s);
    DT_CHECK_OK(dt_ps_server_start(&s, &sc, w.p, w.n));
    /* set before the reconnect, which the push makes: a zero-copy client carries the
     * gradients and the values from the old segment to the new one */
    fill_values(&w, 99);
    fill_grads(&w, 61);
    model x = {0}; /* what the client holds now, apart from it */
    model_make(&x);
    fill_grads(&x, 61);
    for (int i = 0; i < w.n; i++)
        memcpy(x.p[i]->value.data, w.p[i]->value.data, (size_t)numel(w.p[i]) * 4);
    int64_t step = 0;
    DT_CHECK_OK(dt_ps_client_push(c, &step)); /* the PS came back at step 1 */
    DT_CHECK(step == 2);
    DT_CHECK(log_has(clp, "worker-0: reconnected to ps-0 (127.0.0.1:"));
    DT_CHECK(own_buffers(&w, own) == !zero_copy);
    DT_CHECK(same_values(&w, &x)); /* a push leaves the client's values as they were */
    /* the pull brings the checkpointed values with the pushed gradients applied */
    DT_CHECK_OK(dt_ps_client_pull(c, &step));
    DT_CHECK(step == 2);
    for (int i = 0; i < w.n; i++) /* plain SGD, lr 0.1, no decay */
        for (int64_t j = 0; j < numel(w.p[i]); j++) {
            float want = v.p[i]->value.data[j] - 0.1f * x.p[i]->grad.data[j];
            DT_CHECK(fabsf(w.p[i]->value.data[j] - want) <= 1e-6f * (1.0f + fabsf(want)));
        }
    model_free(&x);
    for (int i = 0; i < w.n; i++)
        memcpy(v.p[i]->value.data, w.p[i]->value.data, (size_t)numel(w.p[i]) * 4);
    dt_ps_client_close(c);
    DT_CHECK(own_buffers(&w, own));
    DT_CHECK(same_values(&w, &v));
    dt_ps_server_stop(s);
    model_free(&w);
    model_free(&v);
    fclose(log);
    fclose(clog);
}

static void test_client_survives_restart(void) {
    check_client_survives_restart(0);
    check_client_survives_restart(1);
}

DT_TEST_MAIN(DT_T(test_partition_rule), DT_T(test_partition_balance), DT_T(test_init_then_pull),
             DT_T(test_async_sgd_exact), DT_T(test_async_adam_exact), DT_T(test_two_ps_split),
             DT_T(test_more_ps_than_variables), DT_T(test_pull_waits_for_init),
             DT_T(test_sync_rounds), DT_T(test_sync_timeout_and_leave), DT_T(test_refusals),
             DT_T(test_shm_refusals), DT_T(test_shm_bells), DT_T(test_drain_while_pushing),
             DT_T(test_client_conf_errors),
             DT_T(test_save_restore),
             DT_T(test_client_survives_restart), DT_T(test_pending_connections_bounded),
             DT_T(test_trickled_hello_closed), DT_T(test_burst_of_clients_admitted),
             DT_T(test_bf16_conversion), DT_T(test_async_bf16),
             DT_T(test_concurrent_pushes))
