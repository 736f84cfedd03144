/* kube_test.c - connecting as kubectl does (kube_client.c): which kubeconfig, which context,
 * server, namespace and credentials are taken, and the errors for what cannot be used; and
 * YAML read as Kubernetes reads it (dt__yval_to_json). Requests, watches and the backend
 * run against the stand-in API server in tests/kube_job_test.sh. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/kube-impl.h"
#include "spec/yaml_doc-impl.h"
#include "testing/dt_test.h"

static char dir[] = "/tmp/dtrain-kube-test-XXXXXX";

static const char *write_file(const char *name, const char *text) {
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    return path;
}

/* "-----BEGIN CERTIFICATE-----\nx\n" in base64 */
#define CA_B64 "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCngK"

static const char two_contexts[] =
    "apiVersion: v1\n"
    "kind: Config\n"
    "current-context: dev\n"
    "clusters:\n"
    "- name: c1\n"
    "  cluster: {server: 'https://10.0.0.1:6443/', certificate-authority-data: " CA_B64 "}\n"
    "- name: c2\n"
    "  cluster: {server: 'https://k8s.example:443', insecure-skip-tls-verify: true}\n"
    "contexts:\n"
    "- name: dev\n"
    "  context: {cluster: c1, user: u1, namespace: team-a}\n"
    "- name: prod\n"
    "  context: {cluster: c2, user: u2}\n"
    "users:\n"
    "- name: u1\n"
    "  user: {token: s3cret-token}\n"
    "- name: u2\n"
    "  user: {client-certificate: cert.pem, client-key: key.pem}\n";

static void test_current_context(void) {
    dt__kube *k;
    dt__kube_conn c = {.kubeconfig = write_file("config", two_contexts)};
    DT_CHECK_OK(dt__kube_connect(&k, &c));
    DT_CHECK(!strcmp(dt__kube_server(k), "https://10.0.0.1:6443")); /* the '/' dropped */
    DT_CHECK(!strcmp(dt__kube_namespace(k), "team-a"));
    DT_CHECK(strstr(dt__kube_source(k), "context dev"));
    DT_CHECK(!strstr(dt__kube_source(k), "s3cret")); /* never in messages */
    dt__kube_free(k);
}

static void test_named_context_and_files(void) {
    write_file("cert.pem", "-----BEGIN CERTIFICATE-----\ny\n");
    write_file("key.pem", "-----BEGIN PRIVATE KEY-----\nz\n");
    dt__kube *k;
    dt__kube_conn c = {.kubeconfig = write_file("config", two_contexts), .context = "prod"};
    DT_CHECK_OK(dt__kube_connect(&k, &c));
    DT_CHECK(!strcmp(dt__kube_server(k), "https://k8s.example:443"));
    DT_CHECK(!strcmp(dt__kube_namespace(k), "default"));
    dt__kube_free(k);
    /* the key file missing: named */
    char path[600];
    snprintf(path, sizeof path, "%s/key.pem", dir);
    unlink(path);
    DT_CHECK_ERR(dt__kube_connect(&k, &c), DT_ERR_IO, "key.pem");
}

static void test_errors(void) {
    dt__kube *k;
    dt__kube_conn c = {.kubeconfig = write_file("config", two_contexts), .context = "nope"};
    DT_CHECK_ERR(dt__kube_connect(&k, &c), DT_ERR_SPEC, "context \"nope\" not found");
    c.context = NULL;
    c.kubeconfig = write_file("exec", "current-context: x\n"
                                      "clusters: [{name: c, cluster: {server: 'https://a'}}]\n"
                                      "contexts: [{name: x, context: {cluster: c, user: e}}]\n"
                                      "users: [{name: e, user: {exec: {command: aws}}}]\n");
    DT_CHECK_ERR(dt__kube_connect(&k, &c), DT_ERR_SPEC, "exec or auth-provider");
    c.kubeconfig = write_file("b64", "current-context: x\n"
                                     "clusters: [{name: c, cluster: {server: 'https://a', "
                                     "certificate-authority-data: '%%%'}}]\n"
                                     "contexts: [{name: x, context: {cluster: c, user: e}}]\n"
                                     "users: [{name: e, user: {token: t}}]\n");
    DT_CHECK_ERR(dt__kube_connect(&k, &c), DT_ERR_SPEC, "certificate-authority-data: not base64");
    /* a certificate file that is a device is refused, not read without end (fuzz_kubeconfig) */
    c.kubeconfig = write_file("devzero", "current-context: x\n"
                                         "clusters: [{name: c, cluster: {server: 'https://a', "
                                         "certificate-authority: /dev/zero}}]\n"
                                         "contexts: [{name: x, context: {cluster: c, user: e}}]\n"
                                         "users: [{name: e, user: {token: t}}]\n");
    DT_CHECK_ERR(dt__kube_connect(&k, &c), DT_ERR_IO, "/dev/zero: a character device, not a regular file");
    c.kubeconfig = write_file("noserver", "current-context: x\n"
                                          "contexts: [{name: x, context: {cluster: c}}]\n");
    DT_CHECK_ERR(dt__kube_connect(&k, &c), DT_ERR_SPEC, "has no server");
    c.kubeconfig = write_file("list", "- a\n- b\n");
    DT_CHECK_ERR(dt__kube_connect(&k, &c), DT_ERR_SPEC, "not a kubeconfig");
}

static void test_env_and_in_cluster(void) {
    char list[1200];
    snprintf(list, sizeof list, "%s/missing:%s", dir, write_file("config", two_contexts));
    setenv("KUBECONFIG", list, 1);
    dt__kube *k;
    dt__kube_conn c = {0};
    DT_CHECK_OK(dt__kube_connect(&k, &c)); /* the first file of the list that exists */
    DT_CHECK(!strcmp(dt__kube_namespace(k), "team-a"));
    dt__kube_free(k);
    unsetenv("KUBECONFIG");
    unsetenv("KUBERNETES_SERVICE_HOST");
    c.in_cluster = 1;
    DT_CHECK_ERR(dt__kube_connect(&k, &c), DT_ERR_STATE, "KUBERNETES_SERVICE_HOST is not set");
}

static void test_yaml_as_json(void) {
    static const char doc[] = "a: 1\nb: '1'\nc: true\nd: ~\ne: 1.5\nf: [x, 2]\ng: yes\nh: -3\n"
                              "i: 0644\nj: 0x1F\nk: '0644'\nl: off\nm: 08\n";
    dt__ystream *s;
    dt__ydoc *d;
    DT_CHECK_OK(dt__ystream_open_mem(&s, doc, sizeof doc - 1, "t.yaml"));
    DT_CHECK_OK(dt__ystream_next(s, &d));
    dt__yval root;
    dt__ydoc_root(d, "", &root);
    json_t *j;
    DT_CHECK_OK(dt__yval_to_json(&root, &j));
    char *text = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
    /* YAML 1.1 as sigs.k8s.io/yaml reads it: yes/off booleans, 0644 octal (a defaultMode
     * of 420), 0x1F hex; 08 is no octal number (a float, 8, as go-yaml reads it) */
    DT_CHECK(!strcmp(text, "{\"a\":1,\"b\":\"1\",\"c\":true,\"d\":null,\"e\":1.5,\"f\":[\"x\",2],"
                           "\"g\":true,\"h\":-3,\"i\":420,\"j\":31,\"k\":\"0644\",\"l\":false,"
                           "\"m\":8}"));
    free(text);
    json_decref(j);
    dt__ydoc_free(d);
    dt__ystream_free(s);
}

static void setup(void) {
    if (!mkdtemp(dir)) abort();
}

static void teardown(void) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    DT_CHECK(system(cmd) == 0);
}

DT_TEST_MAIN(DT_T(setup), DT_T(test_current_context), DT_T(test_named_context_and_files),
             DT_T(test_errors), DT_T(test_env_and_in_cluster), DT_T(test_yaml_as_json), DT_T(teardown))
