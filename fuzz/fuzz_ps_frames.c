/*
 * fuzz_ps_frames.c - libFuzzer harness: parameter-server frames (docs/WIRE.md) as a PS
 * reads them. One real PS (dt_ps_server_start, token "t", partition 0 of 1, two variables,
 * no shared memory) serves on 127.0.0.1 for the whole run; each input is one connection:
 * the bytes are sent, the sending side shut, and the harness reads the PS's answers until
 * it closes, so the input's handling is over before the next one starts. A push's header
 * arg is its gradients' dtype (float32, bfloat16, anything else refused): the seeds
 * (fuzz/make_seeds.c) have pushes of each.
 */
#include <netinet/in.h>
#include <sys/socket.h>

#include "dtrain/nn.h"
#include "dtrain/ps.h"
#include "fuzz-impl.h"

static dt_ps_server *server;

static dt_param *param_new(const char *name, int64_t a, int64_t b) {
    dt_param *p = calloc(1, sizeof *p);
    if (!p) abort();
    snprintf(p->name, sizeof p->name, "%s", name);
    p->value.shape = b ? dt_shape_make(2, (int64_t[]){a, b}) : dt_shape_make(1, (int64_t[]){a});
    p->grad.shape = p->value.shape;
    size_t n = (size_t)dt_shape_numel(&p->value.shape);
    if (!(p->value.data = calloc(n, 4)) || !(p->grad.data = calloc(n, 4))) abort();
    return p;
}

static void start(void) {
    dt_param *params[2] = {param_new("fc/kernel", 2, 3), param_new("fc/bias", 3, 0)};
    dt_optim_conf oc = {.kind = DT_OPTIM_SGD, .learning_rate = 0.1f};
    dt_optim_conf_defaults(&oc);
    dt_ps_server_conf sc = {.host = "127.0.0.1", .token = "t", .index = 0, .nps = 1,
                            .max_frame = 1 << 20, .optim = oc, .no_shm = 1,
                            .log = fopen("/dev/null", "w")};
    if (dt_ps_server_start(&server, &sc, params, 2) != DT_OK) {
        fprintf(stderr, "fuzz_ps_frames: %s\n", dt_errmsg());
        abort();
    }
    for (int i = 0; i < 2; i++) { /* the server copied names and shapes */
        free(params[i]->value.data);
        free(params[i]->grad.data);
        free(params[i]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!server) start();
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)dt_ps_server_port(server)),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        perror("fuzz_ps_frames: connect");
        abort();
    }
    size_t off = 0;
    while (off < size) { /* the PS may close early (a refusal): then the rest is not sent */
        ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);
        if (n <= 0) break;
        off += (size_t)n;
    }
    shutdown(fd, SHUT_WR);
    char buf[4096];
    while (recv(fd, buf, sizeof buf, 0) > 0) {
    }
    close(fd);
    dt_err_clear();
    return 0;
}
