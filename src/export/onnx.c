/*
 * onnx.c - a dtrain model as an ONNX model (IR 8, opset 17) for ONNX Runtime and friends.
 *
 * Design. The model is lowered in two passes. The first plans the graph: it walks the layers
 * and appends nodes to an array (op, inputs, output, attributes), writing the initializers
 * (weights, as raw little-endian float32) straight into their encoded form as it meets them.
 * The second encodes the planned nodes with the protobuf writer (pb-impl.h), bottom-up:
 * attributes into nodes, nodes and value infos into the graph, the graph into the model.
 * Planning first lets the last node's output take the graph output's name without an
 * Identity node.
 *
 * Layout. dtrain runs NHWC with HWIO kernels; ONNX's Conv and MaxPool want NCHW and OIHW. The
 * graph keeps dtrain's layout except between convolutions and pools: a Transpose to NCHW goes
 * before the first conv2d or maxpool2d of a run, and a Transpose back to NHWC before a
 * flatten (and at the end, when the model's output is an image), so that flatten yields
 * dtrain's NHWC order and dense kernels after it are used unchanged. Conv kernels are
 * transposed to OIHW here, once. A softmax over dtrain's last dimension (channels) is a
 * Softmax over axis 1 while the tensor is NCHW, axis -1 otherwise.
 *
 *   layer                 ONNX
 *   (norm)                Mul by scale, Add shift (each shaped as one sample, or scalars
 *                         when all equal; left out when 1 and 0)
 *   dense                 Gemm(x, kernel [in, out], bias) + activation
 *   conv2d                Conv(x, kernel OIHW, bias?) with explicit pads + activation
 *   maxpool2d             MaxPool with explicit pads
 *   flatten               Flatten(axis = 1)
 *   dropout               nothing (inference)
 *   activation            Relu, Tanh, Sigmoid, Softmax
 *   (softmax-CE model)    a final Softmax(axis = -1): the output is dt_model_predict's
 *
 * Padding: explicit pads [top, left, bottom, right] by the TensorFlow rules dtrain uses
 * (nn/window-impl.h): for `same`, total = max((out - 1) * s + k - n, 0), total / 2 before
 * and the odd one after. MaxPool in ONNX Runtime skips padded cells, as dtrain's does.
 *
 * Names: the graph's input is DT_EXPORT_INPUT_NAME, its output dt_export_output_name();
 * every other tensor is "<layer>/<what>" ("conv1/Conv", "conv1/kernel"), or "/<what>" for
 * what belongs to no layer ("/normalize/scale"), so that no two collide (layer names have
 * no '/').
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/assert-impl.h"
#include "core/file-impl.h"
#include "dtrain/export.h"
#include "core/pb-impl.h"
#include "nn/window-impl.h"

#define ONNX_IR_VERSION 8
#define ONNX_OPSET 17

/* ONNX field numbers (onnx.proto) */
enum {
    MODEL_IR_VERSION = 1,
    MODEL_PRODUCER_NAME = 2,
    MODEL_PRODUCER_VERSION = 3,
    MODEL_DOC_STRING = 6,
    MODEL_GRAPH = 7,
    MODEL_OPSET_IMPORT = 8,
    OPSET_DOMAIN = 1,
    OPSET_VERSION = 2,
    GRAPH_NODE = 1,
    GRAPH_NAME = 2,
    GRAPH_INITIALIZER = 5,
    GRAPH_INPUT = 11,
    GRAPH_OUTPUT = 12,
    NODE_INPUT = 1,
    NODE_OUTPUT = 2,
    NODE_NAME = 3,
    NODE_OP_TYPE = 4,
    NODE_ATTRIBUTE = 5,
    ATTR_NAME = 1,
    ATTR_I = 3,
    ATTR_INTS = 8,
    ATTR_TYPE = 20,
    TENSOR_DIMS = 1,
    TENSOR_DATA_TYPE = 2,
    TENSOR_NAME = 8,
    TENSOR_RAW_DATA = 9,
    VALUE_NAME = 1,
    VALUE_TYPE = 2,
    TYPE_TENSOR = 1,
    TYPE_TENSOR_ELEM_TYPE = 1,
    TYPE_TENSOR_SHAPE = 2,
    SHAPE_DIM = 1,
    DIM_VALUE = 1,
    DIM_PARAM = 2,
};
enum { ATTR_TYPE_INT = 2, ATTR_TYPE_INTS = 7 };
enum { DATA_TYPE_FLOAT = 1 };

#define NAME_LEN 96
#define NODE_MAX_INPUTS 3
#define NODE_MAX_ATTRS 4
#define ATTR_MAX_INTS 4

typedef struct onnx_attr {
    const char *name;
    int type; /* ATTR_TYPE_INT or ATTR_TYPE_INTS */
    int nints;
    int64_t ints[ATTR_MAX_INTS]; /* INT: ints[0] */
} onnx_attr;

typedef struct onnx_node {
    const char *op;
    char in[NODE_MAX_INPUTS][NAME_LEN];
    int nin;
    char out[NAME_LEN]; /* also the node's name */
    onnx_attr attr[NODE_MAX_ATTRS];
    int nattr;
} onnx_node;

typedef enum onnx_layout {
    LAYOUT_DTRAIN = 0, /* dtrain's own: NHWC images, flat vectors */
    LAYOUT_NCHW,       /* an image transposed for Conv and MaxPool */
} onnx_layout;

/* The graph being planned. */
typedef struct onnx_graph {
    onnx_node *nodes;
    int nnodes, cap;
    dt__pb_buf inits;   /* GraphProto.initializer fields, encoded */
    char cur[NAME_LEN]; /* the tensor the next node reads */
    onnx_layout layout; /* of cur */
} onnx_graph;

const char *dt_export_output_name(const dt_model *m) {
    return dt_model_loss_kind(m) == DT_LOSS_SOFTMAX_CROSS_ENTROPY ? "probabilities" : "output";
}

/* ---- planning ---- */

/* Append a node `op` that reads the current tensor and writes "<scope>/<what>", which
 * becomes the current tensor. */
static onnx_node *emit(onnx_graph *g, const char *op, const char *scope, const char *what) {
    DT_ASSERT(g->nnodes < g->cap); /* cap counts the most nodes any layer makes */
    onnx_node *n = &g->nodes[g->nnodes++];
    memset(n, 0, sizeof *n);
    n->op = op;
    snprintf(n->in[0], NAME_LEN, "%s", g->cur);
    n->nin = 1;
    snprintf(n->out, NAME_LEN, "%s/%s", scope, what);
    snprintf(g->cur, NAME_LEN, "%s", n->out);
    return n;
}

static void node_input(onnx_node *n, const char *name) {
    DT_ASSERT(n->nin < NODE_MAX_INPUTS);
    snprintf(n->in[n->nin++], NAME_LEN, "%s", name);
}

static void attr_ints(onnx_node *n, const char *name, const int64_t *v, int count) {
    DT_ASSERT(n->nattr < NODE_MAX_ATTRS && count <= ATTR_MAX_INTS);
    onnx_attr *a = &n->attr[n->nattr++];
    a->name = name;
    a->type = ATTR_TYPE_INTS;
    a->nints = count;
    memcpy(a->ints, v, (size_t)count * sizeof *v);
}

static void attr_int(onnx_node *n, const char *name, int64_t v) {
    attr_ints(n, name, &v, 1);
    n->attr[n->nattr - 1].type = ATTR_TYPE_INT;
}

/* An initializer "<scope>/<what>" of float32 values with dims (ndims 0: a scalar); name gets
 * the tensor's name. */
static void initializer(onnx_graph *g, const char *scope, const char *what, const int64_t *dims,
                        int ndims, const float *v, char name[NAME_LEN]) {
    dt__pb_buf t;
    dt__pb_init(&t);
    size_t n = 1;
    for (int i = 0; i < ndims; i++) {
        dt__pb_int(&t, TENSOR_DIMS, dims[i]);
        n *= (size_t)dims[i];
    }
    snprintf(name, NAME_LEN, "%s/%s", scope, what);
    dt__pb_int(&t, TENSOR_DATA_TYPE, DATA_TYPE_FLOAT);
    dt__pb_string(&t, TENSOR_NAME, name);
    dt__pb_float_array(&t, TENSOR_RAW_DATA, v, n);
    dt__pb_message(&g->inits, GRAPH_INITIALIZER, &t);
    dt__pb_free(&t);
}

static void to_nchw(onnx_graph *g, const char *scope) {
    if (g->layout == LAYOUT_NCHW) return;
    onnx_node *n = emit(g, "Transpose", scope, "to_nchw");
    attr_ints(n, "perm", (const int64_t[]){0, 3, 1, 2}, 4);
    g->layout = LAYOUT_NCHW;
}

static void to_nhwc(onnx_graph *g, const char *scope) {
    if (g->layout != LAYOUT_NCHW) return;
    onnx_node *n = emit(g, "Transpose", scope, "to_nhwc");
    attr_ints(n, "perm", (const int64_t[]){0, 2, 3, 1}, 4);
    g->layout = LAYOUT_DTRAIN;
}

static dt_err plan_activation(onnx_graph *g, int index, const char *scope, dt_act act) {
    switch (act) {
    case DT_ACT_NONE:
        return DT_OK;
    case DT_ACT_RELU:
        emit(g, "Relu", scope, "Relu");
        return DT_OK;
    case DT_ACT_TANH:
        emit(g, "Tanh", scope, "Tanh");
        return DT_OK;
    case DT_ACT_SIGMOID:
        emit(g, "Sigmoid", scope, "Sigmoid");
        return DT_OK;
    case DT_ACT_SOFTMAX: {
        /* dtrain's last dimension: the channels, axis 1 of an NCHW tensor */
        onnx_node *n = emit(g, "Softmax", scope, "Softmax");
        attr_int(n, "axis", g->layout == LAYOUT_NCHW ? 1 : -1);
        return DT_OK;
    }
    }
    return dt_err_set(DT_ERR_ARG, "layer %d (%s): activation %d cannot be exported to ONNX", index,
                      scope, (int)act);
}

/* Explicit pads of one spatial dimension, as dtrain pads it (nn/window-impl.h). */
static void window_pads(int64_t n, int64_t k, int64_t s, dt_padding padding, int64_t *before,
                        int64_t *after) {
    int64_t out, pb;
    int ok = dt__window_dim(n, k, s, padding, &out, &pb);
    DT_ASSERT(ok); /* the model was built */
    int64_t total = (out - 1) * s + k - n;
    if (total < 0) total = 0;
    *before = pb;
    *after = total - pb;
}

/* kernel_shape, strides and pads of a window over input (h, w, c). */
static void window_attrs(onnx_node *n, const dt_shape *in, const int64_t k[2], const int64_t s[2],
                         dt_padding padding) {
    int64_t pads[4];
    window_pads(in->dim[0], k[0], s[0], padding, &pads[0], &pads[2]);
    window_pads(in->dim[1], k[1], s[1], padding, &pads[1], &pads[3]);
    attr_ints(n, "kernel_shape", k, 2);
    attr_ints(n, "strides", s, 2);
    attr_ints(n, "pads", pads, 4);
}

/* The parameter "<layer>/<what>", which the layer must have. */
static dt_err layer_param(dt_model *m, int index, const char *layer, const char *what,
                          const dt_param **out) {
    char name[sizeof((dt_param *)0)->name];
    snprintf(name, sizeof name, "%s/%s", layer, what);
    *out = dt_model_find_param(m, name);
    if (!*out)
        return dt_err_set(DT_ERR_ARG, "layer %d (%s): the model has no parameter %s", index, layer,
                          name);
    return DT_OK;
}

static dt_err plan_dense(onnx_graph *g, dt_model *m, int index) {
    const dt_layer_conf *c = dt_model_layer_conf(m, index);
    const dt_param *k, *b = NULL;
    dt_err e = layer_param(m, index, c->name, "kernel", &k);
    if (!e && !c->no_bias) e = layer_param(m, index, c->name, "bias", &b);
    if (e) return e;
    DT_ASSERT(g->layout == LAYOUT_DTRAIN && k->value.shape.ndim == 2); /* dense takes [N, in] */
    char kname[NAME_LEN], bname[NAME_LEN];
    initializer(g, c->name, "kernel", k->value.shape.dim, 2, k->value.data, kname);
    if (b) initializer(g, c->name, "bias", b->value.shape.dim, 1, b->value.data, bname);
    onnx_node *n = emit(g, "Gemm", c->name, "Gemm");
    node_input(n, kname);
    if (b) node_input(n, bname);
    return plan_activation(g, index, c->name, c->activation);
}

static dt_err plan_conv2d(onnx_graph *g, dt_model *m, int index) {
    const dt_layer_conf *c = dt_model_layer_conf(m, index);
    const dt_shape *in = dt_model_layer_input(m, index);
    const dt_param *k, *b = NULL;
    dt_err e = layer_param(m, index, c->name, "kernel", &k);
    if (!e && !c->no_bias) e = layer_param(m, index, c->name, "bias", &b);
    if (e) return e;
    const int64_t *d = k->value.shape.dim; /* HWIO: kh, kw, c, f */
    DT_ASSERT(k->value.shape.ndim == 4);
    int64_t kh = d[0], kw = d[1], ch = d[2], f = d[3];
    float *oihw = malloc((size_t)(kh * kw * ch * f) * sizeof *oihw);
    if (!oihw) return dt_err_set(DT_ERR_NOMEM, "layer %d (%s): out of memory", index, c->name);
    for (int64_t o = 0; o < f; o++)
        for (int64_t i = 0; i < ch; i++)
            for (int64_t y = 0; y < kh; y++)
                for (int64_t x = 0; x < kw; x++)
                    oihw[((o * ch + i) * kh + y) * kw + x] =
                        k->value.data[((y * kw + x) * ch + i) * f + o];
    char kname[NAME_LEN], bname[NAME_LEN];
    initializer(g, c->name, "kernel", (const int64_t[]){f, ch, kh, kw}, 4, oihw, kname);
    free(oihw);
    if (b) initializer(g, c->name, "bias", b->value.shape.dim, 1, b->value.data, bname);
    to_nchw(g, c->name);
    onnx_node *n = emit(g, "Conv", c->name, "Conv");
    node_input(n, kname);
    if (b) node_input(n, bname);
    int64_t s[2] = {c->stride[0] ? c->stride[0] : 1, c->stride[1] ? c->stride[1] : 1};
    window_attrs(n, in, (const int64_t[]){kh, kw}, s, c->padding);
    return plan_activation(g, index, c->name, c->activation);
}

static void plan_maxpool2d(onnx_graph *g, dt_model *m, int index) {
    const dt_layer_conf *c = dt_model_layer_conf(m, index);
    int64_t k[2], s[2];
    for (int i = 0; i < 2; i++) { /* maxpool2d.c's defaults */
        k[i] = c->kernel[i] ? c->kernel[i] : 2;
        s[i] = c->stride[i] ? c->stride[i] : k[i];
    }
    to_nchw(g, c->name);
    onnx_node *n = emit(g, "MaxPool", c->name, "MaxPool");
    window_attrs(n, dt_model_layer_input(m, index), k, s, c->padding);
}

static dt_err plan_layer(onnx_graph *g, dt_model *m, int index) {
    const dt_layer_conf *c = dt_model_layer_conf(m, index);
    switch (c->kind) {
    case DT_LAYER_DENSE:
        return plan_dense(g, m, index);
    case DT_LAYER_CONV2D:
        return plan_conv2d(g, m, index);
    case DT_LAYER_MAXPOOL2D:
        plan_maxpool2d(g, m, index);
        return DT_OK;
    case DT_LAYER_FLATTEN:
        to_nhwc(g, c->name);
        attr_int(emit(g, "Flatten", c->name, "Flatten"), "axis", 1);
        return DT_OK;
    case DT_LAYER_DROPOUT:
        return DT_OK; /* the identity at inference */
    case DT_LAYER_ACTIVATION:
        return plan_activation(g, index, c->name, c->activation);
    }
    return dt_err_set(DT_ERR_ARG, "layer %d (%s): a layer of kind %d cannot be exported to ONNX",
                      index, c->name, (int)c->kind);
}

static int all_equal(const float *v, int64_t n) {
    for (int64_t i = 1; i < n; i++)
        if (v[i] != v[0]) return 0;
    return 1;
}

/* One affine step of the input normalization: Mul (or Add) by v, shaped as one sample or a
 * scalar; nothing when every value is the identity's. */
static void plan_norm_op(onnx_graph *g, const dt_shape *in, const float *v, int64_t n,
                         const char *op, const char *what, float identity) {
    int uniform = all_equal(v, n);
    if (uniform && v[0] == identity) return;
    char name[NAME_LEN];
    initializer(g, "/normalize", what, in->dim, uniform ? 0 : in->ndim, v, name);
    node_input(emit(g, op, "/normalize", op), name);
}

static dt_err plan_norm(onnx_graph *g, const dt_model *m, const dt_input_norm *norm) {
    const dt_shape *in = dt_model_input_shape(m);
    int64_t n = dt_shape_numel(in);
    if (norm->n != n || !norm->scale || !norm->shift)
        return dt_err_set(DT_ERR_ARG,
                          "input normalization: %lld features, but the model's input has %lld",
                          (long long)norm->n, (long long)n);
    plan_norm_op(g, in, norm->scale, n, "Mul", "scale", 1.0f);
    plan_norm_op(g, in, norm->shift, n, "Add", "shift", 0.0f);
    return DT_OK;
}

static dt_err plan_graph(onnx_graph *g, dt_model *m, const dt_input_norm *norm) {
    int nl = dt_model_num_layers(m);
    /* at most 3 nodes a layer (Transpose, op, activation), 2 for the normalization and 2 at
     * the end (Transpose, Softmax), or an Identity */
    g->cap = 3 * nl + 5;
    if (!(g->nodes = calloc((size_t)g->cap, sizeof *g->nodes)))
        return dt_err_set(DT_ERR_NOMEM, "ONNX export: out of memory");
    snprintf(g->cur, NAME_LEN, "%s", DT_EXPORT_INPUT_NAME);
    g->layout = LAYOUT_DTRAIN;
    dt_err e;
    if (norm && (e = plan_norm(g, m, norm))) return e;
    for (int i = 0; i < nl; i++)
        if ((e = plan_layer(g, m, i))) return e;
    to_nhwc(g, "");
    if (dt_model_loss_kind(m) == DT_LOSS_SOFTMAX_CROSS_ENTROPY)
        attr_int(emit(g, "Softmax", "", "softmax"), "axis", -1); /* what predict applies */
    if (g->nnodes == 0) emit(g, "Identity", "", "identity");
    /* the last node writes the graph's output */
    snprintf(g->nodes[g->nnodes - 1].out, NAME_LEN, "%s", dt_export_output_name(m));
    return DT_OK;
}

/* ---- encoding ---- */

static void encode_attr(dt__pb_buf *node, const onnx_attr *a, dt__pb_buf *tmp) {
    dt__pb_clear(tmp);
    dt__pb_string(tmp, ATTR_NAME, a->name);
    if (a->type == ATTR_TYPE_INT)
        dt__pb_int(tmp, ATTR_I, a->ints[0]);
    else
        for (int i = 0; i < a->nints; i++) /* unpacked repeated int64 */
            dt__pb_int(tmp, ATTR_INTS, a->ints[i]);
    dt__pb_int(tmp, ATTR_TYPE, a->type);
    dt__pb_message(node, NODE_ATTRIBUTE, tmp);
}

static void encode_node(dt__pb_buf *graph, const onnx_node *n, dt__pb_buf *node, dt__pb_buf *attr) {
    dt__pb_clear(node);
    for (int i = 0; i < n->nin; i++)
        dt__pb_string(node, NODE_INPUT, n->in[i]);
    dt__pb_string(node, NODE_OUTPUT, n->out);
    dt__pb_string(node, NODE_NAME, n->out);
    dt__pb_string(node, NODE_OP_TYPE, n->op);
    for (int i = 0; i < n->nattr; i++)
        encode_attr(node, &n->attr[i], attr);
    dt__pb_message(graph, GRAPH_NODE, node);
}

/* A ValueInfoProto: float32 tensor `name` of shape [batch, per_sample...]. */
static void encode_value_info(dt__pb_buf *graph, uint32_t field, const char *name,
                              const dt_shape *per_sample) {
    dt__pb_buf shape, tensor, type, vi, dim;
    dt__pb_init(&shape);
    dt__pb_init(&tensor);
    dt__pb_init(&type);
    dt__pb_init(&vi);
    dt__pb_init(&dim);
    dt__pb_string(&dim, DIM_PARAM, "batch");
    dt__pb_message(&shape, SHAPE_DIM, &dim);
    for (int i = 0; i < per_sample->ndim; i++) {
        dt__pb_clear(&dim);
        dt__pb_int(&dim, DIM_VALUE, per_sample->dim[i]);
        dt__pb_message(&shape, SHAPE_DIM, &dim);
    }
    dt__pb_int(&tensor, TYPE_TENSOR_ELEM_TYPE, DATA_TYPE_FLOAT);
    dt__pb_message(&tensor, TYPE_TENSOR_SHAPE, &shape);
    dt__pb_message(&type, TYPE_TENSOR, &tensor);
    dt__pb_string(&vi, VALUE_NAME, name);
    dt__pb_message(&vi, VALUE_TYPE, &type);
    dt__pb_message(graph, field, &vi);
    dt__pb_free(&dim);
    dt__pb_free(&vi);
    dt__pb_free(&type);
    dt__pb_free(&tensor);
    dt__pb_free(&shape);
}

static void encode_model(dt__pb_buf *out, const onnx_graph *g, const dt_model *m, const char *doc) {
    dt__pb_buf graph, node, attr, opset;
    dt__pb_init(&graph);
    dt__pb_init(&node);
    dt__pb_init(&attr);
    dt__pb_init(&opset);
    for (int i = 0; i < g->nnodes; i++)
        encode_node(&graph, &g->nodes[i], &node, &attr);
    dt__pb_string(&graph, GRAPH_NAME, "dtrain");
    if (g->inits.failed) graph.failed = 1;
    dt__pb_raw(&graph, g->inits.data, g->inits.len); /* already GraphProto.initializer fields */
    encode_value_info(&graph, GRAPH_INPUT, DT_EXPORT_INPUT_NAME, dt_model_input_shape(m));
    encode_value_info(&graph, GRAPH_OUTPUT, dt_export_output_name(m), dt_model_output_shape(m));

    dt__pb_int(out, MODEL_IR_VERSION, ONNX_IR_VERSION);
    dt__pb_string(out, MODEL_PRODUCER_NAME, "dtrain");
    dt__pb_string(out, MODEL_PRODUCER_VERSION, DT_VERSION);
    if (doc) dt__pb_string(out, MODEL_DOC_STRING, doc);
    dt__pb_message(out, MODEL_GRAPH, &graph);
    dt__pb_string(&opset, OPSET_DOMAIN, ""); /* ai.onnx */
    dt__pb_int(&opset, OPSET_VERSION, ONNX_OPSET);
    dt__pb_message(out, MODEL_OPSET_IMPORT, &opset);
    dt__pb_free(&opset);
    dt__pb_free(&attr);
    dt__pb_free(&node);
    dt__pb_free(&graph);
}

dt_err dt_onnx_write(const char *path, dt_model *model, const dt_input_norm *norm,
                     const char *doc) {
    onnx_graph g = {0};
    dt__pb_buf out;
    dt__pb_init(&g.inits);
    dt__pb_init(&out);
    dt_err e = plan_graph(&g, model, norm);
    if (e) {
        dt_err_wrap(e, "%s", path);
        goto end;
    }
    encode_model(&out, &g, model, doc);
    if ((e = dt__pb_status(&out))) {
        dt_err_wrap(e, "%s", path);
        goto end;
    }
    e = dt__write_file_atomic(path, out.data, out.len);
end:
    dt__pb_free(&out);
    dt__pb_free(&g.inits);
    free(g.nodes);
    return e;
}
